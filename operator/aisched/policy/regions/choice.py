"""Where a job runs among several clusters: the cheapest that meets its deadline, then the cleanest within a slack.

Pure: the regions come in as offers (what each worker cluster reported, priced by the
caller), time is an argument. The manager's dispatcher and the simulator call the same
function.

The rule, in order:

1. A region that cannot take the gang at all (no such GPU, refused) is not an offer.
2. Each offer gets a plan: a job that may be deferred is planned in that region's
   forecast from the moment its gang fits there (`plan_start`, the same planner a
   single cluster uses); one that may not starts then.
3. Offers whose plan ends by the deadline are the candidates (all of them when none
   does: then the one that ends first wins, so that it misses by least). A job that
   may not be deferred considers only the offers that start it soonest: where it runs
   never costs it time.
4. The cheapest candidate sets the floor; candidates within `cost_slack` of it stay.
5. Of those, the one whose plan emits least over the run wins; then the earliest end,
   then the lower cost, then the name (so that a tie is decided the same way everywhere).

Cost is GPU-hours at the price the offer quotes plus moving the job's data there when the
region is not one its data lives in. Spot's price counts only where the plan leaves the slack
an interruption needs before the deadline: deferring in time spends the slack that spot lives
on, and the choice prices that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from aisched.policy.carbon import (
    CarbonPlan,
    DeferrableJob,
    Forecast,
    PlanOptions,
    RunChunk,
    emissions_grams,
    plan_start,
)

SOONEST_SLACK = timedelta(minutes=1)
"""Offers whose start is within this of the soonest count as soonest for a job that may not wait."""


@dataclass(frozen=True)
class RegionOffer:
    """One region (one worker cluster) as the manager sees it when it chooses.

    `earliest_start` is when the whole gang can start there: now when it fits now,
    later when that cluster must provision first. `gpu_hour_price` is what one on-demand
    GPU-hour costs there; `spot_gpu_hour_price` what one on spot costs, None where the job
    may not use spot or the zone has none now. `forecast` is the region's carbon intensity
    forecast, None where there is none.
    """

    name: str
    earliest_start: datetime
    gpu_hour_price: float
    forecast: Forecast | None = None
    spot_gpu_hour_price: float | None = None

    def __post_init__(self) -> None:
        for price in (self.gpu_hour_price, self.spot_gpu_hour_price):
            if price is not None and (not math.isfinite(price) or price < 0):
                raise ValueError(f"region {self.name}: a GPU-hour price must be a non-negative number")


@dataclass(frozen=True)
class RegionJob:
    """A job to place: its gang, how long it runs, what it draws, when it must be done, where its data is.

    `deadline` None: the job may not be deferred (it starts as soon as it can).
    `data_regions` empty: its data goes anywhere for free (or it has none).
    `spot_reserve` is the slack spot needs before the deadline: what an interruption at the
    worst moment loses (a checkpoint interval) and the restart after it. A plan that ends
    closer to the deadline than that runs on-demand, as the spot policy Prefer would have it."""

    gpus: int
    expected_duration: timedelta
    power_w: float
    submitted_at: datetime
    deadline: datetime | None = None
    data_regions: frozenset[str] = frozenset()
    data_move_cost: float = 0.0
    spot_reserve: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError("a job needs at least one GPU")
        if self.expected_duration <= timedelta(0):
            raise ValueError("a job's expected duration must be positive")
        if not math.isfinite(self.data_move_cost) or self.data_move_cost < 0:
            raise ValueError("moving a job's data must cost a non-negative amount")


@dataclass(frozen=True)
class RegionSettings:
    """How much the manager trades for carbon: at most `cost_slack` more than the cheapest candidate
    (0: never more; of the regions as cheap as the cheapest, the cleanest)."""

    cost_slack: float = 0.0
    forecast_error: float = 0.0
    min_saving_fraction: float = 0.0
    shift_in_time: bool = True
    """Whether a job with a deadline may also be deferred (False: moved in space only)."""
    min_deferral_saving: float = 0.25
    """A deferral is taken only when it emits at least this share less than the best start now:
    waiting costs the job its completion time and the slack spot needs, and the capacity it
    counted on may be gone when it comes back."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.cost_slack) or self.cost_slack < 0:
            raise ValueError("the cost slack must be a non-negative fraction")


class ChoiceReason(StrEnum):
    CLEANEST = "Cleanest"
    """The cleanest of the regions within the cost slack."""
    ONLY = "OnlyRegion"
    """One region could take it."""
    LATE_EVERYWHERE = "LateEverywhere"
    """No region finishes it by its deadline: the one that finishes first."""


@dataclass(frozen=True)
class RegionEstimate:
    """What running the job in one region would be, as the choice weighed it."""

    region: str
    chunks: tuple[RunChunk, ...]
    cost: float
    grams: float | None
    plan: CarbonPlan | None
    """The carbon planner's plan for a job that may be deferred; None for one that starts when it fits."""
    spot: bool = False
    """Priced on spot: the zone has it and the plan leaves the slack an interruption needs."""

    @property
    def start(self) -> datetime:
        return self.chunks[0].start

    @property
    def end(self) -> datetime:
        return self.chunks[-1].end


@dataclass(frozen=True)
class RegionChoice:
    chosen: RegionEstimate
    reason: ChoiceReason
    message: str
    considered: tuple[RegionEstimate, ...]

    @property
    def region(self) -> str:
        return self.chosen.region

    @property
    def start(self) -> datetime:
        return self.chosen.start


def choose_region(
    job: RegionJob, offers: Sequence[RegionOffer], now: datetime, settings: RegionSettings = RegionSettings()
) -> RegionChoice | None:
    """The region the job should go to, and when it starts there; None when there is no offer."""
    if not offers:
        return None
    now_estimates = [estimate(job, offer, now, settings, defer=False) for offer in offers]
    candidates = _candidates(job, now_estimates)
    floor = min(e.cost for e in candidates)
    chosen = min(_affordable(candidates, floor, settings), key=_preference)
    considered = list(now_estimates)
    if job.deadline is not None and settings.shift_in_time and chosen.grams is not None:
        deferred = [estimate(job, offer, now, settings, defer=True) for offer in offers]
        considered += [e for e in deferred if e.start > now]
        bar = chosen.grams * (1 - settings.min_deferral_saving)
        worth = [
            e
            for e in _affordable(deferred, floor, settings)
            if e.start > now and e.end <= job.deadline and e.grams is not None and e.grams <= bar
        ]
        if worth:
            chosen = min(worth, key=_preference)
    if len(offers) == 1:
        reason, message = ChoiceReason.ONLY, f"only {chosen.region} can take it"
    elif job.deadline is not None and chosen.end > job.deadline:
        reason = ChoiceReason.LATE_EVERYWHERE
        message = f"no region finishes it by its deadline; {chosen.region} finishes it first"
    else:
        reason, message = ChoiceReason.CLEANEST, _cleanest_message(chosen, floor, settings)
    return RegionChoice(chosen, reason, message, tuple(considered))


def _affordable(estimates: Sequence[RegionEstimate], floor: float, settings: RegionSettings) -> list[RegionEstimate]:
    return [e for e in estimates if e.cost <= floor * (1 + settings.cost_slack) + 1e-9]


def estimate(
    job: RegionJob, offer: RegionOffer, now: datetime, settings: RegionSettings, *, defer: bool
) -> RegionEstimate:
    """The job's plan, cost and grams in one region: starting as soon as it fits there, or (DEFER) when
    the carbon planner says within the deadline."""
    start = max(now, offer.earliest_start)
    plan = _plan(job, offer, start, settings) if defer else None
    chunks = plan.chunks if plan is not None else (RunChunk(start, start + job.expected_duration),)
    hours = job.expected_duration.total_seconds() / 3600
    moved = job.data_move_cost if job.data_regions and offer.name not in job.data_regions else 0.0
    spot = offer.spot_gpu_hour_price is not None and (
        job.deadline is None or chunks[-1].end + job.spot_reserve <= job.deadline
    )
    price = offer.spot_gpu_hour_price if spot and offer.spot_gpu_hour_price is not None else offer.gpu_hour_price
    cost = job.gpus * hours * price + moved
    grams = _grams(chunks, offer.forecast, job.power_w)
    return RegionEstimate(offer.name, chunks, cost, grams, plan, spot)


def _plan(job: RegionJob, offer: RegionOffer, start: datetime, settings: RegionSettings) -> CarbonPlan | None:
    if job.deadline is None:
        return None
    deferrable = DeferrableJob(job.expected_duration, job.power_w, deadline=job.deadline, submitted_at=job.submitted_at)
    options = PlanOptions(forecast_error=settings.forecast_error, min_saving_fraction=settings.min_saving_fraction)
    return plan_start(offer.forecast, start, deferrable, options)


def _grams(chunks: Sequence[RunChunk], forecast: Forecast | None, power_w: float) -> float | None:
    if forecast is None or not all(forecast.covers(c.start, c.end) for c in chunks):
        return None
    return sum(emissions_grams(power_w, forecast.integral(c.start, c.end)) for c in chunks)


def _candidates(job: RegionJob, estimates: list[RegionEstimate]) -> list[RegionEstimate]:
    if job.deadline is None:
        soonest = min(e.start for e in estimates)
        return [e for e in estimates if e.start <= soonest + SOONEST_SLACK]
    on_time = [e for e in estimates if e.end <= job.deadline]
    if on_time:
        return on_time
    first_end = min(e.end for e in estimates)
    return [e for e in estimates if e.end <= first_end + SOONEST_SLACK]


def _preference(e: RegionEstimate) -> tuple[float, datetime, float, str]:
    return (math.inf if e.grams is None else e.grams, e.end, e.cost, e.region)


def _cleanest_message(chosen: RegionEstimate, floor: float, settings: RegionSettings) -> str:
    grams = "unknown" if chosen.grams is None else f"{chosen.grams / 1000:.1f} kg"
    premium = chosen.cost / floor - 1 if floor > 0 else 0.0
    when = f"deferred to {chosen.start:%Y-%m-%d %H:%M} UTC" if chosen.plan is not None else "now"
    return (
        f"{chosen.region} {when}: {grams} CO2eq, {100 * premium:.1f}% over the cheapest start "
        f"(at most {100 * settings.cost_slack:.0f}%)"
    )
