"""Template rollouts: bounded by surge and unavailability, and always finishing."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from aisched.api.common import CapacityType
from aisched.policy.rollout import RolloutStep, plan_rollout
from aisched.policy.serving import ServingReplica


def replicas(prefix: str, ready: list[bool]) -> list[ServingReplica]:
    return [ServingReplica(f"{prefix}{i}", "n1", CapacityType.ON_DEMAND, r) for i, r in enumerate(ready)]


def test_without_old_replicas_the_target_is_the_desired_count() -> None:
    assert plan_rollout(replicas("new", [True]), [], 3, 1, 0) == RolloutStep(3, ())


def test_surge_first_then_retire_once_the_new_replica_is_ready() -> None:
    old = replicas("old", [True, True])
    assert plan_rollout([], old, 2, 1, 0) == RolloutStep(1, ())
    starting = replicas("new", [False])
    assert plan_rollout(starting, old, 2, 1, 0) == RolloutStep(1, ())
    assert plan_rollout(replicas("new", [True]), old, 2, 1, 0) == RolloutStep(1, ("old0",))


def test_without_surge_an_old_replica_goes_first() -> None:
    old = replicas("old", [True, True])
    assert plan_rollout([], old, 2, 0, 1) == RolloutStep(0, ("old0",))
    assert plan_rollout([], old[1:], 2, 0, 1) == RolloutStep(1, ())


def test_old_replicas_that_are_not_ready_go_before_ready_ones() -> None:
    old = replicas("old", [True, False, True])
    step = plan_rollout(replicas("new", [True]), old, 3, 1, 0)
    assert step.retire_old == ("old1",)


def test_scaling_to_zero_mid_rollout_retires_everything_old() -> None:
    assert plan_rollout([], replicas("old", [True, True]), 0, 1, 0) == RolloutStep(0, ("old0", "old1"))


bounds = st.tuples(st.integers(0, 3), st.integers(0, 3)).filter(lambda b: b != (0, 0))


@given(
    desired=st.integers(0, 6),
    surge_unavailable=bounds,
    current_ready=st.lists(st.booleans(), max_size=6),
    old_ready=st.lists(st.booleans(), min_size=1, max_size=6),
)
def test_one_step_keeps_the_bounds(
    desired: int, surge_unavailable: tuple[int, int], current_ready: list[bool], old_ready: list[bool]
) -> None:
    surge, unavailable = surge_unavailable
    current, old = replicas("new", current_ready), replicas("old", old_ready)
    step = plan_rollout(current, old, desired, surge, unavailable)
    assert set(step.retire_old) <= {r.name for r in old}
    assert step.current_target <= max(desired, 0)
    ready_before = sum(current_ready) + sum(old_ready)
    ready_after = ready_before - sum(r.ready for r in old if r.name in step.retire_old)
    min_available = max(desired - unavailable, 0)
    assert ready_after >= min(ready_before, min_available)
    if step.current_target > len(current):
        assert step.current_target + len(old) <= desired + surge


@given(
    desired=st.integers(0, 6),
    surge_unavailable=bounds,
    old_ready=st.lists(st.booleans(), max_size=6),
)
def test_a_rollout_finishes_without_dropping_below_the_minimum(
    desired: int, surge_unavailable: tuple[int, int], old_ready: list[bool]
) -> None:
    """New replicas start unready and become ready one tick later, as a model server that loads."""
    surge, unavailable = surge_unavailable
    current: list[ServingReplica] = []
    old = replicas("old", old_ready)
    min_available = max(desired - unavailable, 0)
    started = 0
    for _ in range(4 * (desired + len(old)) + 4):
        if not old and len(current) == desired and all(r.ready for r in current):
            break
        ready_before = sum(r.ready for r in (*current, *old))
        step = plan_rollout(current, old, desired, surge, unavailable)
        old = [r for r in old if r.name not in step.retire_old]
        assert sum(r.ready for r in (*current, *old)) >= min(ready_before, min_available)
        current = [replace(r, ready=True) for r in current]
        while len(current) < step.current_target:
            current.append(ServingReplica(f"new{started}", "n1", CapacityType.ON_DEMAND, False))
            started += 1
        assert len(current) + len(old) <= max(desired + surge, len(old_ready))
    else:
        raise AssertionError(f"rollout did not finish: {len(current)} new, {len(old)} old")
    assert started == desired
