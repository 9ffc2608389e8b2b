"""The dispatch policies side by side, each as its authors run it, all seeing the same market.

- `time_only`: today's aisched in one cluster: the job's home region only, started when the carbon
  planner (`plan_start`, with the forecast's error) says, within its deadline.
- `cheapest_first`: SkyPilot's optimizer and failover: the region where the run costs least now
  (its GPU-hours at the current spot or on-demand price, plus moving its data there, as SkyPilot
  counts egress), failing over to the next cheapest when that one has no room.
- `lowest_intensity`: a carbon-aware dispatcher without forecasts: of the regions with room, the one
  whose grid is cleanest now.
- `first_to_admit`: MultiKueue's default: the workload is offered to every worker and runs on the
  first that admits it (the workers' configured order breaks a tie, where MultiKueue has a race).
- `aisched`: aisched.policy.regions.choose_region over the regions with room, deferring in time and
  place together within the deadline.

Policies that defer look again when the start they planned comes (re-planning with the newer
forecast), as the operator does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from aisched.api.common import SpotPolicy
from aisched.policy.carbon import DeferrableJob, PlanOptions, plan_start
from aisched.policy.regions import RegionJob, RegionOffer, RegionSettings, choose_region
from aisched.policy.spot import CapacityChoice, SpotJob, choose_capacity
from aisched.sim.regions.engine import EPS, Decision, Defer, JobState, Market, Policy, Start
from aisched.sim.regions.jobs import RegionalJob
from aisched.sim.regions.world import Region


def _spot_when_there(region: Region, now: float) -> Start:
    """Spot whenever the zone has it, on-demand otherwise: a spot-first Karpenter NodePool's fallback, and
    SkyPilot's managed spot jobs (which recover a preempted job on the cheapest capacity again)."""
    return Start(region.name, region.spot_at(now))


def _aisched_capacity(state: JobState, region: Region, now: float, market: Market) -> bool:
    """Whether aisched runs the job on spot there: its Prefer policy, which takes spot only while an
    interruption at the worst moment would still leave on-demand time to meet the deadline. Where it
    would wait for spot in one cluster, here it runs on-demand at once: other regions' spot is the
    alternative to waiting, and the choice of region already weighed it."""
    grid = region.grid
    deadline = state.job.deadline
    job = SpotJob(state.left, market.costs.restore_s)
    decision = choose_capacity(
        SpotPolicy.PREFER,
        job,
        now=grid.at(now),
        deadline=grid.at(deadline) if deadline is not None else None,
        spot_available=region.spot_at(now),
        decision_period_s=market.costs.checkpoint_s,
    )
    return decision.choice == CapacityChoice.SPOT


@dataclass(frozen=True)
class FirstToAdmit:
    name: str = "first_to_admit"

    def allowed(self, job: RegionalJob, market: Market) -> Sequence[str] | None:
        return None

    def decide(self, state: JobState, now: float, market: Market) -> Decision:
        fitting = market.fitting(state.job.gpus)
        return _spot_when_there(fitting[0], now) if fitting else None


@dataclass(frozen=True)
class CheapestFirst:
    name: str = "cheapest_first"

    def allowed(self, job: RegionalJob, market: Market) -> Sequence[str] | None:
        return None

    def decide(self, state: JobState, now: float, market: Market) -> Decision:
        def cost(region: Region) -> float:
            compute = state.job.gpus * state.left / 3600 * region.price_at(now)
            return compute + state.data_move_to(region.name, market.costs)

        fitting = market.fitting(state.job.gpus)
        return _spot_when_there(min(fitting, key=cost), now) if fitting else None


@dataclass(frozen=True)
class LowestIntensity:
    name: str = "lowest_intensity"

    def allowed(self, job: RegionalJob, market: Market) -> Sequence[str] | None:
        return None

    def decide(self, state: JobState, now: float, market: Market) -> Decision:
        fitting = market.fitting(state.job.gpus)
        return _spot_when_there(min(fitting, key=lambda r: r.intensity_at(now)), now) if fitting else None


@dataclass(frozen=True)
class TimeOnly:
    forecast_error: float
    name: str = "time_only"

    def allowed(self, job: RegionalJob, market: Market) -> Sequence[str] | None:
        return [job.home]

    def decide(self, state: JobState, now: float, market: Market) -> Decision:
        home = market.by_name[state.job.home]
        if state.job.deadline is not None:
            planned = _planned_start(state, home, now, market, self.forecast_error)
            if planned > now + EPS:
                return Defer(planned)
        if market.free[home.name] < state.job.gpus:
            return None
        return Start(home.name, _aisched_capacity(state, home, now, market))


def _planned_start(state: JobState, region: Region, now: float, market: Market, error: float) -> float:
    grid, deadline = region.grid, state.job.deadline
    assert deadline is not None
    restore = market.costs.restore_s if state.restores else 0.0
    job = DeferrableJob(
        timedelta(seconds=state.left),
        market.costs.power_per_gpu_w * state.job.gpus,
        deadline=grid.at(deadline),
        submitted_at=grid.at(state.job.arrival),
        paused=state.restores,
    )
    options = PlanOptions(chunk_overhead=timedelta(seconds=restore), forecast_error=error)
    forecast = region.forecast(now, max(deadline, now + state.left + restore))
    return grid.offset(plan_start(forecast, grid.at(now), job, options).start)


@dataclass(frozen=True)
class Aisched:
    settings: RegionSettings
    name: str = "aisched"

    def allowed(self, job: RegionalJob, market: Market) -> Sequence[str] | None:
        return None

    def decide(self, state: JobState, now: float, market: Market) -> Decision:
        fitting = market.fitting(state.job.gpus)
        if not fitting:
            return None
        grid = fitting[0].grid
        deadline = state.job.deadline
        # A resumed run restores first: planned as part of the work, so that the deadline holds.
        work = state.left + (market.costs.restore_s if state.restores else 0.0)
        until = max(deadline if deadline is not None else now, now + work)
        job = RegionJob(
            gpus=state.job.gpus,
            expected_duration=timedelta(seconds=work),
            power_w=market.costs.power_per_gpu_w * state.job.gpus,
            submitted_at=grid.at(state.job.arrival),
            deadline=grid.at(deadline) if deadline is not None else None,
            data_regions=frozenset({state.job.home, *state.moved_to}),
            data_move_cost=market.costs.data_move_cost,
            spot_reserve=timedelta(seconds=market.costs.checkpoint_s + market.costs.restore_s),
        )
        offers = [
            RegionOffer(
                r.name,
                grid.at(now),
                r.on_demand_price,
                r.forecast(now, until),
                spot_gpu_hour_price=r.spot_price if r.spot_at(now) else None,
            )
            for r in fitting
        ]
        choice = choose_region(job, offers, grid.at(now), self.settings)
        assert choice is not None
        start = grid.offset(choice.start)
        if start > now + EPS:
            return Defer(start)
        return Start(choice.region, _aisched_capacity(state, market.by_name[choice.region], now, market))


def policies(settings: RegionSettings) -> list[Policy]:
    return [
        TimeOnly(settings.forecast_error),
        CheapestFirst(),
        LowestIntensity(),
        FirstToAdmit(),
        Aisched(settings),
    ]
