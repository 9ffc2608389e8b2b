"""When a worker pod may go: the rules of the report finalizer every worker carries.

A worker reports the step it saved in its termination message, which lives only as
long as its pod. Every worker is created with the finalizer `aisched.io/checkpoint-report`,
so the API server keeps a deleted or finished worker until the operator takes the
finalizer off; the controller does that only after the job's status, as written, holds
what the worker reported (or the report can no longer matter). An operator restarted at
any moment, or down while the workers exit, so finds every report still on its pod,
as the Job controller's tracking finalizer keeps pods it has not counted yet.

Pure: the controller passes what it sees of the pods and `now`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

# A deleted worker whose kubelet has not said how it ended this long after its grace ran
# out is on a node that is not coming back in time: its report is lost, waiting longer
# only holds the gang's restart (the node lifecycle controller's own grace is 40 s).
STUCK_TERMINATING = timedelta(minutes=1)


@dataclass(frozen=True)
class TrackedWorker:
    """One worker pod carrying the report finalizer, as the rules need it."""

    name: str
    generation: str | None
    ended: bool
    """Its containers stopped: phase Succeeded or Failed, the report (if any) is in."""
    started: bool
    """It ran, or may run: phase Running or ended. A pod that never started has no report."""
    report_step: int | None
    gone_by: datetime | None
    """The deletionTimestamp, when it was deleted: its grace runs out then."""
    node_reachable: bool


@dataclass(frozen=True)
class Release:
    """Finalizers to take off, and, of those, pods to delete at once (their kubelet is gone)."""

    finalizers: tuple[str, ...] = ()
    force_delete: tuple[str, ...] = ()


def releasable(
    workers: Sequence[TrackedWorker], *, generation: int | None, recorded_step: int | None, now: datetime
) -> Release:
    """Which of a job's WORKERS may go, now that its status (as written) records RECORDED_STEP.

    A worker may go once what it reported is recorded or cannot matter: it belongs to an
    earlier gang, it never started, it ended without a report or with one no newer than
    the recorded step, or every worker of its gang has ended (the gang's checkpoint, the
    oldest step all ranks saved, was taken from all of them). One stuck terminating past
    STUCK_TERMINATING goes too; if its node is unreachable it is also deleted at once,
    since no kubelet will ever confirm it.
    """
    gang_ended = all(w.ended for w in workers if w.generation == str(generation))
    finalizers: list[str] = []
    force: list[str] = []
    for worker in workers:
        stuck = worker.gone_by is not None and not worker.ended and now >= worker.gone_by + STUCK_TERMINATING
        if stuck and not worker.node_reachable:
            force.append(worker.name)
        if worker.generation != str(generation) or stuck or (worker.gone_by is not None and not worker.started):
            finalizers.append(worker.name)
        elif worker.ended:
            recorded = worker.report_step is None or (recorded_step is not None and worker.report_step <= recorded_step)
            if recorded or gang_ended:
                finalizers.append(worker.name)
    return Release(tuple(finalizers), tuple(force))
