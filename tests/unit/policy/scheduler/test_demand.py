"""The GPU demand a cycle leaves waiting, by GPU product, zone and first capacity type, for node autoscalers."""

from __future__ import annotations

from aisched.api.common import CapacityType
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.scheduler import schedule
from aisched.policy.scheduler.demand import ANY_GPU_TYPE, ANY_ZONE, pending_demand
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import T0, pending

H100 = "NVIDIA-H100-80GB-HBM3"
ANY = ANY_ZONE


def test_demand_counts_the_waiting_jobs_by_product_and_capacity_type() -> None:
    jobs = [
        pending("ns/a", 8, replicas=4, gpu_type=H100, capacity_types=(CapacityType.SPOT, CapacityType.ON_DEMAND)),
        pending("ns/b", 8, replicas=2, gpu_type=H100),
        pending("ns/c", 1, gpu_type="made-up-by-a-tenant"),
        pending("ns/d", 2),
        pending("ns/admitted", 8),
    ]
    waiting = {"ns/a", "ns/b", "ns/c", "ns/d"}
    assert pending_demand(jobs, waiting, {H100}) == {
        (H100, ANY, "Spot"): 32,
        (H100, ANY, "OnDemand"): 16,
        (ANY_GPU_TYPE, ANY, "OnDemand"): 3,
    }


def test_a_gang_counts_in_the_zone_of_its_planned_nodes_and_only_a_known_zone() -> None:
    jobs = [
        pending("ns/a", 8, replicas=4, gpu_type=H100, capacity_types=(CapacityType.SPOT,)),
        pending("ns/b", 8, replicas=2, gpu_type=H100, capacity_types=(CapacityType.SPOT,)),
        pending("ns/c", 8, gpu_type=H100, capacity_types=(CapacityType.SPOT,)),
        pending("ns/d", 8, gpu_type=H100, capacity_types=(CapacityType.SPOT,)),
    ]
    # A zone the cluster and the offerings do not know (there is no such plan, but the values are
    # checked all the same) is reported as any: no series is born from a value nobody configured.
    zone_of = {"ns/a": "us-east-1a", "ns/b": "us-east-1b", "ns/c": "us-east-1a", "ns/d": "zone-of-my-own"}
    demand = pending_demand(jobs, {j.key for j in jobs}, {H100}, zone_of, {"us-east-1a", "us-east-1b"})
    assert demand == {
        (H100, "us-east-1a", "Spot"): 40,
        (H100, "us-east-1b", "Spot"): 16,
        (H100, ANY, "Spot"): 8,
    }


def test_an_elastic_job_asks_for_its_smallest_gang() -> None:
    job = pending("ns/e", 8, replicas=4, min_replicas=2, max_replicas=8)
    assert pending_demand([job], {"ns/e"}, set()) == {(ANY_GPU_TYPE, ANY, "OnDemand"): 16}


def test_what_a_cycle_leaves_waiting_is_its_demand() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    jobs = [pending("ns/fits", 8), pending("ns/waits", 8, replicas=2)]
    result = schedule(snapshot, jobs, [], T0)
    waiting = {w.key for w in result.waiting}
    assert pending_demand(jobs, waiting, set()) == {(ANY_GPU_TYPE, ANY, "OnDemand"): 16}
