"""A pending or running TrainingJob as the scheduler sees it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from aisched.api.common import CapacityType
from aisched.api.sharing import GpuShare
from aisched.api.training_job import TrainingJob, TrainingJobPhase
from aisched.policy.cluster import Toleration
from aisched.policy.lifecycle import INTERRUPTED
from aisched.policy.placement import GangRequest, Placement
from aisched.policy.queueing import MILLI
from aisched.policy.saturating_time import seconds_duration
from aisched.policy.shared_room import ShareShape
from aisched.policy.sharing.charge import replica_milli
from aisched.policy.topology import LOCAL_TOPOLOGY, Level, Topology

if TYPE_CHECKING:
    from aisched.policy.replica_placement import ReplicaSpread

_LONG_AGO = datetime.min.replace(tzinfo=UTC)  # a job with no creation time yet queues first among equals


@dataclass(frozen=True, slots=True)
class HeldByPods:
    """The most one live pod of a gang holds, as the API server says it holds it (`kube.records`)."""

    whole_gpus: int = 0
    """Whole GPUs: its containers' and its other claims'."""
    milli: int = 0
    """Every GPU it holds, in GPU-equivalents (thousandths): whole, a part of one, MIG instances."""


NOTHING_HELD: Final = HeldByPods()


@dataclass(frozen=True, slots=True)
class WorkerCharge:
    """What each worker of a gang holds and is charged to its queue."""

    gpus_per_replica: int
    share: GpuShare | None
    """The part of one GPU each worker holds (None: whole GPUs)."""
    milli_per_replica: int | None
    """Its charge in GPU-equivalents (thousandths) when that is not `gpus_per_replica` whole GPUs."""


def admitted_shape(job: TrainingJob) -> tuple[int, GpuShare | None]:
    """GPUs per worker and the part of a GPU each holds, as the running gang of JOB was admitted with them.

    Its pods were made from them, and a later spec does not reach its pods: an edit of the spec under a
    live gang (which the CRD's rules refuse, `aisched.api.running_shape`) must not change its charge. The
    cycle records them in the status placement, which only the operator writes; a placement recorded
    before it did so: the spec, never fewer GPUs per worker than the status says the gang holds."""
    placement, status = job.status.placement, job.status
    if placement is not None and placement.gpus_per_replica is not None:
        return placement.gpus_per_replica, placement.gpu_share
    per_worker = -(-(status.gpus or 0) // status.replicas) if status.replicas else 0
    return max(job.spec.gpus_per_replica, per_worker), job.spec.gpu_share


def running_charge(job: TrainingJob, held: HeldByPods = NOTHING_HELD, gpu_memory_mib: int = 0) -> WorkerCharge:
    """What each worker of JOB's running gang is charged: what it was admitted with (`admitted_shape`), and
    never less than the most any of its pods HELD holds. While the pods live, the charge never shrinks."""
    gpus, share = admitted_shape(job)
    if share is None:
        gpus = max(gpus, held.whole_gpus)
    milli = max(replica_milli(share, gpus, gpu_memory_mib), held.milli)
    return WorkerCharge(gpus, share, milli if share is not None or milli != gpus * MILLI else None)


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
    spread: ReplicaSpread | None = None
    """How a service's new replicas are placed (beside its running ones, over zones and nodes): set, the
    scheduler places them as the serving policy spreads them, once (`policy.serving.place_replica_set`)."""

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
        held: HeldByPods = NOTHING_HELD,
    ) -> JobRequest:
        """What a TrainingJob asks for. `placement` (for a running gang) comes from its status and the snapshot:
        `Placement.of_nodes(status.placement.nodes, running_charge(job, held).gpus_per_replica, snapshot)`. Its
        levels are read in TOPOLOGY (the snapshot's); one it does not have is no constraint here: a waiting job
        that names one is refused before it gets here (`aisched.policy.levels.level_refusal`). A `gpuShare`
        worker is charged what it holds (`aisched.policy.sharing.charge`), a memory share by GPUs of
        GPU_MEMORY_MIB (0: unknown, whole). A running gang is charged what it was admitted with and what
        its pods HELD hold (`running_charge`), whatever its spec says now; a waiting job, its spec."""
        spec, meta = job.spec, job.metadata
        template_spec = spec.template.get("spec") or {}
        created = meta.get("creationTimestamp")
        if placement is not None:
            charge = running_charge(job, held, gpu_memory_mib)
        else:
            milli = replica_milli(spec.gpu_share, spec.gpus_per_replica, gpu_memory_mib) if spec.gpu_share else None
            charge = WorkerCharge(spec.gpus_per_replica, spec.gpu_share, milli)
        return cls(
            key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            queue=spec.queue,
            priority=spec.priority,
            created=datetime.fromisoformat(created) if isinstance(created, str) else created or _LONG_AGO,
            gpus_per_replica=charge.gpus_per_replica,
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
            milli_per_replica=charge.milli_per_replica,
            gpu_memory_mib=gpu_memory_mib,
            share=ShareShape.of(charge.share),
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
            spread=self.spread,
        )


def _level(topology: Topology, name: str | None) -> Level | None:
    return topology.find(name) if name else None
