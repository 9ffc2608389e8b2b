"""Making room: shrinking elastic jobs, then preempting whole gangs of lower priority."""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import SHRUNK, schedule
from tests.levels import RACK
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import HOUR, T0, pending, run_on


def test_preemption_frees_the_rack_of_the_lowest_priorities() -> None:
    snapshot = ClusterSnapshot([*rack_nodes("z", "r0", 4), *rack_nodes("z", "r1", 4)])
    low = [run_on(snapshot, pending(f"ns/low{i}", 8, priority=0), [f"r0-n{i}"]) for i in range(4)]
    mid = [run_on(snapshot, pending(f"ns/mid{i}", 8, priority=5), [f"r1-n{i}"]) for i in range(3)]
    big = pending("ns/big", 8, replicas=4, priority=10, required_level=RACK)
    result = schedule(snapshot, [*low, *mid, big], [], T0)
    (admission,) = result.admitted
    assert admission.placement.domain.label == "r0"
    assert sorted(admission.preempting) == [f"ns/low{i}" for i in range(4)]
    assert result.preempted[0].message == (
        "preempted by ns/big (priority 10), which needs 32 GPUs in one Rack; it will be queued again"
    )


def test_only_as_many_gangs_as_needed_and_never_equal_priority() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r0", 2))
    victims = [
        run_on(snapshot, pending("ns/two-node", 4, replicas=2, priority=1), ["r0-n0", "r0-n1"]),
        run_on(snapshot, pending("ns/half", 4, priority=0), ["r0-n0"]),
        run_on(snapshot, pending("ns/peer", 4, priority=3), ["r0-n1"]),
    ]
    result = schedule(snapshot, [*victims, pending("ns/hi", 8, priority=3)], [], T0)
    (admission,) = result.admitted
    assert admission.placement.nodes == ("r0-n0",)
    assert sorted(admission.preempting) == ["ns/half", "ns/two-node"]  # whole gang, though half is elsewhere
    equal = schedule(snapshot, [*victims, pending("ns/same", 8, priority=1)], [], T0)
    assert equal.preempted == ()


def test_other_queues_guaranteed_quota_is_not_preempted_but_borrowed_gpus_are() -> None:
    queues = [QueueQuota("a", 8, cohort="c"), QueueQuota("b", 8, cohort="c")]
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    b_own = run_on(snapshot, pending("ns/b-own", 8, queue="b"), ["r-n0"], started=T0 - HOUR)
    b_borrowed = run_on(snapshot, pending("ns/b-borrowed", 8, queue="b"), ["r-n1"], started=T0)
    urgent = pending("ns/a-urgent", 8, queue="a", priority=9)
    result = schedule(snapshot, [b_own, b_borrowed, urgent], queues, T0)
    assert [p.key for p in result.preempted] == ["ns/b-borrowed"]  # the one that loses the least work
    only_own = schedule(snapshot, [b_own, urgent], [QueueQuota("a", 8), QueueQuota("b", 8)], T0)
    assert only_own.preempted == ()


def test_a_queue_within_its_quota_takes_back_what_its_cohort_borrowed_at_equal_priority() -> None:
    queues = [QueueQuota("a", 8, cohort="c"), QueueQuota("b", 8, cohort="c")]
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    a_own = run_on(snapshot, pending("ns/a-own", 8, queue="a"), ["r-n0"], started=T0 - 2 * HOUR)
    a_borrowed = run_on(snapshot, pending("ns/a-borrowed", 8, queue="a"), ["r-n1"], started=T0 - HOUR)
    b_job = pending("ns/b-job", 8, queue="b")
    result = schedule(snapshot, [a_own, a_borrowed, b_job], queues, T0)
    assert [p.key for p in result.preempted] == ["ns/a-borrowed"]  # of a's two, the one that loses least
    assert [a.key for a in result.admitted] == ["ns/b-job"]

    # Beyond its own quota it would be borrowing too: nothing is taken back for that.
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 3))
    a_own = run_on(snapshot, pending("ns/a-own", 8, queue="a"), ["r-n0"], started=T0 - HOUR)
    a_borrowed = run_on(snapshot, pending("ns/a-borrowed", 8, queue="a"), ["r-n1"], started=T0 - HOUR)
    b_running = run_on(snapshot, pending("ns/b-run", 8, queue="b"), ["r-n2"])
    more = schedule(snapshot, [a_own, a_borrowed, b_running, b_job], [*queues, QueueQuota("x", 8, cohort="c")], T0)
    assert more.preempted == ()

    # Gangs of a higher priority than the reclaiming job are not taken from, borrowing or not.
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    urgent = [
        run_on(snapshot, pending(f"ns/a-urgent-{i}", 8, queue="a", priority=5), [f"r-n{i}"], started=T0 - HOUR)
        for i in range(2)
    ]
    assert schedule(snapshot, [*urgent, b_job], queues, T0).preempted == ()
    # Nor does a job reclaim from its own queue: its equal-priority gangs (just started, so no
    # time-slicing either) are not borrowed from anyone.
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    mine = [run_on(snapshot, pending(f"ns/a-{i}", 8, queue="a"), [f"r-n{i}"]) for i in range(2)]
    roomy = [QueueQuota("a", 24, cohort="c"), QueueQuota("b", 8, cohort="c")]
    assert schedule(snapshot, [*mine, pending("ns/a-more", 8, queue="a")], roomy, T0).preempted == ()


def test_shrink_before_preempting_anyone() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 4))
    elastic = run_on(
        snapshot,
        pending("ns/elastic", 8, replicas=3, min_replicas=1, max_replicas=3, priority=1),
        ["r-n0", "r-n1", "r-n2"],
    )
    fixed = run_on(snapshot, pending("ns/fixed", 8, priority=0), ["r-n3"])
    result = schedule(snapshot, [elastic, fixed, pending("ns/hi", 8, replicas=2, priority=5)], [], T0)
    assert result.preempted == ()
    (resize,) = result.resized
    assert resize.reason == SHRUNK
    assert resize.replicas == 1
    assert resize.message == "shrunk from 3 to 1 replicas to make room for ns/hi (priority 5)"
    assert result.admitted[0].preempting == ("ns/elastic",)


def test_an_equal_priority_takes_back_the_replicas_growth_added_not_those_the_gang_started_with() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    grown = run_on(
        snapshot, pending("ns/grown", 4, replicas=2, min_replicas=1, max_replicas=4), ["r-n0", "r-n0", "r-n1"]
    )
    other = run_on(snapshot, pending("ns/other", 4), ["r-n1"])
    # Dropping a rank on r-n0 would make room as well, but leave the gang split over two nodes.
    result = schedule(snapshot, [grown, other, pending("ns/new", 4)], [], T0)
    (resize,) = result.resized
    assert resize.reason == SHRUNK
    assert resize.placement.nodes == ("r-n0", "r-n0")
    assert result.admitted[0].placement.nodes == ("r-n1",)
