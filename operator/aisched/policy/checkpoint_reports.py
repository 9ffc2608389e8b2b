"""Reading what workers report: the checkpoint in each termination message, or why it is refused.

A termination message is written by the worker, so by the tenant: the report parser
(`aisched.workload.contract.parse_checkpoint_report`) bounds every value it takes and
rejects the rest. A rejected report counts as no report: the gang resumes from the
last checkpoint its status holds, and the job carries a Warning that says why. Nothing
in a message may fail the reconcile that reads it, which would hold the job (its
finalizers, its quota) where it stands for good.

Pure: the controller passes the messages and `now`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from aisched.api.training_job import CheckpointRecord
from aisched.workload.contract import CheckpointReport, RejectedReportError, parse_checkpoint_report

# The reason of the Warning event a rejected report raises on its job.
REPORT_REJECTED = "CheckpointReportRejected"


@dataclass(frozen=True)
class ReportReading:
    """One worker's termination message as read: its report, or the reason it was rejected, or neither."""

    report: CheckpointReport | None = None
    rejection: str | None = None


def read_report(message: str | None, now: datetime) -> ReportReading:
    """The report in MESSAGE, or why it is rejected; never raises, whatever the message holds."""
    try:
        return ReportReading(report=parse_checkpoint_report(message, now=now))
    except RejectedReportError as rejected:
        return ReportReading(rejection=str(rejected))
    except Exception as error:  # a fault of the parser must cost this report, not the job's reconcile
        return ReportReading(rejection=f"the report could not be read ({type(error).__name__})")


def rejection_message(worker: str, rank: str | None, rejection: str, last: CheckpointRecord | None) -> str:
    """What the Warning on the job says of WORKER's rejected report, and what the job resumes from."""
    kept = f"the job keeps its checkpoint of step {last.step}" if last is not None else "the job has no checkpoint"
    return f"worker {worker} (rank {rank or '?'}) reported a checkpoint that is refused: {rejection}; {kept}"
