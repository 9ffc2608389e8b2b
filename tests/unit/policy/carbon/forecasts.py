"""Random forecasts and jobs, and brute-force emissions, for the carbon planner's tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from aisched.policy.carbon import CarbonPlan, Forecast

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
