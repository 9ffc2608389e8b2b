"""Start planning (aisched.policy.carbon.planning): properties checked against brute force, and the rules by example."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from aisched.policy.carbon import (
    FORECAST_RECHECK,
    DeferrableJob,
    Forecast,
    PlanOptions,
    PlanReason,
    forecast_awaited_until,
    plan_awaiting_forecast,
    plan_start,
)
from tests.unit.policy.carbon.forecasts import POWER_W, T0, grams, jobs, naive_integral, plan_grams


@given(jobs(), st.booleans(), st.sampled_from([None, 100.0, 300.0]))
def test_never_starts_after_the_latest_feasible_start(
    job: tuple[Forecast, datetime, timedelta, datetime], interruptible: bool, threshold: float | None
) -> None:
    fc, now, duration, deadline = job
    plan = plan_start(
        fc,
        now,
        DeferrableJob(duration, power_w=POWER_W, deadline=deadline),
        PlanOptions(interruptible=interruptible, threshold_grams_per_kwh=threshold),
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
    plan = plan_start(fc, now, DeferrableJob(duration, power_w=POWER_W, deadline=deadline))
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
    plan = plan_start(
        fc, now, DeferrableJob(duration, power_w=POWER_W, deadline=deadline), PlanOptions(interruptible=interruptible)
    )
    immediate = grams(fc, now, now + duration)
    assert plan_grams(fc, plan) <= immediate + 1e-6
    assert plan.saving_grams is not None
    assert plan.saving_grams >= -1e-6
    assert plan.saving_grams == pytest.approx(immediate - plan_grams(fc, plan), abs=1e-6)


@given(jobs())
def test_replanning_at_the_planned_start_with_the_same_forecast_starts_then(
    job: tuple[Forecast, datetime, timedelta, datetime],
) -> None:
    fc, now, duration, deadline = job
    first = plan_start(fc, now, DeferrableJob(duration, power_w=POWER_W, deadline=deadline))
    again = plan_start(fc, first.start, DeferrableJob(duration, power_w=POWER_W, deadline=deadline))
    assert again.start == first.start


@given(jobs())
def test_without_a_forecast_the_job_starts_now(job: tuple[Forecast, datetime, timedelta, datetime]) -> None:
    _, now, duration, deadline = job
    assume(deadline > now + duration)
    plan = plan_start(None, now, DeferrableJob(duration, power_w=POWER_W, deadline=deadline))
    assert plan.start == now
    assert plan.reason is PlanReason.FORECAST_UNAVAILABLE


def test_a_forecast_shorter_than_the_run_starts_now() -> None:
    fc = Forecast("GB", T0, timedelta(minutes=30), (300.0, 10.0, 10.0))
    plan = plan_start(fc, T0, DeferrableJob(timedelta(hours=4), power_w=POWER_W, deadline=T0 + timedelta(hours=12)))
    assert plan.start == T0
    assert plan.reason is PlanReason.FORECAST_TOO_SHORT
    assert plan.saving_grams is None


def test_a_forecast_that_ends_before_the_latest_start_is_used_as_far_as_it_goes() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (400.0, 400.0, 50.0, 60.0, 400.0))
    plan = plan_start(fc, T0, DeferrableJob(timedelta(hours=2), power_w=POWER_W, deadline=T0 + timedelta(days=3)))
    assert plan.start == T0 + timedelta(hours=2)
    assert plan.reason is PlanReason.CLEANEST_WINDOW
    assert plan.intensity_at_start == 50.0
    assert plan.saving_percent == pytest.approx(100 * (800 - 110) / 800)
    assert plan.saving_grams == pytest.approx(690.0)
    assert "forecast ends" in plan.message


def test_max_delay_counts_from_submission() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (400.0, 400.0, 300.0, 10.0, 10.0, 10.0))
    submitted = T0 - timedelta(hours=1)
    plan = plan_start(
        fc, T0, DeferrableJob(timedelta(hours=1), power_w=POWER_W, max_delay=timedelta(hours=3), submitted_at=submitted)
    )
    assert plan.latest_start == T0 + timedelta(hours=2)
    assert plan.start == T0 + timedelta(hours=2)


def test_past_the_latest_start_the_job_starts_now_and_says_the_deadline_is_lost() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (100.0,) * 10)
    at_latest = plan_start(fc, T0, DeferrableJob(timedelta(hours=2), power_w=POWER_W, deadline=T0 + timedelta(hours=2)))
    late = plan_start(
        fc,
        T0 + timedelta(hours=1),
        DeferrableJob(timedelta(hours=2), power_w=POWER_W, deadline=T0 + timedelta(hours=2)),
    )
    assert at_latest.reason is PlanReason.LATEST_START_REACHED
    assert late.reason is PlanReason.DEADLINE_UNREACHABLE
    assert late.start == T0 + timedelta(hours=1)
    assert "1 h 0 min after the deadline" in late.message


def test_small_savings_do_not_defer() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (100.0, 99.0, 99.0))
    plan = plan_start(
        fc,
        T0,
        DeferrableJob(timedelta(hours=1), power_w=POWER_W, deadline=T0 + timedelta(hours=3)),
        PlanOptions(min_saving_fraction=0.05),
    )
    assert plan.start == T0
    assert plan.reason is PlanReason.SAVING_TOO_SMALL


def test_a_dip_no_bigger_than_the_forecast_error_does_not_defer() -> None:
    values = (198.0, 204.0, 198.0, 202.0, 185.0, 201.0, 199.0, 203.0)
    fc = Forecast("GB", T0, timedelta(hours=1), values)
    deadline = T0 + timedelta(hours=8)
    trusting = plan_start(fc, T0, DeferrableJob(timedelta(hours=1), power_w=POWER_W, deadline=deadline))
    doubting = plan_start(
        fc, T0, DeferrableJob(timedelta(hours=1), power_w=POWER_W, deadline=deadline), PlanOptions(forecast_error=0.1)
    )
    assert trusting.start == T0 + timedelta(hours=4)
    assert doubting.start == T0
    assert doubting.reason is PlanReason.NOW_IS_CLEANEST


@given(jobs(), st.integers(0, 600), st.booleans(), st.booleans())
def test_waiting_for_a_zones_first_read_never_passes_the_latest_start_nor_the_wait(
    job: tuple[Forecast, datetime, timedelta, datetime], asked_s: int, running: bool, paused: bool
) -> None:
    assume(not (running and paused))
    _, now, duration, deadline = job
    asked_since = now - timedelta(seconds=asked_s)
    wait = timedelta(seconds=120)
    options = PlanOptions(chunk_overhead=timedelta(seconds=30))
    deferrable = DeferrableJob(duration, power_w=POWER_W, deadline=deadline, running=running, paused=paused)
    until = forecast_awaited_until(asked_since, now, wait)
    if until is None:
        assert now >= asked_since + wait  # the wait is over: planned without a forecast, as a failing source
        return
    assert now < until <= min(asked_since + wait, now + FORECAST_RECHECK)
    plan = plan_awaiting_forecast(now, deferrable, options, until=until)
    fresh = plan_start(None, now, deferrable, options)
    assert plan.latest_start == fresh.latest_start
    if plan.is_deferred(now):
        assert plan.reason is PlanReason.FORECAST_PENDING
        assert plan.start == min(until, plan.latest_start)
    else:
        assert plan == fresh  # its latest start has come: it starts now, as with no forecast
