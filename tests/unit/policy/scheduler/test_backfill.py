"""Reservation and backfill: the first job that cannot start holds GPUs; later ones start only around them."""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import RESERVED_FOR_HIGHER_PRIORITY, JobRequest, schedule
from tests.levels import RACK
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import HOUR, T0, pending, run_on


def _backfill_cluster() -> tuple[ClusterSnapshot, list[JobRequest]]:
    """Rack r0 busy with jobs ending in 1..4 hours, rack r1 busy for 5 hours."""
    snapshot = ClusterSnapshot([*rack_nodes("z", "r0", 4), *rack_nodes("z", "r1", 4)])
    running = [
        run_on(snapshot, pending(f"ns/r0-{i}", 8, expected_duration=(i + 1) * HOUR), [f"r0-n{i}"]) for i in range(4)
    ] + [run_on(snapshot, pending(f"ns/r1-{i}", 8, expected_duration=5 * HOUR), [f"r1-n{i}"]) for i in range(4)]
    return snapshot, running


def test_backfill_only_where_it_does_not_delay_the_reserved_gang() -> None:
    snapshot, running = _backfill_cluster()
    big = pending("ns/big", 8, replicas=4, required_level=RACK, created=T0 - HOUR)
    result = schedule(snapshot, [*running, big], [], T0)
    (wait,) = result.waiting
    assert wait.expected_start == T0 + 4 * HOUR
    assert wait.message.endswith("in Rack r0, where GPUs are held for it")

    # r0's GPUs are held from T0+4h: a 1-hour job may use one that frees now, a 5-hour one may not
    with snapshot.trial():
        snapshot.release({"r0-n0": 8})
        freed = [j for j in running if j.key != "ns/r0-0"]
        long = pending("ns/long", 8, expected_duration=5 * HOUR)
        vague = pending("ns/vague", 8)
        short = pending("ns/x-short", 8, expected_duration=HOUR)  # considered last (FIFO ties by name)
        result = schedule(snapshot, [*freed, big, short, long, vague], [], T0)
    assert [(a.key, a.placement.nodes) for a in result.admitted] == [("ns/x-short", ("r0-n0",))]
    waits = {w.key: w for w in result.waiting}
    assert waits["ns/long"].reason == RESERVED_FOR_HIGHER_PRIORITY
    assert waits["ns/long"].message == (
        "the free GPUs that fit it are held for ns/big (priority 0) in Rack r0 from 2025-03-01 16:00 UTC, "
        "and this job would run past that"
    )
    assert waits["ns/vague"].reason == RESERVED_FOR_HIGHER_PRIORITY
    assert "set an expected duration to backfill" in waits["ns/vague"].message


def test_without_end_times_the_reserved_domain_takes_no_newcomers_unless_the_queue_time_slices() -> None:
    snapshot = ClusterSnapshot([*rack_nodes("z", "r0", 2), *rack_nodes("z", "r1", 2)])
    running = [run_on(snapshot, pending("ns/r0", 4), ["r0-n0"]), run_on(snapshot, pending("ns/r1", 8), ["r1-n0"])]
    big = pending("ns/big", 8, replicas=2, required_level=RACK, created=T0 - HOUR)
    small = pending("ns/small", 4, expected_duration=HOUR / 4)
    # The default queue time-slices: the gang will preempt its way in, and holds nothing idle meanwhile.
    slicing = schedule(snapshot, [*running, big, small], [], T0)
    assert [a.placement.nodes for a in slicing.admitted] == [("r0-n0",)]
    no_slicing = [QueueQuota("default", None, min_run_seconds=None)]
    result = schedule(snapshot, [*running, big, small], no_slicing, T0)
    waits = {w.key: w for w in result.waiting}
    assert waits["ns/big"].expected_start is None
    assert "GPUs in Rack r0 are held for it as they free up" in waits["ns/big"].message
    # ns/small fits on r0-n0 (4 free) but that rack is held; r1 has a whole free node
    (admission,) = result.admitted
    assert admission.key == "ns/small"
    assert admission.placement.nodes == ("r1-n1",)
