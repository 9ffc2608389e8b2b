"""What a kind of work is to the scheduling cycle: what it asks of one cycle, and its part of the answer.

Each kind (TrainingJobs, the InferenceServices' new replicas, other kinds' workloads) reads its own
objects into requests to the one scheduler and carries out its own part of the decision. The cycle
(`scheduling.py`) knows no kind: it asks each, decides once for all, and hands each its part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.decision import Decision, ReplicaAsk
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import HeldGpus, JobRequest, ScheduleResult

Carried = TypeVar("Carried")


@dataclass(frozen=True, slots=True)
class CycleView:
    """What every kind's part of one cycle reads: the cluster as it decides from it, the time, the quotas."""

    snapshot: ClusterSnapshot
    now: datetime
    quotas: Sequence[QueueQuota]
    doomed: frozenset[str] = frozenset()
    """Nodes whose work must move (an interruption notice, NotReady past its grace): none is placed there,
    and what runs there is stopped to be resumed elsewhere, as each kind allows."""


@dataclass(frozen=True, slots=True)
class Asked(Generic[Carried]):
    """What one kind asks of a cycle."""

    carried: Carried
    """What the kind read on the way, handed back with its part of the decision (its objects by key...)."""
    requests: Sequence[JobRequest] = ()
    """Its gangs, waiting or placed, for the scheduler to decide."""
    held: Sequence[HeldGpus] = ()
    """GPUs its work holds that no request places (a model server's running replicas), charged to their queues."""
    replicas: Sequence[ReplicaAsk] = ()
    """Services' asks for new replicas, decided with the gangs."""


@dataclass(frozen=True, slots=True)
class Decided:
    """A kind's part of the cycle's decision."""

    whole: Decision
    """The decision for every kind (the services' replicas, the queues' usage)."""
    part: ScheduleResult
    """The scheduler's answer for this kind's requests only."""
    deciding_seconds: float
    """How long the decision took: what each admission or wait is recorded as having taken to place."""


class CycleKind(Protocol[Carried]):
    """A kind of work the scheduling cycle decides."""

    name: str

    async def asked(self, view: CycleView) -> Asked[Carried]:
        """What this kind asks of the cycle VIEW is the start of; writes it needs first are made here."""
        ...

    async def decided(self, asked: Asked[Carried], decided: Decided, view: CycleView) -> None:
        """Carry out this kind's part of the decision. A failure of one object's part is this kind's to contain."""
        ...

    async def blamed(self, asked: Asked[Carried], request: JobRequest, error: Exception, view: CycleView) -> None:
        """The scheduler raised on REQUEST: it sits this cycle out, with what this kind does about it."""
        ...


AnyKind = CycleKind[Any]
