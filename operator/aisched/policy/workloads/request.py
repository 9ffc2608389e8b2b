"""A workload of any kind as the scheduler's cycle takes it: one `JobRequest`. Pure.

The cycle orders, charges and places `JobRequest`s (`policy.scheduler`), as it does TrainingJobs
(`JobRequest.from_training_job`): a workload is one more request of the same shape, its GPU pods
the replicas. Pod sets that ask no GPU (a Ray head, a launcher) are not placed: they start with
the workload wherever kube-scheduler puts them. A workload whose pods ask no GPU needs no request
at all (quota is in GPUs: it is admitted at once).
"""

from __future__ import annotations

from aisched.api.sharing import GpuShare
from aisched.policy.cluster_description import GPU_PRODUCT_LABEL
from aisched.policy.placement import Placement
from aisched.policy.queueing import MILLI
from aisched.policy.saturating_time import seconds_duration
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.shared_room import ShareShape
from aisched.policy.sharing.charge import replica_milli
from aisched.policy.taints import Toleration
from aisched.policy.topology import Topology
from aisched.policy.workloads.model import PodSet, Workload


def as_request(
    workload: Workload,
    *,
    topology: Topology,
    placement: Placement | None,
    excluded_nodes: frozenset[str] = frozenset(),
) -> JobRequest:
    """What WORKLOAD asks of the cycle: its GPU pods as the replicas of one request, placed in TOPOLOGY's levels.

    A gang (`Workload.gang`): all its GPU pods, elastic down to the sum of its sets' least counts when any
    set is elastic; PLACEMENT is where its running gang is (None: pending), as for a TrainingJob.

    A model server's replicas (not a gang: a Deployment, a StatefulSet) are a replica set, as an
    InferenceService's new replicas are (`policy.decision.ReplicaAsk`): as many start as free GPUs and
    quota hold, from one up, and they never preempt, shrink or reserve. The request asks for the replicas
    not yet placed (its count less PLACEMENT's nodes); the placed ones are not part of it: the caller
    hands them to the cycle as held GPUs (`scheduler.HeldGpus`), one replica each, as a service's
    running replicas are, so the cycle never preempts or shrinks them as it would a gang. A request
    that asks for 0 replicas (all placed, or no GPU pod) is one the caller does not send.

    Levels a topology does not have are no constraint here (the caller refuses them beforehand, as
    `policy.level_refusals` does a TrainingJob's)."""
    gpu_sets = workload.gpu_pod_sets
    shape = gpu_sets[0] if gpu_sets else None
    mig_profile = shape.mig_profile if shape is not None else None
    gpus_per_replica = 1 if mig_profile is not None else (shape.gpus_per_pod if shape is not None else 0)
    replicas, min_replicas, max_replicas = _counts(workload, gpu_sets, placement)
    return JobRequest(
        key=workload.key,
        queue=workload.queue,
        priority=workload.priority,
        created=workload.created,
        gpus_per_replica=gpus_per_replica,
        replicas=replicas,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        gpu_type=_gpu_type(gpu_sets),
        required_level=topology.find(workload.required_level) if workload.required_level else None,
        preferred_level=topology.find(workload.preferred_level) if workload.preferred_level else None,
        tolerations=_common_tolerations(gpu_sets),
        capacity_types=workload.capacity_types,
        excluded_nodes=excluded_nodes,
        expected_duration=(
            seconds_duration(workload.expected_duration_seconds) if workload.expected_duration_seconds else None
        ),
        placement=placement if workload.gang else None,
        started=workload.admitted.admitted_at if workload.gang and placement and workload.admitted else None,
        milli_per_replica=pod_milli(workload) if mig_profile is not None else None,
        share=ShareShape(mig_profile=mig_profile) if mig_profile is not None else None,
        replica_set=not workload.gang,
    )


def pod_milli(workload: Workload) -> int:
    """What one of WORKLOAD's GPU pods is charged, in thousandths: its whole GPUs, or its MIG instance's share."""
    shape = workload.gpu_pod_sets[0] if workload.gpu_pod_sets else None
    return 0 if shape is None else milli_of(shape.gpus_per_pod, shape.mig_profile)


def milli_of(gpus: int, mig_profile: str | None) -> int:
    """What a pod of GPUS whole GPUs, or of one MIG_PROFILE instance, is charged, in thousandths."""
    if mig_profile is not None:
        return replica_milli(GpuShare(mig_profile=mig_profile), 1)
    return max(gpus, 0) * MILLI


def _counts(
    workload: Workload, gpu_sets: tuple[PodSet, ...], placement: Placement | None
) -> tuple[int, int | None, int | None]:
    """(replicas, min_replicas, max_replicas) of the request."""
    total = workload.gpu_pods
    if not workload.gang:
        wanted = max(total - (len(placement.nodes) if placement is not None else 0), 0)
        return wanted, min(1, wanted), wanted
    if all(s.min_count is None for s in gpu_sets):
        return total, None, None
    least = sum(s.count if s.min_count is None else s.min_count for s in gpu_sets)
    # A gang of none is no gang: an autoscaled Ray group of minReplicas 0 still starts with one GPU pod.
    return total, min(max(least, 1), total), total


def _gpu_type(gpu_sets: tuple[PodSet, ...]) -> str | None:
    """The GPU product the GPU pods select (`nvidia.com/gpu.product`), when they all select the same one."""
    products = {s.node_selector.get(GPU_PRODUCT_LABEL) for s in gpu_sets}
    return products.pop() if len(products) == 1 else None


def _common_tolerations(gpu_sets: tuple[PodSet, ...]) -> tuple[Toleration, ...]:
    """The tolerations every GPU pod has: any GPU pod may be placed on any of the gang's nodes."""
    if not gpu_sets:
        return ()
    return tuple(t for t in gpu_sets[0].tolerations if all(t in s.tolerations for s in gpu_sets[1:]))
