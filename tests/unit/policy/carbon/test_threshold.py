"""Threshold mode (aisched.policy.carbon.threshold): run below a fixed intensity, never past the latest start."""

from __future__ import annotations

from datetime import timedelta

from aisched.policy.carbon import DeferrableJob, Forecast, PlanOptions, PlanReason, plan_start
from tests.unit.policy.carbon.forecasts import POWER_W, T0


def test_threshold_mode_starts_at_the_first_clean_step_or_at_the_latest_start() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (300.0, 250.0, 120.0, 50.0, 300.0))
    clean = plan_start(
        fc,
        T0,
        DeferrableJob(timedelta(hours=1), power_w=POWER_W, deadline=T0 + timedelta(hours=5)),
        PlanOptions(threshold_grams_per_kwh=200),
    )
    assert (clean.start, clean.reason) == (T0 + timedelta(hours=2), PlanReason.BELOW_THRESHOLD)
    never = plan_start(
        fc,
        T0,
        DeferrableJob(timedelta(hours=1), power_w=POWER_W, deadline=T0 + timedelta(hours=5)),
        PlanOptions(threshold_grams_per_kwh=20),
    )
    assert (never.start, never.reason) == (T0 + timedelta(hours=4), PlanReason.THRESHOLD_NOT_REACHED)


def test_threshold_chunks_run_the_rest_just_before_the_deadline() -> None:
    fc = Forecast("GB", T0, timedelta(hours=1), (50.0, 300.0, 300.0, 300.0, 300.0, 300.0))
    plan = plan_start(
        fc,
        T0,
        DeferrableJob(timedelta(hours=3), power_w=POWER_W, deadline=T0 + timedelta(hours=6)),
        PlanOptions(interruptible=True, threshold_grams_per_kwh=100),
    )
    assert [(c.start - T0, c.end - T0) for c in plan.chunks] == [
        (timedelta(0), timedelta(hours=1)),
        (timedelta(hours=4), timedelta(hours=6)),
    ]
    assert plan.reason is PlanReason.THRESHOLD_NOT_REACHED
