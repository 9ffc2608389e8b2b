"""The scheduler: one cycle decides which pending jobs start where, which wait and why, who is
preempted or resized. Its stages, and their order, are in :mod:`aisched.policy.scheduler.cycle`."""

from aisched.policy.scheduler.apply import Applied, apply_result
from aisched.policy.scheduler.cycle import PENDING_JOB_STAGES, STAGES, schedule
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.results import (
    GROWN,
    PREEMPTED,
    RESERVED_FOR_HIGHER_PRIORITY,
    SHRUNK,
    Admission,
    Preemption,
    QueueUsage,
    ReclaimedReplica,
    Resize,
    ScheduleResult,
    Waiting,
)
from aisched.policy.scheduler.state import ADMISSIONS_PER_CYCLE, HeldGpus, HeldReplica

__all__ = [
    "ADMISSIONS_PER_CYCLE",
    "GROWN",
    "PENDING_JOB_STAGES",
    "PREEMPTED",
    "RESERVED_FOR_HIGHER_PRIORITY",
    "SHRUNK",
    "STAGES",
    "Admission",
    "Applied",
    "HeldGpus",
    "HeldReplica",
    "JobRequest",
    "Preemption",
    "QueueUsage",
    "ReclaimedReplica",
    "Resize",
    "ScheduleResult",
    "Waiting",
    "apply_result",
    "schedule",
]
