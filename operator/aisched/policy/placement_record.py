"""Whose placement is it: the status is the operator's record of what the cycle decided, never a grant.

A user who may write a TrainingJob's status (an administrator granted `trainingjobs/status`, or
a controller of theirs) could otherwise write `phase: Placing` and nodes of their choosing onto a
job the queue refuses, and the reconcile would start its workers there, charged to no queue. A
placement is vouched for by the scheduling cycle of this operator process, which remembers what
it wrote, or, after a restart, by the gang's own workers: only the operator creates them, so a
placement on which the current gang's workers sit where their ranks say is the one it made. Any
other placement is ignored: the job waits again, and the cycle decides for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from aisched.api import TrainingJob
from aisched.api.training_job import TrainingJobStatus
from aisched.policy.job_status import waiting_status

PLACEMENT_NOT_VERIFIED = "PlacementNotVerified"


@dataclass(frozen=True, slots=True)
class PlacementMade:
    """What the operator wrote of a gang's placement: its generation and each rank's node."""

    gang_generation: int
    nodes: tuple[str, ...]

    @classmethod
    def of(cls, status: TrainingJobStatus) -> PlacementMade | None:
        if status.placement is None:
            return None
        return cls(status.gang_generation or 0, tuple(status.placement.nodes))


@dataclass(frozen=True, slots=True)
class WorkerSeat:
    """A worker pod as its labels and the scheduler place it: gang generation, rank and node."""

    gang_generation: str | None
    rank: str | None
    node: str | None


def placement_vouched_for(status: TrainingJobStatus, made: PlacementMade | None, workers: Iterable[WorkerSeat]) -> bool:
    """Whether STATUS's placement is one the operator made (MADE, what this process wrote) or, with
    no memory of it, one the current gang's WORKERS sit on; a status without a placement is."""
    stated = PlacementMade.of(status)
    if stated is None or stated == made:
        return True
    generation = str(stated.gang_generation)
    current = [w for w in workers if w.gang_generation == generation]
    return bool(current) and all(_sits_on(w, stated.nodes) for w in current)


def _sits_on(worker: WorkerSeat, nodes: Sequence[str]) -> bool:
    rank = worker.rank
    if rank is None or not rank.isdigit() or int(rank) >= len(nodes):
        return False
    return worker.node == nodes[int(rank)]


def placement_ignored(job: TrainingJob, now: datetime) -> TrainingJobStatus:
    """JOB's status with a placement the operator did not make taken away: the job waits again."""
    message = (
        "status.placement was not written by the aisched scheduler (it matches no decision of its own "
        "and no worker of the gang): it is ignored and the job waits for the scheduler"
    )
    status = waiting_status(job.status, PLACEMENT_NOT_VERIFIED, message, now, job.metadata.get("generation"))
    status.placement, status.gpus, status.gpu_equivalents = None, 0, None
    return status
