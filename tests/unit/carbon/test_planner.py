"""Properties of the carbon planner (aisched.policy.carbon), checked against brute force."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from aisched.policy.carbon import (
    CarbonPlan,
    Forecast,
    ForecastCoverageError,
    IntensityPoint,
    PlanReason,
    estimate_emissions,
    forecast_from_points,
    plan_start,
    shrink_forecast,
)

T0 = datetime(2020, 3, 2, tzinfo=UTC)
POWER_W = 1000.0


def naive_integral(fc: Forecast, start: datetime, end: datetime) -> float:
    """Integral of the step function by walking its steps (no prefix sums)."""
    total = 0.0
    for i, value in enumerate(fc.values):
        a = max(start, fc.start + fc.step * i)
        b = min(end, fc.start + fc.step * (i + 1))
        if b > a:
            total += value * (b - a).total_seconds()
    return total


def grams(fc: Forecast, start: datetime, end: datetime) -> float:
    return POWER_W * naive_integral(fc, start, end) / 3.6e6


def plan_grams(fc: Forecast, plan: CarbonPlan) -> float:
    return sum(grams(fc, c.start, c.end) for c in plan.chunks)


@st.composite
def jobs(draw: st.DrawFn) -> tuple[Forecast, datetime, timedelta, datetime]:
    """A forecast, a time inside it, a duration and a deadline, all in whole minutes."""
    step = draw(st.sampled_from([5, 15, 30, 60]))
    values = draw(st.lists(st.floats(0, 800, allow_nan=False), min_size=1, max_size=60))
    fc = Forecast("GB", T0, timedelta(minutes=step), tuple(values))
    span = step * len(values)
    now = T0 + timedelta(minutes=draw(st.integers(0, span - 1)))
    duration = timedelta(minutes=draw(st.integers(1, 2 * span)))
    deadline = now + duration + timedelta(minutes=draw(st.integers(0, 2 * span)))
    return fc, now, duration, deadline


@given(jobs(), st.booleans(), st.sampled_from([None, 100.0, 300.0]))
def test_never_starts_after_the_latest_feasible_start(
    job: tuple[Forecast, datetime, timedelta, datetime], interruptible: bool, threshold: float | None
) -> None:
    fc, now, duration, deadline = job
    plan = plan_start(
        fc,
        now,
        duration,
        power_w=POWER_W,
        deadline=deadline,
        interruptible=interruptible,
        threshold_grams_per_kwh=threshold,
    )
    assert now <= plan.start <= deadline - duration
    assert plan.latest_start == deadline - duration
    assert plan.end <= deadline


@given(jobs())
def test_perfect_forecast_window_is_the_brute_force_optimum(
    job: tuple[Forecast, datetime, timedelta, datetime],
) -> None:
    fc, now, duration, deadline = job
    last = min(deadline - duration, fc.end - duration)
    assume(last >= now)
    plan = plan_start(fc, now, duration, power_w=POWER_W, deadline=deadline)
    minutes = int((last - now).total_seconds() // 60)
    brute = min(naive_integral(fc, s, s + duration) for s in (now + timedelta(minutes=m) for m in range(minutes + 1)))
    (chunk,) = plan.chunks
    assert chunk.duration == duration
    assert naive_integral(fc, chunk.start, chunk.end) == pytest.approx(brute, rel=1e-9, abs=1e-6)


@given(jobs(), st.booleans())
def test_perfect_forecast_saving_is_never_negative(
    job: tuple[Forecast, datetime, timedelta, datetime], interruptible: bool
) -> None:
    fc, now, duration, deadline = job
    assume(now + duration <= fc.end)
    plan = plan_start(fc, now, duration, power_w=POWER_W, deadline=deadline, interruptible=interruptible)
    immediate = grams(fc, now, now + duration)
    assert plan_grams(fc, plan) <= immediate + 1e-6
    assert plan.saving_grams is not None
    assert plan.saving_grams >= -1e-6
    assert plan.saving_grams == pytest.approx(immediate - plan_grams(fc, plan), abs=1e-6)


@given(
    jobs(),
    st.sampled_from([0, 2, 10]),
    st.sampled_from([1, 30, 60, 90]),
    st.sampled_from([None, 250.0]),
    st.sampled_from(["fresh", "running", "paused"]),
    st.booleans(),
)
def test_chunks_do_exactly_the_work_and_end_before_the_deadline(
    job: tuple[Forecast, datetime, timedelta, datetime],
    overhead_min: int,
    min_chunk_min: int,
    threshold: float | None,
    state: str,
    interruptible: bool,
) -> None:
    fc, now, duration, deadline = job
    overhead, min_chunk = timedelta(minutes=overhead_min), timedelta(minutes=min_chunk_min)
    assume(deadline >= now + duration + (overhead if state == "paused" else timedelta(0)))
    plan = plan_start(
        fc,
        now,
        duration,
        power_w=POWER_W,
        deadline=deadline,
        interruptible=interruptible,
        min_chunk=min_chunk,
        chunk_overhead=overhead,
        threshold_grams_per_kwh=threshold,
        running=state == "running",
        paused=state == "paused",
    )
    restores = len(plan.chunks) - 1
    if state == "paused" or (state == "running" and plan.start > now):
        restores += 1  # the first chunk restores a checkpoint too
    assert abs(sum((c.duration for c in plan.chunks), timedelta(0)) - overhead * restores - duration) <= timedelta(
        milliseconds=1
    )
    assert plan.chunks[0].start >= now
    assert plan.end <= deadline + timedelta(milliseconds=1)
    assert interruptible or len(plan.chunks) == 1
    for before, after in zip(plan.chunks, plan.chunks[1:], strict=False):
        assert before.end < after.start, "chunks are disjoint and separated (else they would be one)"
        assert before.duration >= min_chunk - timedelta(milliseconds=1)


@given(
    st.lists(st.floats(0, 800, allow_nan=False), min_size=2, max_size=40),
    st.integers(1, 40),
    st.integers(0, 40),
)
def test_interruptible_without_overhead_uses_the_cheapest_steps(values: list[float], slots: int, slack: int) -> None:
    """With whole steps, no overhead and a one-step minimum, the best split is the cheapest steps.
    With a millisecond of overhead (the dynamic programme's path) chunks stay on the step grid,
    so the split costs at most one more step than that."""
    assume(slots + slack <= len(values))
    fc = Forecast("GB", T0, timedelta(minutes=30), tuple(values))
    duration = timedelta(minutes=30 * slots)
    deadline = T0 + duration + timedelta(minutes=30 * slack)
    window = values[: slots + slack]
    cheapest = sum(sorted(window)[:slots]) * 1800

    def split_cost(overhead: timedelta) -> float:
        plan = plan_start(
            fc, T0, duration, power_w=POWER_W, deadline=deadline, interruptible=True, chunk_overhead=overhead
        )
        return sum(naive_integral(fc, c.start, c.end) for c in plan.chunks)

    assert split_cost(timedelta(0)) == pytest.approx(cheapest, abs=1e-6)
    one_more_step = max(window) * 1800 if slack else 0.0
    assert cheapest - 1e-6 <= split_cost(timedelta(milliseconds=1)) <= cheapest + one_more_step + 1e-6


@given(jobs())
def test_replanning_at_the_planned_start_with_the_same_forecast_starts_then(
    job: tuple[Forecast, datetime, timedelta, datetime],
) -> None:
    fc, now, duration, deadline = job
    first = plan_start(fc, now, duration, power_w=POWER_W, deadline=deadline)
    again = plan_start(fc, first.start, duration, power_w=POWER_W, deadline=deadline)
    assert again.start == first.start


@given(jobs())
def test_without_a_forecast_the_job_starts_now(job: tuple[Forecast, datetime, timedelta, datetime]) -> None:
    _, now, duration, deadline = job
    assume(deadline > now + duration)
    plan = plan_start(None, now, duration, power_w=POWER_W, deadline=deadline)
    assert plan.start == now
    assert plan.reason is PlanReason.FORECAST_UNAVAILABLE


def test_a_forecast_shorter_than_the_run_starts_now() -> None:
    fc = Forecast("GB", T0, timedelta(minutes=30), (300.0, 10.0, 10.0))
    plan = plan_start(fc, T0, timedelta(hours=4), power_w=POWER_W, deadline=T0 + timedelta(hours=12))
    assert plan.start == T0
    assert plan.reason is PlanReason.FORECAST_TOO_SHORT
    assert plan.saving_grams is None


def test_a_forecast_that_ends_before_the_latest_start_is_used_as_far_as_it_goes() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (400.0, 400.0, 50.0, 60.0, 400.0))
    plan = plan_start(fc, T0, timedelta(hours=2), power_w=POWER_W, deadline=T0 + timedelta(days=3))
    assert plan.start == T0 + timedelta(hours=2)
    assert plan.reason is PlanReason.CLEANEST_WINDOW
    assert plan.intensity_at_start == 50.0
    assert plan.saving_percent == pytest.approx(100 * (800 - 110) / 800)
    assert plan.saving_grams == pytest.approx(690.0)
    assert "forecast ends" in plan.message


def test_max_delay_counts_from_submission() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (400.0, 400.0, 300.0, 10.0, 10.0, 10.0))
    submitted = T0 - timedelta(hours=1)
    plan = plan_start(fc, T0, timedelta(hours=1), power_w=POWER_W, max_delay=timedelta(hours=3), submitted_at=submitted)
    assert plan.latest_start == T0 + timedelta(hours=2)
    assert plan.start == T0 + timedelta(hours=2)


def test_past_the_latest_start_the_job_starts_now_and_says_the_deadline_is_lost() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (100.0,) * 10)
    at_latest = plan_start(fc, T0, timedelta(hours=2), power_w=POWER_W, deadline=T0 + timedelta(hours=2))
    late = plan_start(
        fc, T0 + timedelta(hours=1), timedelta(hours=2), power_w=POWER_W, deadline=T0 + timedelta(hours=2)
    )
    assert at_latest.reason is PlanReason.LATEST_START_REACHED
    assert late.reason is PlanReason.DEADLINE_UNREACHABLE
    assert late.start == T0 + timedelta(hours=1)
    assert "1 h 0 min after the deadline" in late.message


def test_small_savings_do_not_defer() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (100.0, 99.0, 99.0))
    plan = plan_start(
        fc, T0, timedelta(hours=1), power_w=POWER_W, deadline=T0 + timedelta(hours=3), min_saving_fraction=0.05
    )
    assert plan.start == T0
    assert plan.reason is PlanReason.SAVING_TOO_SMALL


def test_threshold_mode_starts_at_the_first_clean_step_or_at_the_latest_start() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (300.0, 250.0, 120.0, 50.0, 300.0))
    clean = plan_start(
        fc, T0, timedelta(hours=1), power_w=POWER_W, deadline=T0 + timedelta(hours=5), threshold_grams_per_kwh=200
    )
    assert (clean.start, clean.reason) == (T0 + timedelta(hours=2), PlanReason.BELOW_THRESHOLD)
    never = plan_start(
        fc, T0, timedelta(hours=1), power_w=POWER_W, deadline=T0 + timedelta(hours=5), threshold_grams_per_kwh=20
    )
    assert (never.start, never.reason) == (T0 + timedelta(hours=4), PlanReason.THRESHOLD_NOT_REACHED)


def test_threshold_chunks_run_the_rest_just_before_the_deadline() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (50.0, 300.0, 300.0, 300.0, 300.0, 300.0))
    plan = plan_start(
        fc,
        T0,
        timedelta(hours=3),
        power_w=POWER_W,
        deadline=T0 + timedelta(hours=6),
        threshold_grams_per_kwh=100,
        interruptible=True,
    )
    assert [(c.start - T0, c.end - T0) for c in plan.chunks] == [
        (timedelta(0), timedelta(hours=1)),
        (timedelta(hours=4), timedelta(hours=6)),
    ]
    assert plan.reason is PlanReason.THRESHOLD_NOT_REACHED


def test_overhead_makes_the_planner_prefer_fewer_chunks() -> None:
    values = (100.0, 400.0, 100.0, 400.0, 100.0, 400.0, 150.0, 150.0, 150.0)
    fc = Forecast("GB", T0, timedelta(hours=1), values)

    def split(overhead: timedelta) -> list[tuple[timedelta, timedelta]]:
        plan = plan_start(
            fc,
            T0,
            timedelta(hours=3),
            power_w=POWER_W,
            deadline=T0 + timedelta(hours=9),
            interruptible=True,
            chunk_overhead=overhead,
        )
        return [(c.start - T0, c.end - T0) for c in plan.chunks]

    assert len(split(timedelta(0))) == 3
    assert split(timedelta(minutes=40)) == [(timedelta(hours=6), timedelta(hours=9))]


def test_estimate_emissions_from_a_forecast_and_from_readings() -> None:
    fc = Forecast("GB", T0, timedelta(minutes=30), (200.0, 400.0))
    # 1 kW for 30 min at 200 g/kWh + 15 min at 400 g/kWh = 100 g + 100 g.
    assert estimate_emissions(1000, fc, T0, T0 + timedelta(minutes=45)) == pytest.approx(200.0)
    readings = [IntensityPoint(T0, 200.0), IntensityPoint(T0 + timedelta(minutes=30), 400.0)]
    assert estimate_emissions(1000, readings, T0, T0 + timedelta(hours=1)) == pytest.approx(300.0)
    with pytest.raises(ForecastCoverageError):
        estimate_emissions(1000, fc, T0, T0 + timedelta(hours=2))
    with pytest.raises(ForecastCoverageError):
        estimate_emissions(1000, readings, T0 - timedelta(minutes=1), T0 + timedelta(hours=1))


def test_forecast_from_points_infers_the_step_and_holds_values_over_gaps() -> None:
    points = [
        IntensityPoint(T0 + timedelta(minutes=60), 300.0),
        IntensityPoint(T0, 100.0),
        IntensityPoint(T0 + timedelta(minutes=30), 200.0),
        IntensityPoint(T0 + timedelta(minutes=120), 50.0),
    ]
    fc = forecast_from_points("GB", points)
    assert fc.step == timedelta(minutes=30)
    assert fc.values == (100.0, 200.0, 300.0, 300.0, 50.0)


def test_forecast_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Forecast("GB", datetime(2020, 1, 1), timedelta(hours=1), (1.0,))
    with pytest.raises(ValueError, match="non-negative"):
        Forecast("GB", T0, timedelta(hours=1), (math.nan,))
    with pytest.raises(ValueError, match="deadline or a maximum delay"):
        plan_start(None, T0, timedelta(hours=1), power_w=POWER_W)


@settings(max_examples=30)
@given(jobs())
def test_clip_keeps_the_grid_and_the_values(job: tuple[Forecast, datetime, timedelta, datetime]) -> None:
    fc, now, duration, _ = job
    end = min(fc.end, now + duration)
    clipped = fc.clip(now, end)
    assert clipped.start <= now
    assert clipped.end >= end
    assert naive_integral(clipped, now, end) == pytest.approx(naive_integral(fc, now, end))


def test_a_dip_no_bigger_than_the_forecast_error_does_not_defer() -> None:
    values = (198.0, 204.0, 198.0, 202.0, 185.0, 201.0, 199.0, 203.0)
    fc = Forecast("GB", T0, timedelta(hours=1), values)
    deadline = T0 + timedelta(hours=8)
    trusting = plan_start(fc, T0, timedelta(hours=1), power_w=POWER_W, deadline=deadline)
    doubting = plan_start(fc, T0, timedelta(hours=1), power_w=POWER_W, deadline=deadline, forecast_error=0.1)
    assert trusting.start == T0 + timedelta(hours=4)
    assert doubting.start == T0
    assert doubting.reason is PlanReason.NOW_IS_CLEANEST


@given(jobs(), st.sampled_from([0.0, 0.05, 0.2]))
def test_shrinking_keeps_the_current_step_and_the_mean_ahead(
    job: tuple[Forecast, datetime, timedelta, datetime], error: float
) -> None:
    fc, now, duration, deadline = job
    shrunk = shrink_forecast(fc, now, deadline, error)
    first = int((now - T0) / fc.step) + 1
    last = min(len(fc.values), math.ceil((deadline - T0) / fc.step))
    assert shrunk.values[:first] == fc.values[:first]
    assert shrunk.values[last:] == fc.values[last:]
    if last - first >= 2:
        assert sum(shrunk.values[first:last]) == pytest.approx(sum(fc.values[first:last]), rel=1e-9, abs=1e-6)
    plan = plan_start(fc, now, duration, power_w=POWER_W, deadline=deadline, forecast_error=error)
    assert now <= plan.start <= deadline - duration
