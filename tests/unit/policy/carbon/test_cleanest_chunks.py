"""Forecast mode for an interruptible job (aisched.policy.carbon.cleanest_chunks): the cleanest chunks."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from aisched.policy.carbon import DeferrableJob, Forecast, PlanOptions, plan_start
from tests.unit.policy.carbon.forecasts import POWER_W, T0, jobs, naive_integral


def _minutes(choices: list[int]) -> st.SearchStrategy[timedelta]:
    return st.sampled_from(choices).map(lambda m: timedelta(minutes=m))


@given(
    jobs(),
    st.builds(
        PlanOptions,
        chunk_overhead=_minutes([0, 2, 10]),
        min_chunk=_minutes([1, 30, 60, 90]),
        threshold_grams_per_kwh=st.sampled_from([None, 250.0]),
        interruptible=st.booleans(),
    ),
    st.sampled_from(["fresh", "running", "paused"]),
)
def test_chunks_do_exactly_the_work_and_end_before_the_deadline(
    job: tuple[Forecast, datetime, timedelta, datetime], options: PlanOptions, state: str
) -> None:
    fc, now, duration, deadline = job
    overhead, min_chunk = options.chunk_overhead, options.min_chunk
    assume(deadline >= now + duration + (overhead if state == "paused" else timedelta(0)))
    plan = plan_start(
        fc,
        now,
        DeferrableJob(
            duration, power_w=POWER_W, deadline=deadline, running=state == "running", paused=state == "paused"
        ),
        options,
    )
    restores = len(plan.chunks) - 1
    if state == "paused" or (state == "running" and plan.start > now):
        restores += 1  # the first chunk restores a checkpoint too
    assert abs(sum((c.duration for c in plan.chunks), timedelta(0)) - overhead * restores - duration) <= timedelta(
        milliseconds=1
    )
    assert plan.chunks[0].start >= now
    assert plan.end <= deadline + timedelta(milliseconds=1)
    assert options.interruptible or len(plan.chunks) == 1
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
            fc,
            T0,
            DeferrableJob(duration, power_w=POWER_W, deadline=deadline),
            PlanOptions(interruptible=True, chunk_overhead=overhead),
        )
        return sum(naive_integral(fc, c.start, c.end) for c in plan.chunks)

    assert split_cost(timedelta(0)) == pytest.approx(cheapest, abs=1e-6)
    one_more_step = max(window) * 1800 if slack else 0.0
    assert cheapest - 1e-6 <= split_cost(timedelta(milliseconds=1)) <= cheapest + one_more_step + 1e-6


def test_overhead_makes_the_planner_prefer_fewer_chunks() -> None:
    values = (100.0, 400.0, 100.0, 400.0, 100.0, 400.0, 150.0, 150.0, 150.0)
    fc = Forecast("GB", T0, timedelta(hours=1), values)

    def split(overhead: timedelta) -> list[tuple[timedelta, timedelta]]:
        plan = plan_start(
            fc,
            T0,
            DeferrableJob(timedelta(hours=3), power_w=POWER_W, deadline=T0 + timedelta(hours=9)),
            PlanOptions(interruptible=True, chunk_overhead=overhead),
        )
        return [(c.start - T0, c.end - T0) for c in plan.chunks]

    assert len(split(timedelta(0))) == 3
    assert split(timedelta(minutes=40)) == [(timedelta(hours=6), timedelta(hours=9))]


@given(st.floats(min_value=-0.99, max_value=25.0))
def test_a_job_started_inside_a_clean_window_runs_to_its_end_before_pausing(late: float) -> None:
    # Two equally clean 50 s windows on a 10 s grid: pausing early in the first costs no more
    # grams than running to its end, but leaves more work, and a later finish, to the second.
    first, second = (
        (T0 + timedelta(seconds=60), T0 + timedelta(seconds=110)),
        (
            T0 + timedelta(seconds=160),
            T0 + timedelta(seconds=210),
        ),
    )
    values = tuple(
        40.0 if any(a <= T0 + timedelta(seconds=10 * k) < b for a, b in (first, second)) else 400.0 for k in range(60)
    )
    fc = Forecast("GB", T0, timedelta(seconds=10), values)
    plan = plan_start(
        fc,
        first[0] + timedelta(seconds=late),
        DeferrableJob(timedelta(seconds=70), power_w=POWER_W, deadline=T0 + timedelta(seconds=400)),
        PlanOptions(interruptible=True, min_chunk=timedelta(seconds=10), chunk_overhead=timedelta(seconds=2)),
    )
    assert [c.end for c in plan.chunks[:-1]] == [first[1]]
    assert plan.chunks[-1].start == second[0]
