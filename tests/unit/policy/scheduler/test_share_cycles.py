"""A cycle places shares and MIG workers on the GPUs that have room for them, and what it admits the next job sees."""

from __future__ import annotations

from dataclasses import replace

from aisched.api.common import CapacityType
from aisched.policy.cluster import ClusterSnapshot, local_node
from aisched.policy.placement import INSUFFICIENT_GPUS, Placement, hold, release
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import JobRequest, schedule
from aisched.policy.shared_room import SharedRoom, SharePart, ShareShape
from aisched.policy.topology import LOCAL_TOPOLOGY, DomainId
from tests.unit.policy.scheduler.cycles import T0, keys, pending

H100 = "NVIDIA-H100-80GB-HBM3"
QUEUES = [QueueQuota("default", 16)]


def test_shares_fill_a_partly_shared_gpu_then_a_free_one_and_never_one_past_its_capacity() -> None:
    # One node, two GPUs: gpu-0 is 50% held by a share, gpu-1 is free (as whole GPUs go the node has 1 free).
    node = local_node("n1", 2, zone="z", rack="r", nvlink_domain="n1", used_gpus=1, gpu_product=H100)
    snapshot = ClusterSnapshot([node], LOCAL_TOPOLOGY)
    snapshot.shared = SharedRoom({"n1": {"gpu-0": (500, 40_000)}}, {"n1": 80_000})
    jobs = [
        pending(f"ns/s{i}", 1, milli_per_replica=400, share=ShareShape(400), created=T0.replace(minute=i))
        for i in range(4)
    ]
    result = schedule(snapshot, jobs, QUEUES, T0)
    admitted, waiting, _ = keys(result)
    # gpu-0 takes one 40% (500 free), gpu-1 two (1000 free): three, and the fourth waits for GPUs.
    assert admitted == ["ns/s0", "ns/s1", "ns/s2"] and waiting == ["ns/s3"]
    parts = [a.placement.parts[0] for a in result.admitted]
    assert [(p.device, p.splits) for p in parts] == [("gpu-0", False), ("gpu-1", True), ("gpu-1", False)]
    assert result.waiting[0].reason == INSUFFICIENT_GPUS
    assert snapshot.shared.parts == {"n1": {"gpu-0": (500, 40_000)}}, "the cycle leaves the snapshot as it was"
    assert snapshot.free_gpus("n1") == 1


def test_mig_workers_are_admitted_on_the_nodes_with_free_instances_and_recorded_there() -> None:
    whole = local_node("w1", 8, zone="z", rack="r1", nvlink_domain="w1", gpu_product=H100)
    snapshot = ClusterSnapshot([whole], LOCAL_TOPOLOGY)
    mig = local_node("m1", 0, zone="z", rack="r2", nvlink_domain="m1", gpu_product=H100)
    snapshot.shared = SharedRoom(mig_nodes=[mig], mig_free={"m1": {"1g.10gb": 2}})
    one_g = ShareShape(mig_profile="1g.10gb")
    jobs = [pending(f"ns/m{i}", 1, milli_per_replica=143, share=one_g, created=T0.replace(minute=i)) for i in range(3)]
    jobs.append(pending("ns/whole", 8, created=T0.replace(minute=9), capacity_types=(CapacityType.ON_DEMAND,)))
    result = schedule(snapshot, jobs, QUEUES, T0)
    admitted, waiting, _ = keys(result)
    assert admitted == ["ns/m0", "ns/m1", "ns/whole"] and waiting == ["ns/m2"]
    by_key = {a.key: a.placement for a in result.admitted}
    assert by_key["ns/m0"].to_status().nodes == ["m1"] and by_key["ns/m0"].mig_profile == "1g.10gb"
    assert by_key["ns/whole"].nodes == ("w1",)  # the MIG workers took none of its GPUs


HALF = ShareShape(500)


def _one_gpu_held_in_halves(priorities: tuple[int, int]) -> tuple[ClusterSnapshot, list[JobRequest]]:
    """One node of one GPU, held half and half by two running fraction gangs of PRIORITIES."""
    node = local_node("n1", 1, zone="z", rack="r", nvlink_domain="n1", used_gpus=1, gpu_product=H100)
    snapshot = ClusterSnapshot([node], LOCAL_TOPOLOGY)
    snapshot.shared = SharedRoom({"n1": {"gpu-0": (0, 0)}}, {"n1": 80_000})
    half = (SharePart("n1", "gpu-0", 500, 40_000, splits=False),)
    placement = replace(Placement.of_nodes(("n1",), 1, snapshot), parts=half)
    shares = [
        replace(pending(f"ns/half{i}", 1, milli_per_replica=500, share=HALF, priority=priority), placement=placement)
        for i, priority in enumerate(priorities)
    ]
    return snapshot, shares


def test_a_whole_gpu_job_preempts_every_share_of_a_gpu_not_just_one() -> None:
    # Stopping one of the halves frees no whole GPU: the other still holds its part.
    snapshot, shares = _one_gpu_held_in_halves((0, 0))
    result = schedule(snapshot, [*shares, pending("ns/urgent", 1, priority=10)], QUEUES, T0)
    admitted, _, preempted = keys(result)
    assert admitted == ["ns/urgent"]
    assert sorted(preempted) == ["ns/half0", "ns/half1"]
    assert snapshot.shared.parts == {"n1": {"gpu-0": (0, 0)}} and snapshot.free_gpus("n1") == 0


def test_a_share_preempts_one_share_where_its_part_is_enough() -> None:
    snapshot, shares = _one_gpu_held_in_halves((0, 1))
    urgent = pending("ns/urgent", 1, milli_per_replica=500, share=HALF, priority=10)
    result = schedule(snapshot, [*shares, urgent], QUEUES, T0)
    admitted, _, preempted = keys(result)
    assert admitted == ["ns/urgent"] and preempted == ["ns/half0"]
    assert result.admitted[0].placement.parts[0].device == "gpu-0"


def test_a_mig_job_preempts_a_lower_priority_mig_job_for_its_instance() -> None:
    mig = local_node("m1", 0, zone="z", rack="r", nvlink_domain="m1", gpu_product=H100)
    snapshot = ClusterSnapshot([], LOCAL_TOPOLOGY)
    snapshot.shared = SharedRoom(mig_nodes=[mig], mig_free={"m1": {}})
    one_g = ShareShape(mig_profile="1g.10gb")
    placed = Placement(("m1",), 1, DomainId(None, ()), mig_profile="1g.10gb")
    low = replace(pending("ns/low", 1, milli_per_replica=143, share=one_g), placement=placed, started=T0)
    urgent = pending("ns/urgent", 1, milli_per_replica=143, share=one_g, priority=10)
    result = schedule(snapshot, [low, urgent], QUEUES, T0)
    assert keys(result) == (["ns/urgent"], [], ["ns/low"])
    assert snapshot.shared.mig_free["m1"].get("1g.10gb", 0) == 0, "the cycle leaves the snapshot as it was"


def test_releasing_a_placement_undoes_holding_it() -> None:
    node = local_node("n1", 4, zone="z", rack="r", nvlink_domain="n1", used_gpus=1, gpu_product=H100)
    mig = local_node("m1", 0, zone="z", rack="r", nvlink_domain="m1", gpu_product=H100)
    snapshot = ClusterSnapshot([node], LOCAL_TOPOLOGY)
    snapshot.shared = SharedRoom({"n1": {"gpu-0": (300, 20_000)}}, {"n1": 80_000}, [mig], {"m1": {"1g.10gb": 3}})
    before = (snapshot.free_gpus("n1"), snapshot.shared.parts, snapshot.shared.mig_free)
    domain = DomainId(None, ())
    placements = [
        Placement(
            ("n1", "n1"),
            1,
            domain,
            parts=(
                SharePart("n1", "gpu-0", 200, 8_000, splits=False),  # joins a GPU shares hold
                SharePart("n1", "gpu-1", 500, 40_000, splits=True),  # splits a free one
            ),
        ),
        Placement(("m1", "m1"), 1, domain, mig_profile="1g.10gb"),
        Placement(("n1",), 2, domain),
    ]
    for placement in placements:
        hold(snapshot, placement)
    for placement in reversed(placements):
        release(snapshot, placement)
    assert (snapshot.free_gpus("n1"), snapshot.shared.parts, snapshot.shared.mig_free) == before
