"""A gang whose workers the API server refuses: a condition first, its GPUs given back after a bound.

Pure, like `job_status`: each takes the job (or its status) and `now`, and returns a new status.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from aisched.api import ConditionStatus
from aisched.api.common import set_condition
from aisched.api.training_job import TrainingJob, TrainingJobStatus
from aisched.api.training_job import TrainingJobPhase as Phase
from aisched.policy.job_status import waiting_status

# A worker the API server refuses (admission, Pod Security, an invalid name) is a condition on
# the job, retried with the reconcile's backoff; a gang refused this long gives its GPUs back and waits.
WORKERS_CREATED = "WorkersCreated"
FAILED_CREATE = "FailedCreate"
FAILED_CREATE_RELEASE = timedelta(minutes=5)


def failed_create(job: TrainingJob, status: TrainingJobStatus, message: str, now: datetime) -> TrainingJobStatus:
    """The API server refused a worker of the placed gang, saying MESSAGE.

    The job carries it in its WorkersCreated condition while the reconcile retries; once the
    refusals have lasted FAILED_CREATE_RELEASE the gang gives its GPUs back and waits, Queued
    for FailedCreate, and its next placement gets a bound of its own.
    """
    generation = job.metadata.get("generation")
    current = next((c for c in status.conditions if c.type == WORKERS_CREATED), None)
    failing_since = current.last_transition_time if current and current.status == ConditionStatus.FALSE else None
    if failing_since is not None and now - failing_since >= FAILED_CREATE_RELEASE:
        released = waiting_status(status, FAILED_CREATE, message, now, generation)
        released.gpus, released.gpu_equivalents = 0, None
        released.conditions = [c for c in released.conditions if c.type != WORKERS_CREATED]
        return released
    updated = status.model_copy(deep=True)
    updated.conditions = set_condition(
        updated.conditions,
        WORKERS_CREATED,
        ConditionStatus.FALSE,
        FAILED_CREATE,
        message,
        now=now,
        generation=generation,
    )
    return updated


def refusal_retry_at(job: TrainingJob, now: datetime) -> datetime | None:
    """When a gang that gave its GPUs back for FailedCreate is placed again (it sits out the
    scheduler until then, else it would take them straight back); None when it may be now.
    A new spec (generation) is tried at once: its user may have fixed what was refused."""
    status = job.status
    if status.phase != Phase.QUEUED or status.reason != FAILED_CREATE:
        return None
    if status.observed_generation != job.metadata.get("generation"):
        return None
    admitted = next((c for c in status.conditions if c.type == "Admitted"), None)
    if admitted is None or admitted.last_transition_time is None:
        return None
    retry_at = admitted.last_transition_time + FAILED_CREATE_RELEASE
    return retry_at if now < retry_at else None


def workers_created(job: TrainingJob, status: TrainingJobStatus, now: datetime) -> TrainingJobStatus:
    """Every worker of the gang exists: a FailedCreate the job carried is over (no condition is added otherwise)."""
    current = next((c for c in status.conditions if c.type == WORKERS_CREATED), None)
    if current is None or current.status == ConditionStatus.TRUE:
        return status
    updated = status.model_copy(deep=True)
    updated.conditions = set_condition(
        updated.conditions,
        WORKERS_CREATED,
        ConditionStatus.TRUE,
        "Created",
        "every worker of the gang was created",
        now=now,
        generation=job.metadata.get("generation"),
    )
    return updated
