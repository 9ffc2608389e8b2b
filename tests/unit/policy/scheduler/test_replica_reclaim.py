"""Quota lent is quota given back: InferenceService replicas that borrow a cohort's idle quota are
reclaimed by the lending queue's job, in the same cycle and the same plan as a borrowing gang."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from aisched.policy.cluster import ClusterSnapshot, local_node
from aisched.policy.decision import decide
from aisched.policy.job_messages import admitted_message
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import HeldGpus, HeldReplica, ReclaimedReplica, schedule
from aisched.policy.shared_room import SharedRoom, SharePart, ShareShape
from aisched.policy.topology import LOCAL_TOPOLOGY
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import T0, keys, pending, run_on

COHORT = [QueueQuota("lender", 8, cohort="c"), QueueQuota("borrower", 8, cohort="c")]


def serving(
    snapshot: ClusterSnapshot,
    service: str,
    nodes: Sequence[str],
    *,
    gpus: int = 4,
    queue: str = "borrower",
    priority: int = 0,
    first: int = 0,
) -> list[HeldGpus]:
    """SERVICE's replicas running on NODES (one each, pods numbered from FIRST); the snapshot counts them."""
    held = []
    for index, node in enumerate(nodes, start=first):
        snapshot.allocate({node: gpus})
        replica = HeldReplica(f"ns-b/{service}", f"{service}-h-{index}", node, gpus, priority)
        held.append(HeldGpus(queue, gpus * 1000, "H100", replica))
    return held


def test_the_lender_takes_back_what_replicas_borrow_newest_first_on_one_node() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    held = serving(snapshot, "chat", ["r-n0", "r-n1", "r-n0", "r-n1"])  # 16 GPUs on a quota of 8
    job = pending("ns-a/train", 8, queue="lender")
    result = schedule(snapshot, [job], COHORT, T0, held_elsewhere=held)
    (admission,) = result.admitted
    assert admission.key == "ns-a/train"
    assert {r.pod for r in result.reclaimed} == {"chat-h-3", "chat-h-1"}  # the newest two, both on r-n1
    assert admission.placement.nodes == ("r-n1",)
    assert all(r == ReclaimedReplica("ns-b/chat", r.pod, "lender", "ns-a/train") for r in result.reclaimed)
    assert result.preempted == ()  # no gang was stopped
    assert result.queues["borrower"].used_gpus == 8 and result.queues["borrower"].borrowed_gpus == 0
    assert snapshot.free_gpus("r-n1") == 0, "the snapshot is left as it was found"


def test_a_plan_takes_no_more_of_a_queue_than_it_borrows() -> None:
    # The borrower's nominal 12 of a 16-GPU cluster: it borrows 4, one replica's worth. Taking back
    # that one leaves 4 GPUs for the lender's 8-GPU job, which waits: no second replica goes.
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    held = serving(snapshot, "chat", ["r-n0", "r-n1", "r-n0", "r-n1"])
    roomy = [QueueQuota("lender", 8, cohort="c"), QueueQuota("borrower", 12, cohort="c")]
    result = schedule(snapshot, [pending("ns-a/train", 8, queue="lender")], roomy, T0, held_elsewhere=held)
    assert (keys(result)[0], result.reclaimed) == ([], ())
    # A 4-GPU job fits in what is borrowed: one replica goes, the newest.
    result = schedule(snapshot, [pending("ns-a/small", 4, queue="lender")], roomy, T0, held_elsewhere=held)
    assert keys(result)[0] == ["ns-a/small"]
    assert [r.pod for r in result.reclaimed] == ["chat-h-3"]


def test_lowest_priority_replicas_go_first_and_higher_ones_than_the_job_never() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    held = [
        *serving(snapshot, "urgent", ["r-n0", "r-n1"], priority=9),
        *serving(snapshot, "cheap", ["r-n0", "r-n1"], priority=1),
    ]
    job = pending("ns-a/train", 8, queue="lender", priority=5)
    result = schedule(snapshot, [job], COHORT, T0, held_elsewhere=held)
    assert keys(result)[0] == []  # only the cheap ones are below it, and they are on two nodes
    result = schedule(snapshot, [pending("ns-a/half", 4, queue="lender", priority=5)], COHORT, T0, held_elsewhere=held)
    assert [r.service for r in result.reclaimed] == ["ns-b/cheap"]


def test_only_a_lender_within_its_nominal_quota_reclaims_and_never_from_its_own_queue() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    held = serving(snapshot, "chat", ["r-n0", "r-n1", "r-n0", "r-n1"])
    over = pending("ns-a/big", 16, queue="lender")  # beyond its nominal 8: nothing is its to take back
    assert schedule(snapshot, [over], COHORT, T0, held_elsewhere=held).reclaimed == ()
    outside = [*COHORT, QueueQuota("stranger", 8)]  # a queue of no cohort lent nothing
    assert (
        schedule(snapshot, [pending("ns-s/job", 8, queue="stranger")], outside, T0, held_elsewhere=held).reclaimed == ()
    )
    own = pending("ns-b/train", 8, queue="borrower")  # the borrower's own job does not take its own replicas
    assert schedule(snapshot, [own], COHORT, T0, held_elsewhere=held).reclaimed == ()


def test_one_plan_takes_back_from_a_borrowing_gang_and_replicas_together() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    gang = run_on(snapshot, pending("ns-b/gang", 4, queue="borrower"), ["r-n1"], started=T0 - timedelta(hours=1))
    held = serving(snapshot, "chat", ["r-n0", "r-n0", "r-n1"])  # 4 + 12: the borrower borrows 8
    result = schedule(snapshot, [gang, pending("ns-a/train", 8, queue="lender")], COHORT, T0, held_elsewhere=held)
    assert keys(result)[0] == ["ns-a/train"]
    taken = {p.key for p in result.preempted} | {r.pod for r in result.reclaimed}
    assert len(taken) == 2 and result.admitted[0].placement.nodes[0] in ("r-n0", "r-n1")


def test_the_decision_names_the_lending_queue_to_the_service_and_no_service_to_the_lender() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    held = serving(snapshot, "chat", ["r-n0", "r-n1", "r-n0", "r-n1"])
    job = pending("ns-a/train", 8, queue="lender")
    decision = decide(snapshot, [job], [], COHORT, T0, held_elsewhere=held)
    reclaim = decision.reclaimed[("ns-b", "chat")]
    assert sorted(reclaim.pods) == ["chat-h-1", "chat-h-3"]
    assert reclaim.message == "2 replica(s) reclaimed by the lending queue lender"
    (admission,) = decision.jobs.admitted
    # Its victims are named to it as any other namespace's are (counted, `job_messages`); the admission
    # waits for them to go, as one that preempts does (`apply_result`, `decisions._still_free`).
    assert len(admission.preempting) == 2 and all(key.startswith("ns-b/") for key in admission.preempting)
    message = admitted_message(admission.placement, admission.preempting, admission.key)
    assert "chat" not in message and "ns-b" not in message, message


def test_the_lender_takes_back_fraction_replicas_by_the_parts_of_gpus_they_hold() -> None:
    # A borrower's replicas hold 50% of each GPU of one 2-GPU node (4 replicas, 2 GPUs of compute) on a
    # nominal quota of 1: it borrows 1 GPU. The lender's job of one whole GPU takes back the two on gpu-1.
    node = local_node("n1", 2, zone="z", rack="r", nvlink_domain="n1", used_gpus=2, gpu_product="H100")
    snapshot = ClusterSnapshot([node], LOCAL_TOPOLOGY)
    snapshot.shared = SharedRoom({"n1": {"gpu-0": (0, 0), "gpu-1": (0, 0)}}, {"n1": 80_000})
    held = []
    for index, device in enumerate(["gpu-0", "gpu-0", "gpu-1", "gpu-1"]):
        part = SharePart("n1", device, 500, 40_000, splits=False)
        replica = HeldReplica("ns-b/chat", f"chat-{index}", "n1", 0, 0, part=part)
        held.append(HeldGpus("borrower", 500, "H100", replica))
    quotas = [QueueQuota("lender", 1, cohort="c"), QueueQuota("borrower", 1, cohort="c")]
    result = schedule(snapshot, [pending("ns-a/train", 1, queue="lender")], quotas, T0, held_elsewhere=held)
    assert keys(result)[0] == ["ns-a/train"]
    assert sorted(r.pod for r in result.reclaimed) == ["chat-2", "chat-3"]  # the newest two: all of gpu-1
    assert result.queues["borrower"].used_gpus == 1


def test_the_lender_takes_back_a_mig_replica_for_a_job_of_the_same_instance() -> None:
    mig = local_node("m1", 0, zone="z", rack="r", nvlink_domain="m1", gpu_product="H100")
    snapshot = ClusterSnapshot([], LOCAL_TOPOLOGY)
    snapshot.shared = SharedRoom(mig_nodes=[mig], mig_free={"m1": {"1g.10gb": 0}})
    held = [
        HeldGpus("borrower", 143, "H100", HeldReplica("ns-b/chat", f"chat-{i}", "m1", 0, 0, mig_profile="1g.10gb"))
        for i in range(7)
    ]
    quotas = [QueueQuota("lender", 1, cohort="c"), QueueQuota("borrower", 0, cohort="c")]
    job = replace(
        pending("ns-a/tiny", 1, queue="lender"), share=ShareShape(mig_profile="1g.10gb"), milli_per_replica=143
    )
    result = schedule(snapshot, [job], quotas, T0, held_elsewhere=held)
    assert keys(result)[0] == ["ns-a/tiny"]
    assert [r.pod for r in result.reclaimed] == ["chat-6"]
    assert result.admitted[0].placement.mig_profile == "1g.10gb"
