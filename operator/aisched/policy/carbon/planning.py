"""Start planning: when should a deferrable job run so that the grid is cleanest?

Re-planning is calling :func:`plan_start` again with a newer forecast, the current time
and the same deadline (and, for a job that already ran some chunks, the work still left
as ``expected_duration``). Nothing is remembered between calls; ``latest_start`` depends
only on the deadline (or the submission time and maximum delay) and the duration, so no
sequence of re-plans can move a start past it, whatever the forecasts say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from aisched.policy.carbon.cleanest_chunks import cleanest_chunks
from aisched.policy.carbon.emissions import emissions_grams
from aisched.policy.carbon.forecast import EPS_S, Forecast, shrink_forecast
from aisched.policy.carbon.offsets import OffsetJob, plan_from_offsets
from aisched.policy.carbon.plan import CarbonPlan, PlanReason, RunChunk, latest_start
from aisched.policy.carbon.threshold import plan_threshold


@dataclass(frozen=True)
class DeferrableJob:
    """A deferrable job as the planner sees it: the work it has left, the power it draws, the
    bounds on its start, and where it stands (`OffsetJob` is the same in seconds from the
    forecast's start).

    The latest start comes from `deadline` (the work must be done by then) and `max_delay`
    after `submitted_at` (or after now when that is unknown), whichever is first; a job
    needs one of them. `running` and `paused` describe a job that already ran some chunks.
    """

    expected_duration: timedelta
    power_w: float
    deadline: datetime | None = None
    max_delay: timedelta | None = None
    submitted_at: datetime | None = None
    running: bool = False
    paused: bool = False


@dataclass(frozen=True)
class PlanOptions:
    """How the planner may run a job: in chunks or in one run, by forecast or by threshold,
    and the operator's settings that price chunks and doubt forecasts."""

    interruptible: bool = False
    threshold_grams_per_kwh: float | None = None
    """Threshold mode when set; forecast mode (the cleanest window) when None."""
    min_chunk: timedelta = timedelta(minutes=30)
    chunk_overhead: timedelta = timedelta(0)
    """What every chunk after the first spends restoring before it does work."""
    min_saving_fraction: float = 0.0
    """A deferral that saves less than this share of starting now starts now."""
    forecast_error: float = 0.0
    """The forecast's typical error as a fraction of the mean intensity."""


def plan_start(
    forecast: Forecast | None, now: datetime, job: DeferrableJob, options: PlanOptions = PlanOptions()
) -> CarbonPlan:
    """Choose when a deferrable job runs.

    Forecast mode (no threshold): the start in [now, latest_start] with the least forecast
    emissions over the run, found exactly for a step-function forecast (the window integral
    is piecewise linear in the start, so its minimum is at `now`, `latest_start`, or a start
    or end on a step boundary; prefix sums price each candidate in O(1)). An interruptible
    job may instead run in chunks in the cleanest steps before the deadline: each chunk
    lasts at least `options.min_chunk` (the last may end early when the work is done) and every
    chunk after the first spends `options.chunk_overhead` restoring before it does work.

    Threshold mode: start at the first time the forecast is below the threshold (an
    interruptible job runs in every stretch below it), and never later than the latest
    start; the rest of an interruptible job runs as late as the deadline allows.

    `options.forecast_error` is the forecast's typical error as a fraction of the mean intensity
    (its relative standard deviation). Given it, forecast values after the current step
    are shrunk towards the window's mean by the share of their variance that is signal,
    so that the cleanest-looking times, cleanest partly through forecast error, are not
    trusted more than they deserve against the current step (taken as observed).

    Re-planning a job that already ran: `job.expected_duration` is the work left; `job.running`
    says it runs now (continuing costs nothing, stopping and resuming later costs a
    `chunk_overhead`), `job.paused` that it is stopped (any start restores a checkpoint,
    so the first chunk pays the overhead too). The latest start accounts for that.

    With no forecast for `now`, or one too short for a single run, the job starts now:
    nothing says waiting helps, and waiting could only lose the deadline. A forecast that
    ends before `latest_start` is used as far as it goes.
    """
    power_w, expected_duration = job.power_w, job.expected_duration
    if power_w < 0:
        raise ValueError(f"power must not be negative, got {power_w} W")
    if expected_duration <= timedelta(0):
        raise ValueError(f"expected duration must be positive, got {expected_duration}")
    if job.running and job.paused:
        raise ValueError("a job is either running or paused, not both")
    overhead = options.chunk_overhead.total_seconds()
    first_now = overhead if job.paused else 0.0
    first_later = overhead if job.running or job.paused else 0.0
    fresh_latest = latest_start(
        now, expected_duration, deadline=job.deadline, max_delay=job.max_delay, submitted_at=job.submitted_at
    )
    latest = fresh_latest - timedelta(seconds=first_later)
    run_now = expected_duration + timedelta(seconds=first_now)
    if now >= latest:
        return _start_now_late(
            forecast, now, run_now, latest=latest, done_by=fresh_latest + expected_duration, power_w=power_w
        )
    if forecast is None or not forecast.covers(now, now):
        return _start_now(
            forecast,
            now,
            run_now,
            latest=latest,
            power_w=power_w,
            reason=PlanReason.FORECAST_UNAVAILABLE,
            message="no carbon forecast covers now; starting at once",
        )
    if options.forecast_error > 0:
        forecast = shrink_forecast(forecast, now, fresh_latest + expected_duration, options.forecast_error)
    offsets = OffsetJob(
        forecast,
        forecast.offset(now),
        expected_duration.total_seconds(),
        forecast.offset(latest),
        forecast.offset(fresh_latest + expected_duration),
        power_w,
        overhead,
        first_now,
        first_later,
    )
    if options.threshold_grams_per_kwh is not None:
        return plan_threshold(offsets, options.threshold_grams_per_kwh, options.interruptible, options.min_chunk)
    return _plan_forecast(offsets, options.interruptible, options.min_chunk, options.min_saving_fraction)


FORECAST_RECHECK = timedelta(seconds=10)
"""How often a job waiting for its zone's first forecast read looks again."""


def forecast_awaited_until(asked_since: datetime, now: datetime, wait: timedelta) -> datetime | None:
    """When to plan again while a zone's first forecast read is under way, asked for since ASKED_SINCE;
    None once WAIT is over (then the zone is taken to have no forecast, as from a failing source)."""
    give_up = asked_since + wait
    if now >= give_up:
        return None
    return min(give_up, now + FORECAST_RECHECK)


def plan_awaiting_forecast(
    now: datetime, job: DeferrableJob, options: PlanOptions = PlanOptions(), *, until: datetime
) -> CarbonPlan:
    """The zone's forecast is still being read (a restarted operator's first read, a zone asked first):
    wait for it until UNTIL, never past the latest start; from then on, `plan_start` without one.

    Starting at once, as a failing source does, would throw away the deferral a forecast about to
    arrive would have planned; waiting a bounded while costs a job at most that while, within its
    deadline."""
    first_later = options.chunk_overhead if job.running or job.paused else timedelta(0)
    latest = (
        latest_start(
            now, job.expected_duration, deadline=job.deadline, max_delay=job.max_delay, submitted_at=job.submitted_at
        )
        - first_later
    )
    start = min(until, latest)
    if start <= now:
        return plan_start(None, now, job, options)
    run = job.expected_duration + (options.chunk_overhead if job.paused else timedelta(0))
    return CarbonPlan(
        start=start,
        chunks=(RunChunk(start, start + run),),
        latest_start=latest,
        reason=PlanReason.FORECAST_PENDING,
        message=f"the zone's carbon forecast is still being read; planned again by {start:%Y-%m-%d %H:%M:%S} UTC",
    )


def _start_now(
    forecast: Forecast | None,
    now: datetime,
    duration: timedelta,
    *,
    latest: datetime,
    power_w: float,
    reason: PlanReason,
    message: str,
) -> CarbonPlan:
    grams = None
    intensity = None
    if forecast is not None and forecast.covers(now, now + duration):
        grams = emissions_grams(power_w, forecast.integral(now, now + duration))
    if forecast is not None and forecast.covers(now, now) and now < forecast.end:
        intensity = forecast.intensity_at(now)
    return CarbonPlan(
        start=now,
        chunks=(RunChunk(now, now + duration),),
        latest_start=latest,
        reason=reason,
        message=message,
        intensity_at_start=intensity,
        planned_grams=grams,
        immediate_grams=grams,
    )


def _start_now_late(
    forecast: Forecast | None, now: datetime, run: timedelta, *, latest: datetime, done_by: datetime, power_w: float
) -> CarbonPlan:
    late = now + run - done_by
    if late <= timedelta(seconds=1):
        reason, message = PlanReason.LATEST_START_REACHED, "the latest start that meets the deadline is now"
    else:
        reason = PlanReason.DEADLINE_UNREACHABLE
        message = f"starting now still ends {_human(late)} after the deadline"
    return _start_now(forecast, now, run, latest=latest, power_w=power_w, reason=reason, message=message)


def _best_window(job_forecast: Forecast, now: float, latest: float, work: float) -> tuple[float, float] | None:
    """(start offset, integral) of the cleanest single run of `work` seconds starting in
    [now, latest] and wholly inside the forecast; the earliest on ties; None if none fits."""
    hi = min(latest, job_forecast.total_seconds - work)
    if hi < now - EPS_S:
        return None
    hi = max(hi, now)
    step = job_forecast.step_seconds
    candidates = [now, hi]
    for shift in (0.0, work):  # the run's start, or its end, on a step boundary
        k = math.floor((now + shift) / step) + 1
        while k * step - shift < hi:
            candidates.append(k * step - shift)
            k += 1
    cumulative = job_forecast.cumulative
    best_start, best_cost = now, math.inf
    for start in sorted(candidates):
        cost = cumulative(start + work) - cumulative(start)
        if cost < best_cost - 1e-9 * max(1.0, cost):
            best_start, best_cost = start, cost
    return best_start, best_cost


def _plan_forecast(job: OffsetJob, interruptible: bool, min_chunk: timedelta, min_saving_fraction: float) -> CarbonPlan:
    fc = job.forecast
    now_run = job.run_from(job.now)
    window = _best_window(fc, job.now, job.latest, job.work + job.first_later)
    if window is None:
        now = fc.at_offset(job.now)
        return _start_now(
            fc,
            now,
            timedelta(seconds=now_run[1] - now_run[0]),
            latest=fc.at_offset(job.latest),
            power_w=job.power_w,
            reason=PlanReason.FORECAST_TOO_SHORT,
            message=f"the forecast covers only the next {_human(fc.end - now)}, less than one run; starting at once",
        )
    start, cost = window
    immediate = fc.cumulative(now_run[1]) - fc.cumulative(now_run[0])
    if job.first_now != job.first_later and immediate <= cost + 1e-9 * max(1.0, cost):
        start, cost = now_run[0], immediate  # carrying on costs no restore
    chunks = [job.run_from(start)]
    reason = PlanReason.CLEANEST_WINDOW
    if interruptible:
        split = cleanest_chunks(job, min_chunk.total_seconds())
        if split is not None and split[1] < cost - 1e-9 * max(1.0, cost):
            chunks, cost = split[0], split[1]
            reason = PlanReason.CLEANEST_CHUNKS
    saving = (immediate - cost) / immediate if immediate > 0 else 0.0
    if chunks[0][0] <= job.now + EPS_S and len(chunks) == 1:
        return plan_from_offsets(job, chunks, PlanReason.NOW_IS_CLEANEST, "now is the cleanest time to run")
    if saving < min_saving_fraction:
        return plan_from_offsets(
            job,
            [now_run],
            PlanReason.SAVING_TOO_SMALL,
            f"waiting would save only {100 * saving:.1f}% (less than {100 * min_saving_fraction:.1f}%); "
            "starting at once",
        )
    plan = plan_from_offsets(job, chunks, reason, "")
    return _with_message(plan, fc, len(chunks))


def _with_message(plan: CarbonPlan, fc: Forecast, n_chunks: int) -> CarbonPlan:
    when = f"{plan.start:%Y-%m-%d %H:%M} UTC"
    what = f"start at {when}" if n_chunks == 1 else f"run in {n_chunks} chunks from {when}"
    parts = [what]
    if plan.intensity_at_start is not None:
        parts.append(f"forecast {plan.intensity_at_start:.0f} gCO2eq/kWh then")
    if plan.saving_percent is not None and plan.saving_grams is not None:
        parts.append(f"saving {plan.saving_percent:.1f}% ({plan.saving_grams:.0f} g) against starting now")
    parts.append(f"latest start {plan.latest_start:%Y-%m-%d %H:%M} UTC")
    if fc.end < plan.latest_start + (plan.chunks[-1].end - plan.start):
        parts.append(f"forecast ends {fc.end:%Y-%m-%d %H:%M} UTC")
    return CarbonPlan(
        start=plan.start,
        chunks=plan.chunks,
        latest_start=plan.latest_start,
        reason=plan.reason,
        message="; ".join(parts),
        intensity_at_start=plan.intensity_at_start,
        planned_grams=plan.planned_grams,
        immediate_grams=plan.immediate_grams,
    )


def _human(delta: timedelta) -> str:
    minutes = round(delta.total_seconds() / 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
