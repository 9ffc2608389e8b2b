"""One decision for gangs and services' replicas: one fair order with priorities between them, one
snapshot, one quota ledger; replicas never preempt, and never land on a GPU a gang was given."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.api.common import CapacityType
from aisched.policy.cluster import ClusterSnapshot, Node
from aisched.policy.decision import ReplicaAsk, decide
from aisched.policy.queueing import QUOTA_EXCEEDED, QueueQuota
from aisched.policy.scheduler import HeldGpus, JobRequest
from aisched.policy.serving import PlanReason, ServingReplica, ServingRequest
from tests.unit.policy.scheduler.cycles import HOUR, T0, pending, run_on

OPEN = [QueueQuota.unlimited()]


def gpu_node(name: str, gpus: int = 8, zone: str = "z1") -> Node:
    return Node(name, gpus, 0, gpu_product="H100", capacity_type=CapacityType.ON_DEMAND, zone=zone)


def an_ask(
    name: str, wanted: int, *, priority: int = 0, gpus: int = 1, queue: str = "default", desired: int | None = None
) -> ReplicaAsk:
    return ReplicaAsk(
        service=("ns", name),
        queue=queue,
        priority=priority,
        created=T0,
        request=ServingRequest(gpus_per_replica=gpus),
        kept=(),
        desired=wanted if desired is None else desired,
        wanted=wanted,
    )


def test_a_service_that_outranks_a_gang_gets_the_last_free_gpus_and_the_gang_waits() -> None:
    snapshot = ClusterSnapshot([gpu_node("n1")])
    gang = pending("ns/train", 8, priority=0)
    decision = decide(snapshot, [gang], [an_ask("chat", 2, priority=10)], OPEN, T0)
    assert [s.node for s in decision.replicas[("ns", "chat")].start] == ["n1", "n1"]
    assert [w.key for w in decision.jobs.waiting] == ["ns/train"]
    assert not decision.jobs.admitted


def test_a_gang_that_outranks_a_service_gets_the_gpus_and_the_service_says_why_it_waits() -> None:
    snapshot = ClusterSnapshot([gpu_node("n1")])
    gang = pending("ns/train", 8, priority=10)
    decision = decide(snapshot, [gang], [an_ask("chat", 2, priority=0)], OPEN, T0)
    assert [a.key for a in decision.jobs.admitted] == ["ns/train"]
    plan = decision.replicas[("ns", "chat")]
    assert (plan.start, plan.unplaced, plan.reason) == ((), 2, PlanReason.INSUFFICIENT_CAPACITY)
    assert plan.message


def test_a_service_starts_what_is_left_of_its_ask_and_the_rest_waits() -> None:
    snapshot = ClusterSnapshot([gpu_node("n1", 4)])
    gang = pending("ns/train", 2, priority=10)
    plan = decide(snapshot, [gang], [an_ask("chat", 3)], OPEN, T0).replicas[("ns", "chat")]
    assert (len(plan.start), plan.unplaced, plan.reason) == (2, 1, PlanReason.INSUFFICIENT_CAPACITY)


def test_replicas_never_preempt_even_a_lower_priority_gang() -> None:
    snapshot = ClusterSnapshot([gpu_node("n1")])
    running = run_on(snapshot, pending("ns/low", 8, priority=0), ["n1"], started=T0 - HOUR)
    decision = decide(snapshot, [running], [an_ask("chat", 1, priority=1000)], OPEN, T0)
    assert not decision.jobs.preempted and not decision.jobs.resized
    assert decision.replicas[("ns", "chat")].unplaced == 1


def test_a_gang_never_preempts_replicas_either_and_the_two_never_share_a_gpu() -> None:
    snapshot = ClusterSnapshot([gpu_node("n1"), gpu_node("n2")])
    decision = decide(snapshot, [pending("ns/a", 4, replicas=2, priority=5)], [an_ask("chat", 6, priority=5)], OPEN, T0)
    used = Counter(decision.jobs.admitted[0].placement.gpus_by_node())
    used.update(s.node for s in decision.replicas[("ns", "chat")].start)
    assert all(gpus <= 8 for gpus in used.values())
    assert sum(used.values()) == 14


def test_new_replicas_are_spread_as_the_serving_policy_spreads_them() -> None:
    snapshot = ClusterSnapshot([gpu_node("a1", zone="a"), gpu_node("b1", zone="b")])
    ask = replace(an_ask("chat", 2), kept=(), desired=2)
    plan = decide(snapshot, [], [ask], OPEN, T0).replicas[("ns", "chat")]
    assert sorted(s.zone or "" for s in plan.start) == ["a", "b"]


def test_a_queue_pays_for_new_replicas_as_for_gangs() -> None:
    snapshot = ClusterSnapshot([gpu_node("n1")])
    solo = [QueueQuota.unlimited(), QueueQuota("solo", 3, borrowing_limit=0)]
    decision = decide(
        snapshot, [], [an_ask("chat", 4, queue="solo")], solo, T0, held_elsewhere=[HeldGpus("solo", 1000)]
    )
    plan = decision.replicas[("ns", "chat")]
    assert (len(plan.start), plan.unplaced) == (2, 2)
    assert decision.jobs.queues["solo"].used_gpus == 3
    full = decide(snapshot, [], [an_ask("chat", 1, queue="solo")], solo, T0, held_elsewhere=[HeldGpus("solo", 3000)])
    assert full.replicas[("ns", "chat")].unplaced == 1
    assert QUOTA_EXCEEDED not in {w.reason for w in full.jobs.waiting}  # the service's wait is the service's


def test_the_services_are_not_the_gangs_result() -> None:
    snapshot = ClusterSnapshot([gpu_node("n1", 1)])
    decision = decide(snapshot, [pending("ns/a", 1)], [an_ask("x", 1), an_ask("y", 1)], OPEN, T0)
    keys = {a.key for a in decision.jobs.admitted} | {w.key for w in decision.jobs.waiting}
    assert keys == {"ns/a"}
    assert decision.jobs.queues["default"].pending_jobs == 0  # the services waiting are no jobs


def test_replicas_keep_off_the_gpus_held_for_a_gang_that_outranks_them() -> None:
    snapshot = ClusterSnapshot([gpu_node("n1"), gpu_node("n2")])
    # Gangs that end within the hour fill n1 and half of n2. A gang of 16 that outranks the service
    # cannot start and holds both nodes as they free up: the service's replica waits rather than delay it.
    busy = run_on(snapshot, pending("ns/busy", 4, priority=10, expected_duration=HOUR), ["n2"], started=T0)
    also = run_on(snapshot, pending("ns/also", 8, priority=10, expected_duration=HOUR), ["n1"], started=T0)
    big = pending("ns/big", 8, replicas=2, priority=10)
    decision = decide(snapshot, [busy, also, big], [an_ask("chat", 1, priority=0)], OPEN, T0)
    assert decision.jobs.reserved_nodes == {"n1", "n2"}
    assert decision.replicas[("ns", "chat")].unplaced == 1
    outranking = decide(snapshot, [busy, also, big], [an_ask("chat", 1, priority=20)], OPEN, T0)
    assert [s.node for s in outranking.replicas[("ns", "chat")].start] == ["n2"]


def test_replicas_leave_gpus_freeing_up_to_a_higher_gang_that_waits_for_them() -> None:
    # A gang of 16 that outranks the service waits while n2 is still held (by a gang stopping: no end
    # time known, so no reservation); n1's GPUs are free. The replicas would never be preempted:
    # they wait, rather than keep the gang waiting for good.
    snapshot = ClusterSnapshot([gpu_node("n1"), gpu_node("n2")])
    snapshot.allocate({"n2": 8})
    big = pending("ns/big", 8, replicas=2, priority=10)
    low = decide(snapshot, [big], [an_ask("chat", 2, priority=0)], OPEN, T0)
    assert not low.jobs.reserved_nodes
    plan = low.replicas[("ns", "chat")]
    assert (plan.start, plan.unplaced) == ((), 2)
    assert "higher priority" in plan.message
    high = decide(snapshot, [big], [an_ask("chat", 2, priority=10)], OPEN, T0)  # equal: fair order
    assert len(high.replicas[("ns", "chat")].start) == 2
    other_gpus = replace(big, gpu_type="A100")  # a gang that could never use these GPUs holds nothing back
    assert len(decide(snapshot, [other_gpus], [an_ask("chat", 2)], OPEN, T0).replicas[("ns", "chat")].start) == 2


def test_a_replica_stands_in_for_one_on_a_node_that_ends() -> None:
    snapshot = ClusterSnapshot([gpu_node("n1"), gpu_node("n2")])
    ask = replace(
        an_ask("chat", 1, desired=2),
        kept=(ServingReplica("chat-a", "n1", CapacityType.ON_DEMAND, True),),
        replacing=("chat-b",),
        excluded=frozenset({"n2"}),
    )
    (start,) = decide(snapshot, [], [ask], OPEN, T0).replicas[("ns", "chat")].start
    assert (start.node, start.replaces) == ("n1", "chat-b")


@st.composite
def contests(draw: st.DrawFn) -> tuple[ClusterSnapshot, list[JobRequest], list[ReplicaAsk]]:
    nodes = [gpu_node(f"n{i}", draw(st.sampled_from([1, 2, 4, 8]))) for i in range(draw(st.integers(1, 4)))]
    snapshot = ClusterSnapshot(nodes)
    jobs: list[JobRequest] = []
    for i in range(draw(st.integers(0, 4))):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        job = pending(f"ns/j{i}", gpus, replicas=draw(st.integers(1, 3)), priority=draw(st.integers(0, 3)))
        room = [n.name for n in nodes if snapshot.free_gpus(n.name) >= gpus]
        runs: bool = draw(st.booleans())
        if room and runs:
            job = run_on(snapshot, job, [room[0]], started=T0 - HOUR)
        jobs.append(job)
    asks = [
        an_ask(f"s{i}", draw(st.integers(1, 6)), priority=draw(st.integers(0, 3)), gpus=draw(st.sampled_from([1, 2])))
        for i in range(draw(st.integers(0, 3)))
    ]
    return snapshot, jobs, asks


@settings(max_examples=400, deadline=None)
@given(contests())
def test_every_ask_is_answered_no_gpu_is_given_twice_and_no_replica_preempts(
    contest: tuple[ClusterSnapshot, list[JobRequest], list[ReplicaAsk]],
) -> None:
    snapshot, jobs, asks = contest
    free = Counter({n.name: snapshot.free_gpus(n.name) for n in snapshot.nodes()})
    decision = decide(snapshot, jobs, asks, OPEN, T0)
    # Gangs may be admitted on what their victims free, once they are gone (the controller launches
    # them then); replicas only on what is free now.
    stopping = {p.key for p in decision.jobs.preempted}
    freed = free.copy()
    for job in jobs:
        if job.key in stopping and job.placement is not None:
            freed.update(job.placement.gpus_by_node())
    gangs: Counter[str] = Counter()
    for admission in decision.jobs.admitted:
        if not admission.preempting:
            gangs.update(admission.placement.gpus_by_node())
    replicas: Counter[str] = Counter()
    for ask in asks:
        plan = decision.replicas[ask.service]
        assert len(plan.start) + plan.unplaced == ask.wanted
        for start in plan.start:
            replicas[start.node] += ask.request.gpus_per_replica
    assert all(replicas[name] + gangs[name] <= freed[name] for name in freed), (replicas, gangs, freed)
    assert all(replicas[name] <= free[name] for name in free), (replicas, free)
    assert {p.by for p in decision.jobs.preempted}.isdisjoint(a.key for a in asks)
    assert {n.name: snapshot.free_gpus(n.name) for n in snapshot.nodes()} == free  # left as found


def test_a_services_replicas_are_placed_once_by_the_scheduler_where_the_serving_policy_spreads_them() -> None:
    snapshot = ClusterSnapshot([gpu_node("a1", zone="a"), gpu_node("a2", zone="a"), gpu_node("b1", zone="b")])
    kept = (ServingReplica("chat-0", "a1", CapacityType.ON_DEMAND, ready=True),)
    snapshot.allocate({"a1": 1})
    ask = replace(an_ask("chat", 2), kept=kept, desired=3)
    schedule_result = decide(snapshot, [], [ask], OPEN, T0)
    plan = schedule_result.replicas[("ns", "chat")]
    # Spread beside the one it has in zone a: the first new one goes to b, then back to a's other node.
    assert [s.node for s in plan.start] == ["b1", "a2"]
    assert plan.reason == PlanReason.SCALING and plan.unplaced == 0


def test_new_replicas_keep_off_the_gpus_a_preemption_in_this_cycle_frees_until_its_stops_land() -> None:
    # n1 is full with a low-priority gang, n2 with others; a gang of 4 that outranks it preempts it and takes
    # half of n1. The service (between the two in priority) may not take n1's other half before low's pods go.
    snapshot = ClusterSnapshot([gpu_node("n1"), gpu_node("n2")])
    snapshot.allocate({"n2": 4})
    low = run_on(snapshot, pending("ns/low", 8, priority=0), ["n1"])
    urgent = pending("ns/urgent", 4, replicas=1, priority=10)
    filler = run_on(snapshot, pending("ns/filler", 4, priority=20), ["n2"])
    decision = decide(snapshot, [low, filler, urgent], [an_ask("chat", 4, priority=5)], OPEN, T0)
    assert [p.key for p in decision.jobs.preempted] == ["ns/low"]
    plan = decision.replicas[("ns", "chat")]
    assert plan.start == ()
    assert plan.unplaced == 4


def test_a_service_naming_no_gpu_type_spreads_over_zones_of_different_products_each_charged_its_own() -> None:
    h100s = [Node(f"a{i}", 8, 0, gpu_product="H100", capacity_type=CapacityType.ON_DEMAND, zone="a") for i in (1, 2)]
    a100 = Node("b1", 8, 0, gpu_product="A100", capacity_type=CapacityType.ON_DEMAND, zone="b")
    snapshot = ClusterSnapshot([*h100s, a100])
    capped = [QueueQuota("team", 16, gpu_type_quotas={"H100": 8, "A100": 8})]
    decision = decide(snapshot, [], [an_ask("chat", 2, queue="team")], capped, T0)
    assert sorted(s.zone or "" for s in decision.replicas[("ns", "chat")].start) == ["a", "b"]
    # A gang of the queue after them in the same cycle finds one of the queue's 8 H100s charged to a replica:
    # a2 is free, but the cap is not.
    gangs = [pending("ns/h", 8, queue="team", gpu_type="H100", priority=-1)]
    both = decide(snapshot, gangs, [an_ask("chat", 2, queue="team")], capped, T0)
    assert [(w.key, w.reason) for w in both.jobs.waiting] == [("ns/h", QUOTA_EXCEEDED)]
    assert both.jobs.queues["team"].used_gpus == 2


def test_a_services_replicas_over_several_products_keep_within_each_products_cap() -> None:
    nodes = [
        Node(f"{zone}{i}", 8, 0, gpu_product=product, capacity_type=CapacityType.ON_DEMAND, zone=zone)
        for zone, product in (("a", "H100"), ("b", "A100"))
        for i in range(2)
    ]
    snapshot = ClusterSnapshot(nodes)
    capped = [QueueQuota("team", 16, gpu_type_quotas={"H100": 1})]
    plan = decide(snapshot, [], [an_ask("chat", 4, queue="team")], capped, T0).replicas[("ns", "chat")]
    products = Counter("H100" if s.zone == "a" else "A100" for s in plan.start)
    assert products["H100"] == 1  # the cap on H100 holds; the A100s take the rest of what it spreads
    assert products["A100"] >= 1 and plan.unplaced == 4 - len(plan.start)
