"""Whether a job's checkpoint fits the grace its workers get to save when the operator stops them.

Pure: the job, its status, the grace and `now` in, a status with the condition out.
"""

from __future__ import annotations

from datetime import datetime

from aisched.api import ConditionStatus
from aisched.api.common import set_condition
from aisched.api.training_job import TrainingJob, TrainingJobStatus

CHECKPOINT_FITS_GRACE = "CheckpointFitsGrace"


def checkpoint_grace_condition(
    job: TrainingJob, status: TrainingJobStatus, grace_seconds: int, now: datetime
) -> TrainingJobStatus:
    """STATUS with CheckpointFitsGrace: False when spec.checkpoint.costSeconds exceeds GRACE_SECONDS.

    Such a save on a notice is killed half-written and the gang resumes from its last periodic
    checkpoint; the condition says so, and what to change, before it happens. A job that names
    no checkpoint gets no condition.
    """
    checkpoint = job.spec.checkpoint
    if checkpoint is None:
        return status
    cost = checkpoint.cost_seconds
    if cost > grace_seconds:
        verdict, reason = ConditionStatus.FALSE, "CheckpointLongerThanGrace"
        message = (
            f"a checkpoint takes {cost}s (spec.checkpoint.costSeconds) but workers get {grace_seconds}s "
            "to save when stopped: a save on notice is killed and the gang resumes from its last "
            "periodic checkpoint; save faster (sharded or async) or lower the cost"
        )
    else:
        verdict, reason = ConditionStatus.TRUE, "CheckpointFits"
        message = f"a checkpoint takes {cost}s; workers get {grace_seconds}s to save when stopped"
    current = next((c for c in status.conditions if c.type == CHECKPOINT_FITS_GRACE), None)
    if current is not None and current.status == verdict and current.message == message:
        return status
    updated = status.model_copy(deep=True)
    updated.conditions = set_condition(
        updated.conditions,
        CHECKPOINT_FITS_GRACE,
        verdict,
        reason,
        message,
        now=now,
        generation=job.metadata.get("generation"),
    )
    return updated
