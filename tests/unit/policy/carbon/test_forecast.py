"""Forecasts (aisched.policy.carbon.forecast): built from points, validated, clipped and shrunk for their error."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.carbon import (
    DeferrableJob,
    Forecast,
    IntensityPoint,
    PlanOptions,
    forecast_from_points,
    plan_start,
    shrink_forecast,
)
from tests.unit.policy.carbon.forecasts import POWER_W, T0, jobs, naive_integral


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
        plan_start(None, T0, DeferrableJob(timedelta(hours=1), power_w=POWER_W))


@settings(max_examples=30)
@given(jobs())
def test_clip_keeps_the_grid_and_the_values(job: tuple[Forecast, datetime, timedelta, datetime]) -> None:
    fc, now, duration, _ = job
    end = min(fc.end, now + duration)
    clipped = fc.clip(now, end)
    assert clipped.start <= now
    assert clipped.end >= end
    assert naive_integral(clipped, now, end) == pytest.approx(naive_integral(fc, now, end))


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
    plan = plan_start(
        fc, now, DeferrableJob(duration, power_w=POWER_W, deadline=deadline), PlanOptions(forecast_error=error)
    )
    assert now <= plan.start <= deadline - duration
