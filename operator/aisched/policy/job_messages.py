"""What a TrainingJob's status and Events tell its user about where it runs and when it starts.

Pure text from plain data, so the simulator and tests read the same words the
operator writes, and a change of wording is a change in one place.

A status and its Events are read by whoever may read the job: its namespace's tenant. Another
job is named to them only when it is of the same namespace; one of another namespace is told by
what its user may know of it (its priority, and the queue when they share it), never by its
namespace or name (`other_job`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from aisched.policy.carbon import CarbonPlan
from aisched.policy.placement import Placement


def namespace_of(key: str) -> str:
    """The namespace of a `namespace/name` key."""
    return key.partition("/")[0]


class SeenJob(Protocol):
    """What a message may say of a job: its key (namespace/name), its queue and its priority."""

    @property
    def key(self) -> str: ...
    @property
    def queue(self) -> str | None: ...
    @property
    def priority(self) -> int: ...


@dataclass(frozen=True)
class JobRef:
    key: str
    priority: int
    queue: str | None = None


def other_job(job: SeenJob, *, seen_from: SeenJob) -> str:
    """JOB as the tenant of job SEEN_FROM may be told of it: by name in its own namespace; else by its
    priority, and its queue when it is the tenant's own, which the tenant knows already."""
    if namespace_of(job.key) == namespace_of(seen_from.key):
        return f"{job.key} (priority {job.priority})"
    shared = job.queue is not None and job.queue == seen_from.queue
    return f"a job of priority {job.priority}{f' in queue {job.queue}' if shared else ' of another namespace'}"


def admitted_message(placement: Placement, preempting: Sequence[str], admitted: str) -> str:
    """Where the scheduler put the gang ADMITTED, and whom it preempted to make room: those of its own
    namespace by name, the others counted."""
    message = f"placed in {placement.to_status().domain or 'the cluster'}"
    own = [key for key in preempting if namespace_of(key) == namespace_of(admitted)]
    others = len(preempting) - len(own)
    named = [*own, *([f"{others} job{'s' if others > 1 else ''} of other namespaces"] if others else [])]
    if named:
        message += f" after preempting {', '.join(named)}"
    return message


def preempted_message(victim: SeenJob, by: SeenJob, needs: str) -> str:
    """The Preempted condition and Event of VICTIM, preempted for BY; NEEDS (how many GPUs, and where)
    is said of a job of its own namespace only."""
    need = f", which needs {needs}" if namespace_of(by.key) == namespace_of(victim.key) else ""
    return f"preempted by {other_job(by, seen_from=victim)}{need}; it will be queued again"


def shrunk_message(victim: SeenJob, by: SeenJob, *, before: int, after: int) -> str:
    """An elastic job's condition and Event when it gave replicas to job BY."""
    return f"shrunk from {before} to {after} replicas to make room for {other_job(by, seen_from=victim)}"


def gang_nodes_message(replicas: int, gpus_per_replica: int, nodes: Sequence[str]) -> str:
    """The Admitted condition's message: the gang's shape and the nodes it holds, by rank."""
    return f"{replicas} x {gpus_per_replica} GPUs on {', '.join(nodes)}"


def deferred_message(plan: CarbonPlan) -> str:
    """The Event of a job whose start the carbon plan puts off."""
    return f"start deferred to {plan.start:%Y-%m-%d %H:%M} UTC: {plan.message}"


MAX_SOURCE_ERROR_CHARS = 240
"""Of a carbon source's error, as the job's condition quotes it."""


def carbon_forecast_missing_message(region: str, error: str) -> str:
    """Why a deferrable job starts without deferral: its zone's forecast could not be read (ERROR)."""
    why = error if len(error) <= MAX_SOURCE_ERROR_CHARS else error[: MAX_SOURCE_ERROR_CHARS - 1] + "…"
    return f"no carbon forecast for zone {region!r}, so the job is not deferred: {why}"
