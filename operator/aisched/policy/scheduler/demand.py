"""The GPU demand a cycle left waiting, as a node autoscaler would scale on it.

Grouped by the GPU product a job asks for and the capacity type it would take first, so that a
cluster-autoscaler or KEDA user can grow the right node group. A product no node has (or none
named) is reported as `ANY_GPU_TYPE`: label values come from the cluster, never from what a
tenant writes, so the series stay few.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from aisched.policy.scheduler.jobs import JobRequest

ANY_GPU_TYPE = "any"


def pending_demand(
    jobs: Iterable[JobRequest], waiting: Collection[str], products: Collection[str]
) -> dict[tuple[str, str], int]:
    """GPUs asked for by the jobs whose keys are in WAITING, by (gpu type, first capacity type)."""
    demand: dict[tuple[str, str], int] = {}
    for job in jobs:
        if job.key not in waiting or job.placement is not None:
            continue
        gpu_type = job.gpu_type if job.gpu_type is not None and job.gpu_type in products else ANY_GPU_TYPE
        capacity = job.capacity_types[0].value if job.capacity_types else "OnDemand"
        key = (gpu_type, capacity)
        demand[key] = demand.get(key, 0) + job.gpus_per_replica * (job.min_replicas or job.replicas)
    return demand
