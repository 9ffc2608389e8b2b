"""A pending or running TrainingJob as the scheduler sees it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from aisched.api.common import CapacityType
from aisched.api.training_job import TrainingJob, TrainingJobPhase
from aisched.policy.cluster import Toleration
from aisched.policy.lifecycle import INTERRUPTED
from aisched.policy.placement import GangRequest, Placement
from aisched.policy.queueing import MILLI
from aisched.policy.saturating_time import seconds_duration
from aisched.policy.shared_room import ShareShape
from aisched.policy.sharing.charge import replica_milli
from aisched.policy.topology import LOCAL_TOPOLOGY, Level, Topology

_LONG_AGO = datetime.min.replace(tzinfo=UTC)  # a job with no creation time yet queues first among equals


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What the scheduler needs to know about one TrainingJob.

    A running job has a `placement`; the snapshot already counts its GPUs as used.
    """

    key: str
    """namespace/name"""
    queue: str
    priority: int
    created: datetime
    gpus_per_replica: int
    replicas: int
    min_replicas: int | None = None
    max_replicas: int | None = None
    gpu_type: str | None = None
    required_level: Level | None = None
    preferred_level: Level | None = None
    tolerations: tuple[Toleration, ...] = ()
    capacity_types: tuple[CapacityType, ...] = (CapacityType.ON_DEMAND,)
    excluded_nodes: frozenset[str] = frozenset()
    """Nodes it must not use (doomed capacity, a bind that failed there)."""
    expected_duration: timedelta | None = None
    placement: Placement | None = None
    started: datetime | None = None
    """When the current gang was placed (a running job); its service since then is not yet in
    `attained_gpu_seconds`."""
    attained_gpu_seconds: float = 0.0
    """GPU-seconds of service of its earlier runs (status.attainedGpuSeconds)."""
    set_back: bool = False
    """Queued again because its capacity was interrupted (not preempted): it resumes ahead of newcomers."""
    milli_per_replica: int | None = None
    """GPU-equivalents (thousandths) one replica holds when that is not `gpus_per_replica` whole GPUs (a
    `gpuShare`: a fraction or a MIG instance): the queue is charged this. In the snapshot a replica takes a
    whole GPU only where its fraction splits a wholly free one (`Placement.gpus_by_node`)."""
    gpu_memory_mib: int = 0
    """MiB of the GPU a memory share was charged by (0: unknown or no memory share)."""
    share: ShareShape | None = None
    """The part of one GPU each replica asks (`gpuShare`): placed where a GPU has room for it, or a MIG
    instance is free (`policy.share_placement`)."""
    replica_set: bool = False
    """New replicas of an InferenceService (`policy.decision`), not a gang: as many start as free GPUs
    and the queue's quota hold, in the same order as gangs; they never preempt, shrink or reserve."""

    @property
    def replica_milli(self) -> int:
        """What one replica is charged, in GPU-equivalents (thousandths)."""
        return self.gpus_per_replica * MILLI if self.milli_per_replica is None else self.milli_per_replica

    def charge(self, replicas: int) -> int:
        """GPU-equivalents (thousandths) REPLICAS of this job are charged to its queue."""
        return replicas * self.replica_milli

    @property
    def held_milli(self) -> int:
        """What the running gang holds now (0 when pending)."""
        return self.charge(self.placement.replicas) if self.placement is not None else 0

    @property
    def running(self) -> bool:
        return self.placement is not None

    @property
    def elastic(self) -> bool:
        return self.min_replicas is not None and self.max_replicas is not None

    @classmethod
    def from_training_job(
        cls,
        job: TrainingJob,
        *,
        capacity_types: tuple[CapacityType, ...],
        placement: Placement | None = None,
        excluded_nodes: frozenset[str] = frozenset(),
        topology: Topology = LOCAL_TOPOLOGY,
        gpu_memory_mib: int = 0,
    ) -> JobRequest:
        """What a TrainingJob asks for. `placement` (for a running gang) comes from its status and the snapshot:
        `Placement.of_nodes(status.placement.nodes, spec.gpus_per_replica, snapshot)`. Its levels are read in
        TOPOLOGY (the snapshot's); one it does not have is no constraint here: a waiting job that names one is
        refused before it gets here (`aisched.policy.levels.level_refusal`). A `gpuShare` worker is charged what it
        holds (`aisched.policy.sharing.charge`), a memory share by GPUs of GPU_MEMORY_MIB (0: unknown, whole)."""
        spec, meta = job.spec, job.metadata
        template_spec = spec.template.get("spec") or {}
        created = meta.get("creationTimestamp")
        return cls(
            key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            queue=spec.queue,
            priority=spec.priority,
            created=datetime.fromisoformat(created) if isinstance(created, str) else created or _LONG_AGO,
            gpus_per_replica=spec.gpus_per_replica,
            replicas=spec.replicas,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            gpu_type=spec.gpu_type,
            required_level=_level(topology, spec.topology.required_level),
            preferred_level=_level(topology, spec.topology.preferred_level),
            tolerations=tuple(Toleration.from_dict(t) for t in template_spec.get("tolerations") or ()),
            capacity_types=capacity_types,
            excluded_nodes=excluded_nodes,
            expected_duration=(
                seconds_duration(spec.expected_duration_seconds) if spec.expected_duration_seconds else None
            ),
            placement=placement,
            started=(job.status.run_start_time or job.status.start_time) if placement is not None else None,
            attained_gpu_seconds=job.status.attained_gpu_seconds or 0.0,
            set_back=job.status.phase == TrainingJobPhase.QUEUED and job.status.reason == INTERRUPTED,
            milli_per_replica=(
                replica_milli(spec.gpu_share, spec.gpus_per_replica, gpu_memory_mib) if spec.gpu_share else None
            ),
            gpu_memory_mib=gpu_memory_mib,
            share=ShareShape.of(spec.gpu_share),
        )

    def gang(self, replicas: int, gpu_types: frozenset[str] | None, excluded: frozenset[str]) -> GangRequest:
        return GangRequest(
            replicas=replicas,
            gpus_per_replica=self.gpus_per_replica,
            gpu_types=gpu_types,
            required_level=self.required_level,
            preferred_level=self.preferred_level,
            tolerations=self.tolerations,
            capacity_types=self.capacity_types,
            excluded_nodes=excluded,
            share=self.share,
        )


def _level(topology: Topology, name: str | None) -> Level | None:
    return topology.find(name) if name else None
