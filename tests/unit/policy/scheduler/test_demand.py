"""The GPU demand a cycle leaves waiting, by GPU product and first capacity type, for node autoscalers."""

from __future__ import annotations

from aisched.api.common import CapacityType
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.scheduler import schedule
from aisched.policy.scheduler.demand import ANY_GPU_TYPE, pending_demand
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import T0, pending

H100 = "NVIDIA-H100-80GB-HBM3"


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
        (H100, "Spot"): 32,
        (H100, "OnDemand"): 16,
        (ANY_GPU_TYPE, "OnDemand"): 3,
    }


def test_an_elastic_job_asks_for_its_smallest_gang() -> None:
    job = pending("ns/e", 8, replicas=4, min_replicas=2, max_replicas=8)
    assert pending_demand([job], {"ns/e"}, set()) == {(ANY_GPU_TYPE, "OnDemand"): 16}


def test_what_a_cycle_leaves_waiting_is_its_demand() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    jobs = [pending("ns/fits", 8), pending("ns/waits", 8, replicas=2)]
    result = schedule(snapshot, jobs, [], T0)
    waiting = {w.key for w in result.waiting}
    assert pending_demand(jobs, waiting, set()) == {(ANY_GPU_TYPE, "OnDemand"): 16}
