"""Carbon-aware deferral: when should a deferrable job run so that the grid is cleanest?

Pure: every function takes `now` (and the forecast) as arguments; nothing here reads
the clock or does I/O. The operator, the simulator and the benchmark call the same code.

A forecast is a step function: ``values[i]`` gCO2eq/kWh holds over
``[start + i*step, start + (i+1)*step)``. Emissions of a run are its power times the
integral of that function over the run, which prefix sums give in O(1) per window.

Re-planning is calling :func:`plan_start` again with a newer forecast, the current time
and the same deadline (and, for a job that already ran some chunks, the work still left
as ``expected_duration``). Nothing is remembered between calls; ``latest_start`` depends
only on the deadline (or the submission time and maximum delay) and the duration, so no
sequence of re-plans can move a start past it, whatever the forecasts say.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property, partial
from itertools import pairwise

# Seconds per hour and watts per kilowatt: grams = W/1000 * (g/kWh * s)/3600.
_GRAM_SECONDS_TO_KWH = 1000.0 * 3600.0
# Float slack when comparing times in seconds and costs in g/kWh*s.
_EPS_S = 1e-6


class ForecastCoverageError(ValueError):
    """A question about a time the forecast does not cover."""


@dataclass(frozen=True, slots=True)
class IntensityPoint:
    """Grid carbon intensity from `time` on (gCO2eq/kWh); `time` is timezone-aware."""

    time: datetime
    grams_per_kwh: float


@dataclass(frozen=True, slots=True)
class RunChunk:
    """One stretch of running time, [start, end)."""

    start: datetime
    end: datetime

    @property
    def duration(self) -> timedelta:
        return self.end - self.start


@dataclass(frozen=True)
class Forecast:
    """Carbon intensity at a fixed step from `start`: a step function over [start, end)."""

    region: str
    start: datetime
    step: timedelta
    values: tuple[float, ...]
    issued_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.start.tzinfo is None:
            raise ValueError("forecast start must be timezone-aware")
        if self.step <= timedelta(0):
            raise ValueError(f"forecast step must be positive, got {self.step}")
        if not self.values:
            raise ValueError("a forecast needs at least one value")
        bad = [v for v in self.values if not math.isfinite(v) or v < 0]
        if bad:
            raise ValueError(f"carbon intensity must be a finite, non-negative number, got {bad[0]!r}")

    @property
    def end(self) -> datetime:
        return self.start + self.step * len(self.values)

    @property
    def points(self) -> tuple[IntensityPoint, ...]:
        return tuple(IntensityPoint(self.start + self.step * i, v) for i, v in enumerate(self.values))

    @cached_property
    def step_seconds(self) -> float:
        return self.step.total_seconds()

    @cached_property
    def _prefix(self) -> tuple[float, ...]:
        """prefix[i]: integral of intensity over the first i steps (g/kWh * s)."""
        sums = [0.0]
        for value in self.values:
            sums.append(sums[-1] + value * self.step_seconds)
        return tuple(sums)

    @property
    def total_seconds(self) -> float:
        return self.step_seconds * len(self.values)

    def offset(self, when: datetime) -> float:
        """Seconds from the forecast start to `when`."""
        return (when - self.start).total_seconds()

    def at_offset(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    def covers(self, start: datetime, end: datetime) -> bool:
        return self._covers_offsets(self.offset(start), self.offset(end))

    def _covers_offsets(self, a: float, b: float) -> bool:
        return a >= -_EPS_S and b <= self.total_seconds + _EPS_S and a <= b + _EPS_S

    def intensity_at(self, when: datetime) -> float:
        x = self.offset(when)
        if not self._covers_offsets(x, x) or x >= self.total_seconds:
            raise ForecastCoverageError(f"{when.isoformat()} is outside the forecast [{self._span()}]")
        return self.values[self._index(x)]

    def integral(self, start: datetime, end: datetime) -> float:
        """Integral of intensity over [start, end), in g/kWh * s."""
        a, b = self.offset(start), self.offset(end)
        if not self._covers_offsets(a, b):
            raise ForecastCoverageError(
                f"[{start.isoformat()}, {end.isoformat()}) is outside the forecast [{self._span()}]"
            )
        return self._cumulative(b) - self._cumulative(a)

    def clip(self, start: datetime, end: datetime) -> Forecast:
        """The steps that overlap [start, end); the step grid stays where it is."""
        first = max(0, math.floor(self.offset(start) / self.step_seconds + _EPS_S))
        last = min(len(self.values), math.ceil(self.offset(end) / self.step_seconds - _EPS_S))
        if first >= last:
            raise ForecastCoverageError(f"the forecast [{self._span()}] has nothing in [{start}, {end})")
        return Forecast(self.region, self.start + self.step * first, self.step, self.values[first:last], self.issued_at)

    def _index(self, x: float) -> int:
        return min(len(self.values) - 1, max(0, int(x // self.step_seconds)))

    def _cumulative(self, x: float) -> float:
        """Integral from the forecast start to offset x (clamped to the covered span)."""
        x = min(max(x, 0.0), self.total_seconds)
        i = self._index(x)
        return self._prefix[i] + self.values[i] * (x - i * self.step_seconds)

    def _span(self) -> str:
        return f"{self.start.isoformat()}, {self.end.isoformat()})"


def forecast_from_points(
    region: str,
    points: Sequence[IntensityPoint],
    *,
    step: timedelta | None = None,
    issued_at: datetime | None = None,
) -> Forecast:
    """A fixed-step forecast from points at any spacing.

    The step is the smallest gap between points unless given. Each step takes the value of
    the latest point at or before it, so gaps hold the previous value and points closer
    than the step are thinned to one per step.
    """
    if not points:
        raise ValueError("no carbon intensity points")
    by_time = {p.time: p.grams_per_kwh for p in points}
    times = sorted(by_time)
    if step is None:
        gaps = [b - a for a, b in pairwise(times)]
        if not gaps:
            raise ValueError("one point gives no step: pass step explicitly")
        step = min(gaps)
    values: list[float] = []
    next_point = 0
    current = by_time[times[0]]
    slot = times[0]
    while slot <= times[-1]:
        while next_point < len(times) and times[next_point] <= slot:
            current = by_time[times[next_point]]
            next_point += 1
        values.append(current)
        slot += step
    return Forecast(region, times[0], step, tuple(values), issued_at)


def emissions_grams(power_w: float, grams_per_kwh_seconds: float) -> float:
    """Grams of CO2eq from a power draw and an intensity integral (g/kWh * s)."""
    return power_w * grams_per_kwh_seconds / _GRAM_SECONDS_TO_KWH


def estimate_emissions(
    power_w: float,
    intensity_series: Forecast | Sequence[IntensityPoint],
    start: datetime,
    end: datetime,
) -> float:
    """Grams of CO2eq drawn by `power_w` watts over [start, end).

    A Forecast must cover the interval. A sequence of observed points is a step function
    in which each point holds until the next and the last holds on to `end` (the latest
    reading is the best estimate of what follows); it must start at or before `start`.
    """
    if end <= start:
        return 0.0
    if isinstance(intensity_series, Forecast):
        return emissions_grams(power_w, intensity_series.integral(start, end))
    points = sorted(intensity_series, key=lambda p: p.time)
    if not points or points[0].time > start:
        raise ForecastCoverageError(f"no carbon intensity reading at or before {start.isoformat()}")
    total = 0.0
    for here, following in zip(points, [*points[1:], None], strict=True):
        seg_start = max(here.time, start)
        seg_end = min(following.time if following else end, end)
        if seg_end > seg_start:
            total += here.grams_per_kwh * (seg_end - seg_start).total_seconds()
    return emissions_grams(power_w, total)


class PlanReason(StrEnum):
    """Why a plan starts when it does; CamelCase so it can be a condition reason."""

    CLEANEST_WINDOW = "CleanestWindow"
    CLEANEST_CHUNKS = "CleanestChunks"
    NOW_IS_CLEANEST = "NowIsCleanest"
    SAVING_TOO_SMALL = "SavingTooSmall"
    BELOW_THRESHOLD = "BelowThreshold"
    THRESHOLD_NOT_REACHED = "ThresholdNotReached"
    FORECAST_UNAVAILABLE = "ForecastUnavailable"
    FORECAST_TOO_SHORT = "ForecastTooShort"
    LATEST_START_REACHED = "LatestStartReached"
    DEADLINE_UNREACHABLE = "DeadlineUnreachable"


@dataclass(frozen=True)
class CarbonPlan:
    """When a job runs and what the forecast says that saves against starting now.

    `chunks` is one chunk for a job that cannot be interrupted, and the pieces in
    time order for one that can. Grams are None where the forecast cannot tell.
    """

    start: datetime
    chunks: tuple[RunChunk, ...]
    latest_start: datetime
    reason: PlanReason
    message: str
    intensity_at_start: float | None = None
    planned_grams: float | None = None
    immediate_grams: float | None = None

    @property
    def end(self) -> datetime:
        return self.chunks[-1].end

    @property
    def saving_grams(self) -> float | None:
        if self.planned_grams is None or self.immediate_grams is None:
            return None
        return self.immediate_grams - self.planned_grams

    @property
    def saving_fraction(self) -> float | None:
        saving = self.saving_grams
        if saving is None or self.immediate_grams is None or self.immediate_grams <= 0:
            return None
        return saving / self.immediate_grams

    @property
    def saving_percent(self) -> float | None:
        fraction = self.saving_fraction
        return None if fraction is None else 100.0 * fraction

    def is_deferred(self, now: datetime) -> bool:
        return self.start > now


def latest_start(
    now: datetime,
    expected_duration: timedelta,
    *,
    deadline: datetime | None = None,
    max_delay: timedelta | None = None,
    submitted_at: datetime | None = None,
) -> datetime:
    """The last start that still finishes by the deadline and within the maximum delay."""
    bounds = []
    if deadline is not None:
        bounds.append(deadline - expected_duration)
    if max_delay is not None:
        bounds.append((submitted_at or now) + max_delay)
    if not bounds:
        raise ValueError("a deferrable job needs a deadline or a maximum delay")
    return min(bounds)


@dataclass(frozen=True)
class _Job:
    """The planner's view of a request, in seconds from the forecast start.

    `latest` is the latest start after now (a resume, for a job that ran before), and
    `end_bound` when the work must be done. A first chunk spends `first_now` restoring
    if it starts now and `first_later` if it starts later; every other chunk `overhead`.
    """

    forecast: Forecast
    now: float
    work: float
    latest: float
    end_bound: float
    power_w: float
    overhead: float = 0.0
    first_now: float = 0.0
    first_later: float = 0.0

    def first_overhead(self, start: float) -> float:
        return self.first_now if start <= self.now + _EPS_S else self.first_later

    def run_from(self, start: float) -> tuple[float, float]:
        """One uninterrupted run from `start`."""
        return start, start + self.work + self.first_overhead(start)

    def grams(self, chunks: Sequence[tuple[float, float]]) -> float:
        fc = self.forecast
        return emissions_grams(self.power_w, sum(fc._cumulative(b) - fc._cumulative(a) for a, b in chunks))


def plan_start(
    forecast: Forecast | None,
    now: datetime,
    expected_duration: timedelta,
    *,
    power_w: float,
    deadline: datetime | None = None,
    max_delay: timedelta | None = None,
    submitted_at: datetime | None = None,
    interruptible: bool = False,
    threshold_grams_per_kwh: float | None = None,
    min_chunk: timedelta = timedelta(minutes=30),
    chunk_overhead: timedelta = timedelta(0),
    min_saving_fraction: float = 0.0,
    forecast_error: float = 0.0,
    running: bool = False,
    paused: bool = False,
) -> CarbonPlan:
    """Choose when a deferrable job runs.

    Forecast mode (no threshold): the start in [now, latest_start] with the least forecast
    emissions over the run, found exactly for a step-function forecast (the window integral
    is piecewise linear in the start, so its minimum is at `now`, `latest_start`, or a start
    or end on a step boundary; prefix sums price each candidate in O(1)). An interruptible
    job may instead run in chunks in the cleanest steps before the deadline: each chunk
    lasts at least `min_chunk` (the last may end early when the work is done) and every
    chunk after the first spends `chunk_overhead` restoring before it does work.

    Threshold mode: start at the first time the forecast is below the threshold (an
    interruptible job runs in every stretch below it), and never later than the latest
    start; the rest of an interruptible job runs as late as the deadline allows.

    `forecast_error` is the forecast's typical error as a fraction of the mean intensity
    (its relative standard deviation). Given it, forecast values after the current step
    are shrunk towards the window's mean by the share of their variance that is signal,
    so that the cleanest-looking times, cleanest partly through forecast error, are not
    trusted more than they deserve against the current step (taken as observed).

    Re-planning a job that already ran: `expected_duration` is the work left; `running`
    says it runs now (continuing costs nothing, stopping and resuming later costs a
    `chunk_overhead`), `paused` that it is stopped (any start restores a checkpoint,
    so the first chunk pays the overhead too). The latest start accounts for that.

    With no forecast for `now`, or one too short for a single run, the job starts now:
    nothing says waiting helps, and waiting could only lose the deadline. A forecast that
    ends before `latest_start` is used as far as it goes.
    """
    if power_w < 0:
        raise ValueError(f"power must not be negative, got {power_w} W")
    if expected_duration <= timedelta(0):
        raise ValueError(f"expected duration must be positive, got {expected_duration}")
    if running and paused:
        raise ValueError("a job is either running or paused, not both")
    overhead = chunk_overhead.total_seconds()
    first_now = overhead if paused else 0.0
    first_later = overhead if running or paused else 0.0
    fresh_latest = latest_start(
        now, expected_duration, deadline=deadline, max_delay=max_delay, submitted_at=submitted_at
    )
    latest = fresh_latest - timedelta(seconds=first_later)
    run_now = expected_duration + timedelta(seconds=first_now)
    if now >= latest:
        return _start_now_late(forecast, now, run_now, latest, fresh_latest + expected_duration, power_w)
    if forecast is None or not forecast.covers(now, now):
        return _start_now(
            forecast,
            now,
            run_now,
            latest,
            power_w,
            PlanReason.FORECAST_UNAVAILABLE,
            "no carbon forecast covers now; starting at once",
        )
    if forecast_error > 0:
        forecast = shrink_forecast(forecast, now, fresh_latest + expected_duration, forecast_error)
    job = _Job(
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
    if threshold_grams_per_kwh is not None:
        return _plan_threshold(job, threshold_grams_per_kwh, interruptible, min_chunk)
    return _plan_forecast(job, interruptible, min_chunk, min_saving_fraction)


def shrink_forecast(forecast: Forecast, now: datetime, until: datetime, relative_error: float) -> Forecast:
    """The expected intensity given a forecast with independent errors of the given size.

    Over the steps after the one holding `now` and up to `until`, the forecast's variance is
    signal plus error; each value moves towards their mean by the error's share of it (the
    best linear predictor of the truth). The step holding `now` is left as it is.
    """
    first = forecast._index(forecast.offset(now)) + 1
    last = min(len(forecast.values), math.ceil(forecast.offset(until) / forecast.step_seconds))
    ahead = forecast.values[first:last]
    if len(ahead) < 2:
        return forecast
    mean = sum(ahead) / len(ahead)
    variance = sum((v - mean) ** 2 for v in ahead) / (len(ahead) - 1)
    noise = (relative_error * mean) ** 2
    keep = max(0.0, variance - noise) / variance if variance > 0 else 0.0
    shrunk = tuple(mean + keep * (v - mean) for v in ahead)
    values = forecast.values[:first] + shrunk + forecast.values[last:]
    return Forecast(forecast.region, forecast.start, forecast.step, values, forecast.issued_at)


def _immediate_grams(job: _Job) -> float | None:
    now_run = job.run_from(job.now)
    if now_run[1] > job.forecast.total_seconds + _EPS_S:
        return None
    return job.grams([now_run])


def _start_now(
    forecast: Forecast | None,
    now: datetime,
    duration: timedelta,
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
    forecast: Forecast | None, now: datetime, run: timedelta, latest: datetime, done_by: datetime, power_w: float
) -> CarbonPlan:
    late = now + run - done_by
    if late <= timedelta(seconds=1):
        reason, message = PlanReason.LATEST_START_REACHED, "the latest start that meets the deadline is now"
    else:
        reason = PlanReason.DEADLINE_UNREACHABLE
        message = f"starting now still ends {_human(late)} after the deadline"
    return _start_now(forecast, now, run, latest, power_w, reason, message)


def _plan_from_offsets(
    job: _Job,
    chunks: Sequence[tuple[float, float]],
    reason: PlanReason,
    message: str,
) -> CarbonPlan:
    fc = job.forecast
    start = chunks[0][0]
    covered = chunks[-1][1] <= fc.total_seconds + _EPS_S
    planned = job.grams(chunks) if covered else None
    intensity = fc.values[fc._index(start)] if start < fc.total_seconds else None
    return CarbonPlan(
        start=fc.at_offset(start),
        chunks=tuple(RunChunk(fc.at_offset(a), fc.at_offset(b)) for a, b in chunks),
        latest_start=fc.at_offset(job.latest),
        reason=reason,
        message=message,
        intensity_at_start=intensity,
        planned_grams=planned,
        immediate_grams=_immediate_grams(job),
    )


def _best_window(job_forecast: Forecast, now: float, latest: float, work: float) -> tuple[float, float] | None:
    """(start offset, integral) of the cleanest single run of `work` seconds starting in
    [now, latest] and wholly inside the forecast; the earliest on ties; None if none fits."""
    hi = min(latest, job_forecast.total_seconds - work)
    if hi < now - _EPS_S:
        return None
    hi = max(hi, now)
    step = job_forecast.step_seconds
    candidates = [now, hi]
    for shift in (0.0, work):  # the run's start, or its end, on a step boundary
        k = math.floor((now + shift) / step) + 1
        while k * step - shift < hi:
            candidates.append(k * step - shift)
            k += 1
    cumulative = job_forecast._cumulative
    best_start, best_cost = now, math.inf
    for start in sorted(candidates):
        cost = cumulative(start + work) - cumulative(start)
        if cost < best_cost - 1e-9 * max(1.0, cost):
            best_start, best_cost = start, cost
    return best_start, best_cost


def _plan_forecast(job: _Job, interruptible: bool, min_chunk: timedelta, min_saving_fraction: float) -> CarbonPlan:
    fc = job.forecast
    now_run = job.run_from(job.now)
    window = _best_window(fc, job.now, job.latest, job.work + job.first_later)
    if window is None:
        now = fc.at_offset(job.now)
        return _start_now(
            fc,
            now,
            timedelta(seconds=now_run[1] - now_run[0]),
            fc.at_offset(job.latest),
            job.power_w,
            PlanReason.FORECAST_TOO_SHORT,
            f"the forecast covers only the next {_human(fc.end - now)}, less than one run; starting at once",
        )
    start, cost = window
    immediate = fc._cumulative(now_run[1]) - fc._cumulative(now_run[0])
    if job.first_now != job.first_later and immediate <= cost + 1e-9 * max(1.0, cost):
        start, cost = now_run[0], immediate  # carrying on costs no restore
    chunks = [job.run_from(start)]
    reason = PlanReason.CLEANEST_WINDOW
    if interruptible:
        split = _cleanest_chunks(job, min_chunk.total_seconds())
        if split is not None and split[1] < cost - 1e-9 * max(1.0, cost):
            chunks, cost = split[0], split[1]
            reason = PlanReason.CLEANEST_CHUNKS
    saving = (immediate - cost) / immediate if immediate > 0 else 0.0
    if chunks[0][0] <= job.now + _EPS_S and len(chunks) == 1:
        return _plan_from_offsets(job, chunks, PlanReason.NOW_IS_CLEANEST, "now is the cleanest time to run")
    if saving < min_saving_fraction:
        return _plan_from_offsets(
            job,
            [now_run],
            PlanReason.SAVING_TOO_SMALL,
            f"waiting would save only {100 * saving:.1f}% (less than {100 * min_saving_fraction:.1f}%); "
            "starting at once",
        )
    plan = _plan_from_offsets(job, chunks, reason, "")
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


@dataclass(frozen=True)
class _Slots:
    """The forecast steps between now and the end bound, clipped at both ends."""

    starts: tuple[float, ...]
    ends: tuple[float, ...]
    costs: tuple[float, ...]  # integral over the slot, g/kWh * s

    @property
    def lengths(self) -> list[float]:
        return [b - a for a, b in zip(self.starts, self.ends, strict=True)]

    @classmethod
    def between(cls, fc: Forecast, begin: float, end: float) -> _Slots:
        step = fc.step_seconds
        starts, ends, costs = [], [], []
        k = math.floor(begin / step + _EPS_S)
        while k * step < end - _EPS_S:
            a, b = max(begin, k * step), min(end, (k + 1) * step)
            if b - a > _EPS_S:
                starts.append(a)
                ends.append(b)
                costs.append(fc.values[k] * (b - a))
            k += 1
        return cls(tuple(starts), tuple(ends), tuple(costs))


def _chunks_from_selection(slots: _Slots, selected: Sequence[int]) -> list[tuple[float, float]]:
    chunks: list[tuple[float, float]] = []
    for i in sorted(selected):
        if chunks and abs(chunks[-1][1] - slots.starts[i]) <= _EPS_S:
            chunks[-1] = (chunks[-1][0], slots.ends[i])
        else:
            chunks.append((slots.starts[i], slots.ends[i]))
    return chunks


def _trim_to_work(chunks: Sequence[tuple[float, float]], job: _Job) -> list[tuple[float, float]] | None:
    """Cut the tail so the chunks do exactly the job's work; None if they cannot."""
    done = 0.0
    out: list[tuple[float, float]] = []
    for a, b in chunks:
        lead = job.overhead if out else job.first_overhead(a)
        useful = (b - a) - lead
        if useful <= _EPS_S:
            continue
        if done + useful >= job.work - _EPS_S:
            out.append((a, a + lead + (job.work - done)))
            return out
        out.append((a, b))
        done += useful
    return None


def _cleanest_chunks(job: _Job, min_chunk: float) -> tuple[list[tuple[float, float]], float] | None:
    """Chunks on the forecast's step grid with the least forecast emissions (a DP).

    State per slot: how many slots are chosen so far (j), and whether a chunk is open and
    how many more slots it needs to reach `min_chunk`. Each chunk after the first is
    charged its overhead at the window's mean intensity, which steers the DP to fewer
    chunks; the exact work and cost of the best selection for each j is then checked
    (overhead steals time from a chunk), and the cheapest that does the work wins.
    The DP counts skipped slots instead of chosen ones when there are fewer of those
    (long jobs with little slack), so it costs O(slots * min(chosen, skipped)).
    """
    fc = job.forecast
    overhead = job.overhead
    end = min(job.end_bound, fc.total_seconds)
    slots = _Slots.between(fc, job.now, end)
    n = len(slots.costs)
    step = fc.step_seconds
    j_min = max(1, math.ceil(job.work / step - _EPS_S))
    if j_min > n:
        return None
    j_max = min(n, j_min + 1 + math.ceil((8 * overhead + job.first_later) / step))
    lengths = slots.lengths
    need = _slots_needed(lengths, min_chunk)
    choose: Callable[[int], list[int] | None]
    if overhead <= 0 and job.first_later <= 0 and all(k == 1 for k in need[1:]):
        # Free splits and no minimum to keep: the j cheapest slots are the DP's answer.
        order = sorted(range(n), key=slots.costs.__getitem__)
        choose = partial(_cheapest_slots, order, slots.costs, need[0])
    else:
        mean_intensity = sum(slots.costs) / max(_EPS_S, sum(lengths))
        count_skips = n - j_min < j_max
        table = _chunk_dp(
            slots.costs,
            need,
            n - j_min if count_skips else j_max,
            overhead * mean_intensity,
            count_skips=count_skips,
        )
        choose = partial(_backtrack, table) if not count_skips else lambda j: _backtrack(table, n - j)
    best: tuple[list[tuple[float, float]], float] | None = None
    for j in range(j_min, j_max + 1):
        selected = choose(j)
        if selected is None:
            continue
        trimmed = _trim_to_work(_chunks_from_selection(slots, selected), job)
        if trimmed is None or trimmed[-1][1] > end + _EPS_S:
            continue
        cost = sum(fc._cumulative(b) - fc._cumulative(a) for a, b in trimmed)
        if best is None or cost < best[1] - 1e-9 * max(1.0, cost):
            best = (trimmed, cost)
    return best


def _cheapest_slots(order: Sequence[int], costs: Sequence[float], head: int, j: int) -> list[int] | None:
    """The j cheapest slots; a first (partial) slot shorter than the minimum chunk comes
    only with the `head` slots that make it long enough, so try it with and without them."""
    if head == 1:
        return list(order[:j])
    without = [k for k in order if k != 0][:j]
    forced = list(range(head))
    with_head = forced + [k for k in order if k >= head][: j - head] if j >= head else None
    options = [o for o in (without, with_head) if o is not None and len(o) == j]
    return min(options, key=lambda o: sum(costs[k] for k in o)) if options else None


def _slots_needed(lengths: Sequence[float], min_chunk: float) -> list[int]:
    """need[i]: consecutive slots from i that add up to min_chunk; all the rest if they cannot.

    A chunk that cannot reach min_chunk before the horizon runs to the horizon, so it is
    the last chunk, the one allowed to be short.
    """
    n = len(lengths)
    need = []
    for i in range(n):
        total, k = 0.0, 0
        while i + k < n and total < min_chunk - _EPS_S:
            total += lengths[i + k]
            k += 1
        need.append(max(1, k))
    return need


# DP states: before any chunk, between chunks, or 2 + s: in a chunk that needs s more slots.
_NOT_STARTED, _BETWEEN, _MAY_END = 0, 1, 2
# Where skipping a slot leads; an open chunk still short of min_chunk cannot stop.
_SKIP_TO = {_NOT_STARTED: _NOT_STARTED, _BETWEEN: _BETWEEN, _MAY_END: _BETWEEN}


@dataclass(frozen=True)
class _ChunkTable:
    """The DP's final costs per (state, count) and, per slot, each state's parent (state*2 + took)."""

    final: list[list[float]]
    parents: list[list[list[int]]]
    count_skips: bool


def _chunk_dp(
    costs: Sequence[float], need: Sequence[int], limit: int, chunk_penalty: float, *, count_skips: bool
) -> _ChunkTable:
    """Forward DP over slots; `count` is chosen slots, or skipped ones if count_skips."""
    n_states = 2 + max(need)
    inf = math.inf
    cost = [[inf] * (limit + 1) for _ in range(n_states)]
    cost[_NOT_STARTED][0] = 0.0
    take_adds, skip_adds = (0, 1) if count_skips else (1, 0)
    parents: list[list[list[int]]] = []
    for k, slot_cost in enumerate(costs):
        new = [[inf] * (limit + 1) for _ in range(n_states)]
        par = [[-1] * (limit + 1) for _ in range(n_states)]
        for state in range(n_states):
            row = cost[state]
            skip_to = _SKIP_TO.get(state, -1)
            take_to = 2 + max(0, state - 3) if state >= _MAY_END else 2 + need[k] - 1
            extra = slot_cost + (chunk_penalty if state == _BETWEEN else 0.0)
            new_take, par_take = new[take_to], par[take_to]
            for c in range(limit + 1):
                value = row[c]
                if value == inf:
                    continue
                if skip_to >= 0 and c + skip_adds <= limit and value < new[skip_to][c + skip_adds]:
                    new[skip_to][c + skip_adds] = value
                    par[skip_to][c + skip_adds] = state * 2
                if c + take_adds <= limit and value + extra < new_take[c + take_adds]:
                    new_take[c + take_adds] = value + extra
                    par_take[c + take_adds] = state * 2 + 1
        cost = new
        parents.append(par)
    return _ChunkTable(cost, parents, count_skips)


def _backtrack(table: _ChunkTable, count: int) -> list[int] | None:
    """The slots chosen by the cheapest path that ends with this count, if any."""
    if not 0 <= count < len(table.final[0]):
        return None
    value, state = min((row[count], state) for state, row in enumerate(table.final) if state != _NOT_STARTED)
    if value == math.inf:
        return None
    selected = []
    for k in range(len(table.parents) - 1, -1, -1):
        state, took = divmod(table.parents[k][state][count], 2)
        if took:
            selected.append(k)
        if took != table.count_skips:
            count -= 1
    return selected


def _plan_threshold(job: _Job, threshold: float, interruptible: bool, min_chunk: timedelta) -> CarbonPlan:
    fc = job.forecast
    if interruptible:
        return _plan_threshold_chunks(job, threshold, min_chunk.total_seconds())
    step = fc.step_seconds
    t = job.now
    horizon = min(job.latest, fc.total_seconds - _EPS_S)
    while t <= horizon + _EPS_S:
        if fc.values[fc._index(t)] < threshold:
            when = "now" if t <= job.now + _EPS_S else f"at {fc.at_offset(t):%Y-%m-%d %H:%M} UTC"
            return _plan_from_offsets(
                job, [job.run_from(t)], PlanReason.BELOW_THRESHOLD, f"forecast below {threshold:.0f} gCO2eq/kWh {when}"
            )
        t = (math.floor(t / step + _EPS_S) + 1) * step
    return _plan_from_offsets(
        job,
        [job.run_from(job.latest)],
        PlanReason.THRESHOLD_NOT_REACHED,
        f"forecast never below {threshold:.0f} gCO2eq/kWh before the latest start; starting then",
    )


def _plan_threshold_chunks(job: _Job, threshold: float, min_chunk: float) -> CarbonPlan:
    """Run in every stretch below the threshold; whatever is left runs as late as possible."""
    fc = job.forecast
    slots = _Slots.between(fc, job.now, min(job.end_bound, fc.total_seconds))
    clean = [i for i, a in enumerate(slots.starts) if fc.values[fc._index(a)] < threshold]
    runs = [(a, b) for a, b in _chunks_from_selection(slots, clean) if b - a >= min_chunk - _EPS_S]
    trimmed = _trim_to_work(runs, job)
    if trimmed is not None:
        return _plan_from_offsets(
            job, trimmed, PlanReason.BELOW_THRESHOLD, f"runs while the forecast is below {threshold:.0f} gCO2eq/kWh"
        )
    # Keep the longest prefix of clean runs that still leaves room for the rest at the end.
    for keep in range(len(runs), 0, -1):
        kept = runs[:keep]
        done = sum(b - a for a, b in kept) - job.first_overhead(kept[0][0]) - job.overhead * (keep - 1)
        tail_start = job.end_bound - (job.work - done) - job.overhead
        if tail_start >= kept[-1][1] - _EPS_S:
            chunks = [*kept, (tail_start, job.end_bound)]
            if tail_start <= kept[-1][1] + _EPS_S:  # the tail carries on from the last clean run
                chunks = [*kept[:-1], (kept[-1][0], job.end_bound - job.overhead)]
            return _plan_from_offsets(
                job,
                chunks,
                PlanReason.THRESHOLD_NOT_REACHED,
                f"too little time below {threshold:.0f} gCO2eq/kWh; the rest runs just before the deadline",
            )
    return _plan_from_offsets(
        job,
        [job.run_from(job.latest)],
        PlanReason.THRESHOLD_NOT_REACHED,
        f"too little time below {threshold:.0f} gCO2eq/kWh; starting at the latest start",
    )


def _human(delta: timedelta) -> str:
    minutes = round(delta.total_seconds() / 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
