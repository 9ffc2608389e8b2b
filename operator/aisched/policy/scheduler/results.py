"""What a cycle decides: admissions, waits with their reasons, preemptions, resizes, and queue usage."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime

from aisched.policy.placement import Placement
from aisched.policy.queueing import QueueQuota

RESERVED_FOR_HIGHER_PRIORITY = "ReservedForHigherPriority"
PREEMPTED = "Preempted"
SHRUNK = "Shrunk"
GROWN = "Grown"


@dataclass(frozen=True, slots=True)
class Admission:
    key: str
    placement: Placement
    preempting: tuple[str, ...] = ()
    """Jobs preempted (or shrunk) to make room: their pods must go before this gang's can bind."""

    @property
    def replicas(self) -> int:
        return self.placement.replicas


@dataclass(frozen=True, slots=True)
class Waiting:
    key: str
    reason: str
    message: str
    expected_start: datetime | None = None
    """Set for the job GPUs are reserved for, when running jobs' end times are known."""


@dataclass(frozen=True, slots=True)
class Preemption:
    key: str
    by: str
    message: str
    reason: str = PREEMPTED


@dataclass(frozen=True, slots=True)
class ReclaimedReplica:
    """An InferenceService replica a lending queue takes back: its service's queue borrowed the GPUs."""

    service: str
    """namespace/name of the InferenceService."""
    pod: str
    lender: str
    """The queue that reclaims: its job, within its nominal quota, takes the GPUs."""
    by: str
    """The job that takes them."""


@dataclass(frozen=True, slots=True)
class Resize:
    """An elastic job's new gang: ranks that stay keep their nodes."""

    key: str
    placement: Placement
    reason: str
    message: str

    @property
    def replicas(self) -> int:
        return self.placement.replicas


@dataclass(frozen=True, slots=True)
class QueueUsage:
    used_gpus: int
    """GPU-equivalents in use, rounded up to whole GPUs (status.usedGPUs): never less than is held."""
    borrowed_gpus: int
    admitted_jobs: int
    pending_jobs: int
    room_gpus: int | None = None
    """Whole GPUs the queue may still take after this cycle, borrowing included; None: no quota."""
    used_milli: int = 0
    """GPU-equivalents in use, in thousandths (a 30% share is 300)."""
    room_milli: int | None = None
    """`room_gpus` in thousandths: what replicas holding parts of GPUs may still take."""
    quota: QueueQuota | None = None
    """The queue's quota the cycle charged against: with its cohort's, what more the queues may admit together
    (`policy.provisioning`); each queue's `room_gpus` alone counts its cohort's idle GPUs for every member."""


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    admitted: tuple[Admission, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    preempted: tuple[Preemption, ...] = ()
    resized: tuple[Resize, ...] = ()
    queues: Mapping[str, QueueUsage] = field(default_factory=dict)
    deferred: tuple[str, ...] = ()
    """Pending jobs not considered: the cycle admitted its most. The caller runs another at once."""
    reserved_nodes: frozenset[str] = frozenset()
    """Where the first job that could not start holds GPUs (`backfill`): later jobs keep off them."""
    reserved_priority: int | None = None
    """That job's priority (None: no reservation)."""
    reclaimed: tuple[ReclaimedReplica, ...] = ()
    """Services' replicas that go to give a lending queue back its quota (`preemption`)."""

    def split(self, keys: AbstractSet[str]) -> tuple[ScheduleResult, ScheduleResult]:
        """This result for the jobs whose keys are not in KEYS, and for those that are: each kind's
        controller carries out its own part. The queues' usage and the reservation are the cycle's, in both."""

        def part(mine: bool) -> ScheduleResult:
            return replace(
                self,
                admitted=tuple(a for a in self.admitted if (a.key in keys) == mine),
                waiting=tuple(w for w in self.waiting if (w.key in keys) == mine),
                preempted=tuple(p for p in self.preempted if (p.key in keys) == mine),
                resized=tuple(r for r in self.resized if (r.key in keys) == mine),
                deferred=tuple(k for k in self.deferred if (k in keys) == mine),
            )

        return part(False), part(True)
