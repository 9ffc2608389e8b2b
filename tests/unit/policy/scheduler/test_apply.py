"""A cycle's result applied to a snapshot: at once (the simulator's clock), or as stops land (the operator's)."""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import Applied, ScheduleResult, apply_result, schedule
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import HOUR, T0, pending, run_on

OPEN: list[QueueQuota] = []


def _a_small_gang_preempts_a_large_one() -> tuple[ClusterSnapshot, dict[str, Placement], ScheduleResult]:
    """One 8-GPU node: a low-priority gang holds all of it, a higher one of 4 GPUs preempts it."""
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    (name,) = snapshot.node_names()
    low = run_on(snapshot, pending("ns/low", 8, priority=0), [name], started=T0 - HOUR)
    result = schedule(snapshot, [low, pending("ns/high", 4, priority=10)], OPEN, T0)
    assert [p.key for p in result.preempted] == ["ns/low"]
    assert low.placement is not None
    return snapshot, {"ns/low": low.placement}, result


def test_at_once_the_victim_is_gone_and_the_gang_that_preempted_it_holds_its_own() -> None:
    snapshot, running, result = _a_small_gang_preempts_a_large_one()
    apply_result(snapshot, result, running, Applied.AT_ONCE)
    assert snapshot.used_total == 4


def test_as_stops_land_the_victim_still_holds_everything_and_nothing_is_counted_twice() -> None:
    snapshot, running, result = _a_small_gang_preempts_a_large_one()
    apply_result(snapshot, result, running, Applied.AS_STOPS_LAND)
    assert snapshot.used_total == 8


def test_an_admission_on_free_gpus_is_held_either_way() -> None:
    for when in Applied:
        snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
        result = schedule(snapshot, [pending("ns/a", 4)], OPEN, T0)
        apply_result(snapshot, result, {}, when)
        assert snapshot.used_total == 4
