"""The GPU demand a cycle left waiting, as a node autoscaler would scale on it.

Grouped by the GPU product a job asks for, the zone its nodes would be in and the capacity type it
would take first, so that a cluster-autoscaler or KEDA user can grow the right node group. A
product no node has (or none named) is reported as `ANY_GPU_TYPE`. The zone is the one the nodes
planned for the gang are in (`policy.provisioning`: asked for, or coming with room for it), when
the zone is one the operator knows (a node's or an offering's); else `ANY_ZONE`: a gang for which
nothing is planned may go to any zone (one that requires a single zone names no particular one),
or waits for something other than nodes. Label values come from the cluster and the operator's
own configuration, never from what a tenant writes, so the series stay few.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from aisched.policy.scheduler.jobs import JobRequest

ANY_GPU_TYPE = "any"
ANY_ZONE = "any"


def pending_demand(
    jobs: Iterable[JobRequest],
    waiting: Collection[str],
    products: Collection[str],
    zone_of: Mapping[str, str] | None = None,
    zones: Collection[str] = (),
) -> dict[tuple[str, str, str], int]:
    """GPUs asked for by the jobs whose keys are in WAITING, by (gpu type, zone, first capacity type).

    ZONE_OF: the zone of the nodes planned for a job, by key; only ZONES (known ones) are reported."""
    planned = zone_of or {}
    demand: dict[tuple[str, str, str], int] = {}
    for job in jobs:
        if job.key not in waiting or job.placement is not None:
            continue
        gpu_type = job.gpu_type if job.gpu_type is not None and job.gpu_type in products else ANY_GPU_TYPE
        zone = planned.get(job.key, ANY_ZONE)
        if zone not in zones:
            zone = ANY_ZONE
        capacity = job.capacity_types[0].value if job.capacity_types else "OnDemand"
        key = (gpu_type, zone, capacity)
        demand[key] = demand.get(key, 0) + job.gpus_per_replica * (job.min_replicas or job.replicas)
    return demand
