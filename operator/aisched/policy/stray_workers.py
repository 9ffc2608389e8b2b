"""Which pods the operator made, or that pass for ones it made, it takes back: pure decisions.

The operator knows its workers by their labels (`aisched.io/kind`, `aisched.io/job-name`, the
generation and the rank): the inventory counts their GPUs, the lifecycle reads them, the queue is
charged for them. A tenant who may edit pods can take the labels off a running worker (the chart's
admission policy refuses it; the policy can be off): the job then no longer sees its worker, starts
another in its place, and the first runs on, uncharged. Or strip a worker's job label, owner
references and finalizer and delete the job: nothing deletes the worker, and, pinned and Pending,
it keeps its node full in the operator's view, charged to no one.

Two marks a tenant cannot take off without the operator noticing:

- the name. A worker is named `<job>-g<generation>-w<rank>` (`kube/builders.worker_pod_name`), and
  a name never changes. A pod in a TrainingJob's namespace named as one of its workers whose labels
  do not say exactly that is a stray: a worker stripped of its labels, or a tenant's pod squatting
  a worker's name. Either way it is deleted, and its report (if any) never read.
- the job. A pod carrying the operator's kind label whose TrainingJob is gone (deleted, or missing
  from a relist) is deleted once the garbage collector has had its turn (`ORPHAN_GRACE`): its owner
  references may have been stripped, and then nobody else will.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

TRAINING_JOB: Final = "TrainingJob"
ORPHAN_GRACE: Final = timedelta(seconds=30)
"""How long a pod of a deleted job is left to the garbage collector (it deletes dependents at once)
before the operator deletes it itself."""
_WORKER_NAME: Final = re.compile(r"^(?P<job>.+)-g(?P<generation>[0-9]{1,9})-w(?P<rank>[0-9]{1,5})$")


@dataclass(frozen=True, slots=True)
class WorkerName:
    """What a worker's name says: whose, which generation of the gang, which rank."""

    job: str
    generation: int
    rank: int


def worker_name(name: str) -> WorkerName | None:
    """What NAME says of the worker it names; None when it names none.

    The suffix is anchored at the end, so a job whose own name looks like a worker's is read right.
    """
    match = _WORKER_NAME.match(name)
    if match is None:
        return None
    return WorkerName(match["job"], int(match["generation"]), int(match["rank"]))


@dataclass(frozen=True, slots=True)
class PodMarks:
    """What a pod says of itself, as the operator reads it: its name, and the operator's labels on it."""

    namespace: str
    name: str
    kind: str | None
    """`aisched.io/kind`."""
    job: str | None
    """`aisched.io/job-name`."""
    generation: str | None
    rank: str | None
    terminating: bool
    tracked: bool
    """It carries the report finalizer, which holds it after its deletion until the operator lets go."""


def stray_of(pod: PodMarks) -> tuple[str, str] | None:
    """The TrainingJob (namespace, name) POD is named as a worker of while its labels disagree; None otherwise.

    Whether that job exists is the caller's to know: a stray of no job is a tenant's pod like any other.
    """
    named = worker_name(pod.name)
    if named is None:
        return None
    labelled = (pod.kind, pod.job, pod.generation, pod.rank)
    if labelled == (TRAINING_JOB, named.job, str(named.generation), str(named.rank)):
        return None
    return (pod.namespace, named.job)


def is_training_worker(pod: PodMarks) -> bool:
    """POD carries the operator's mark of a TrainingJob's worker (whose job it says or not)."""
    return pod.kind == TRAINING_JOB


@dataclass(frozen=True, slots=True)
class Removal:
    """What taking POD back still needs: its deletion, the report finalizer let go, or both."""

    namespace: str
    name: str
    delete: bool
    release: bool


def removal(pod: PodMarks, *, release: bool = True) -> Removal | None:
    """What is left to do to take POD back; None when nothing is (it is going, and nothing holds it).

    RELEASE False: its finalizer is let go elsewhere (`WorkerReleases`, for workers of a known job).
    """
    delete = not pod.terminating
    let_go = release and pod.tracked
    if not (delete or let_go):
        return None
    return Removal(pod.namespace, pod.name, delete=delete, release=let_go)


def orphan_due(first_seen: datetime, now: datetime, grace: timedelta = ORPHAN_GRACE) -> bool:
    """A pod of a job gone since FIRST_SEEN is the operator's to delete at NOW: the collector had its turn."""
    return now - first_seen >= grace
