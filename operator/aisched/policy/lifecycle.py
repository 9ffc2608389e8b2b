"""What a TrainingJob should do next, given what its worker pods are doing.

Pure: the controller observes the gang (pods of the current generation, the
nodes they are on, signals from the inventory), calls `next_step`, and carries
out the returned `Step`. Placement and admission are decided elsewhere (the
scheduler); this module owns everything from "placed" to "finished".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from aisched.api.training_job import TrainingJobPhase as Phase
from aisched.api.training_job import TrainingJobSpec, TrainingJobStatus
from aisched.policy.carbon import CHUNK_ENDED, PAUSED_BETWEEN_CHUNKS
from aisched.policy.saturating_time import time_after
from aisched.workload.contract import CHECKPOINTED_EXIT_CODE


class WorkerPhase(StrEnum):
    GATED = "Gated"  # created, still behind the gang's scheduling gate
    PENDING = "Pending"  # released to kube-scheduler, not running yet
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class Worker:
    """One observed pod of the current gang generation."""

    name: str
    rank: int
    phase: WorkerPhase
    node: str | None = None
    terminating: bool = False
    exit_code: int | None = None
    termination_message: str | None = None
    unschedulable_since: datetime | None = None
    unschedulable_message: str | None = None


@dataclass(frozen=True)
class Observation:
    """What the controller saw of one job at `now`."""

    now: datetime
    workers: tuple[Worker, ...]
    stale_pods: tuple[str, ...] = ()  # pods of earlier generations still around
    doomed_nodes: frozenset[str] = frozenset()  # nodes with an interruption signal or gone
    bind_timeout: timedelta = timedelta(seconds=60)
    """How long a released worker may stay unschedulable before the gang is placed again; the
    controller adds the victims' checkpoint grace while pods it displaced are still leaving."""


class Verb(StrEnum):
    NOTHING = "Nothing"
    CREATE_WORKERS = "CreateWorkers"  # create the missing pods of the placed gang
    RELEASE_GATES = "ReleaseGates"  # every pod exists: let kube-scheduler bind them
    DELETE_WORKERS = "DeleteWorkers"  # take the gang down (then requeue or finish)
    DELETE_JOB = "DeleteJob"  # TTL after finish ran out


@dataclass(frozen=True)
class Step:
    verb: Verb
    phase: Phase | None = None
    reason: str | None = None
    message: str | None = None
    # Set when the gang goes back to the scheduler (phase Queued after a restart).
    count_restart: bool = False
    count_interruption: bool = False
    started: bool = False  # first time the gang is Running
    finished: bool = False
    requeue_after: timedelta | None = None
    events: tuple[tuple[str, str, str], ...] = field(default_factory=tuple)  # (type, reason, message)


FINISHED = (Phase.SUCCEEDED, Phase.FAILED)
# The reason of a job queued again after its gang was stopped for an interruption (not a preemption).
INTERRUPTED = "Interrupted"
HOLDS_GPUS = (Phase.PLACING, Phase.RUNNING, Phase.CHECKPOINTING, Phase.RESTARTING)
# A waiting job has no live gang: its workers are deleted (checkpointing) before or after its status says so.
WAITING = (Phase.QUEUED, Phase.DEFERRED)


def next_step(spec: TrainingJobSpec, status: TrainingJobStatus, seen: Observation) -> Step:
    """What to do about a job next; the cases in precedence order, the first that applies wins."""
    phase = Phase(status.phase) if status.phase else None
    if phase in FINISHED:
        return _after_finish(spec, status, seen)
    if seen.stale_pods:
        return Step(Verb.DELETE_WORKERS, reason="OldGangCleanup", message="removing pods of an earlier gang")
    if spec.suspend:
        return _suspend(phase, seen)
    if phase == Phase.SUSPENDED:
        return Step(Verb.NOTHING, Phase.QUEUED, "Resumed", "suspend set to false; waiting for placement")
    return _in_flight(spec, status, phase, seen)


def _in_flight(spec: TrainingJobSpec, status: TrainingJobStatus, phase: Phase | None, seen: Observation) -> Step:
    """A job neither finished nor suspended: its active deadline first, then where its gang is."""
    if deadline_step := _active_deadline(spec, status, seen):
        return deadline_step
    if phase in (Phase.CHECKPOINTING, Phase.RESTARTING):
        return _wind_down(phase, status, seen)
    if phase in (Phase.PLACING, Phase.RUNNING):
        return _placed(spec, status, phase, seen)
    if phase in WAITING and any(not w.terminating for w in seen.workers):
        # The gang's stop was written before its pods were deleted, and the operator that wrote
        # it ended in between (a preemption, a chunk end): they go now, saving as they would have.
        return Step(Verb.DELETE_WORKERS, reason="StopResumed", message="stopping the workers of a waiting job")
    return Step(Verb.NOTHING)


def _after_finish(spec: TrainingJobSpec, status: TrainingJobStatus, seen: Observation) -> Step:
    if seen.workers or seen.stale_pods:
        # Finished workers keep nothing running, but their pods would still pin the gang's names.
        live = [w for w in seen.workers if w.phase not in (WorkerPhase.SUCCEEDED, WorkerPhase.FAILED)]
        if live or seen.stale_pods:
            return Step(Verb.DELETE_WORKERS, reason="JobFinished", message="stopping workers of a finished job")
    ttl = spec.run_policy.ttl_seconds_after_finished
    if ttl is None or status.completion_time is None:
        return Step(Verb.NOTHING)
    expires = time_after(status.completion_time, timedelta(seconds=ttl))
    if seen.now >= expires:
        return Step(Verb.DELETE_JOB, reason="TTLExpired", message=f"deleted {ttl}s after it finished")
    return Step(Verb.NOTHING, requeue_after=expires - seen.now)


def _suspend(phase: Phase | None, seen: Observation) -> Step:
    if seen.workers:
        return Step(Verb.DELETE_WORKERS, Phase.SUSPENDED, "Suspended", "spec.suspend is true; gang stopped")
    if phase != Phase.SUSPENDED:
        return Step(Verb.NOTHING, Phase.SUSPENDED, "Suspended", "spec.suspend is true")
    return Step(Verb.NOTHING)


def _active_deadline(spec: TrainingJobSpec, status: TrainingJobStatus, seen: Observation) -> Step | None:
    limit = spec.run_policy.active_deadline_seconds
    if limit is None or status.start_time is None:
        return None
    if seen.now - status.start_time < timedelta(seconds=limit):
        return None
    return Step(
        Verb.DELETE_WORKERS,
        Phase.FAILED,
        "DeadlineExceeded",
        f"ran longer than activeDeadlineSeconds ({limit}s)",
        finished=True,
        events=(("Warning", "DeadlineExceeded", f"ran longer than {limit}s; stopped"),),
    )


def _wind_down(phase: Phase, status: TrainingJobStatus, seen: Observation) -> Step:
    """The gang is being taken down for a restart; requeue once every pod is gone.

    A gang stopped at the end of a carbon chunk waits for its next chunk instead.
    """
    if seen.workers:
        if all(w.terminating for w in seen.workers):
            return Step(Verb.NOTHING)
        return Step(Verb.DELETE_WORKERS)
    if phase == Phase.CHECKPOINTING and status.reason == CHUNK_ENDED:
        return Step(
            Verb.NOTHING,
            Phase.DEFERRED,
            PAUSED_BETWEEN_CHUNKS,
            status.deferral.reason if status.deferral else "paused between chunks",
        )
    interrupted = phase == Phase.CHECKPOINTING
    return Step(
        Verb.NOTHING,
        Phase.QUEUED,
        INTERRUPTED if interrupted else "Restarting",
        "gang stopped after checkpointing; waiting to be placed again"
        if interrupted
        else "gang stopped after a worker failure; waiting to be placed again",
    )


def _placed(spec: TrainingJobSpec, status: TrainingJobStatus, phase: Phase, seen: Observation) -> Step:
    expected = status.replicas or spec.replicas
    return _gang_ended(spec, status, phase, seen, expected) or _gang_coming_up(status, phase, seen, expected)


def _gang_ended(
    spec: TrainingJobSpec, status: TrainingJobStatus, phase: Phase, seen: Observation, expected: int
) -> Step | None:
    """The placed gang is over, for now or for good: a node reclaimed, a worker failed or lost,
    or every worker done. None while it goes on."""
    placement_nodes = status.placement.nodes if status.placement else []
    # Capacity going away: checkpoint and move before the node disappears.
    doomed = sorted(
        {w.node for w in seen.workers if w.node in seen.doomed_nodes}
        | {n for n in placement_nodes if n in seen.doomed_nodes}
    )
    if doomed:
        return Step(
            Verb.DELETE_WORKERS,
            Phase.CHECKPOINTING,
            "CapacityInterrupted",
            f"node {', '.join(doomed)} is being reclaimed; checkpointing and moving the gang",
            count_interruption=True,
            events=(("Warning", "CapacityInterrupted", f"interruption notice on {', '.join(doomed)}"),),
        )
    failed = [w for w in seen.workers if w.phase == WorkerPhase.FAILED and w.exit_code != CHECKPOINTED_EXIT_CODE]
    if failed:
        return _worker_failed(spec, status, failed[0])
    # Deleted by someone else (evicted, drained, its node gone), a worker is lost as soon as its
    # pod is going: the pod may stay a while (the report finalizer), the worker will not come back.
    staying = [w for w in seen.workers if not w.terminating]
    if phase == Phase.RUNNING and len(staying) < expected:
        return Step(
            Verb.DELETE_WORKERS,
            Phase.CHECKPOINTING,
            "WorkerLost",
            f"{expected - len(staying)} of {expected} workers disappeared; restarting the gang",
            count_interruption=True,
            events=(("Warning", "WorkerLost", "a worker pod disappeared; restarting the gang"),),
        )
    if seen.workers and all(w.phase == WorkerPhase.SUCCEEDED for w in seen.workers) and (len(seen.workers) == expected):
        return Step(
            Verb.NOTHING,
            Phase.SUCCEEDED,
            "Completed",
            f"all {expected} workers succeeded",
            finished=True,
            events=(("Normal", "Completed", f"all {expected} workers succeeded"),),
        )
    return None


def _gang_coming_up(status: TrainingJobStatus, phase: Phase, seen: Observation, expected: int) -> Step:
    """Bring the placed gang up: create and ungate its workers, place it again when they cannot
    be bound, and say when all of them run."""
    # Creating or ungating workers leaves the job Placing, as the scheduler wrote it: no status write.
    if len(seen.workers) < expected:
        return Step(Verb.CREATE_WORKERS)
    gated = [w for w in seen.workers if w.phase == WorkerPhase.GATED]
    if gated:
        return Step(Verb.RELEASE_GATES)
    stuck = [w for w in seen.workers if w.unschedulable_since is not None]
    if stuck and seen.now - min(w.unschedulable_since for w in stuck if w.unschedulable_since) >= seen.bind_timeout:
        worst = stuck[0]
        return Step(
            Verb.DELETE_WORKERS,
            Phase.RESTARTING,
            "BindFailed",
            f"worker {worst.rank} could not be bound to {worst.node or 'its node'}: "
            f"{worst.unschedulable_message or 'unschedulable'}; placing the gang again",
            events=(("Warning", "BindFailed", "the cluster changed under the placement; re-placing"),),
        )
    if all(w.phase in (WorkerPhase.RUNNING, WorkerPhase.SUCCEEDED) for w in seen.workers):
        if phase == Phase.RUNNING:
            return Step(Verb.NOTHING)
        return Step(
            Verb.NOTHING,
            Phase.RUNNING,
            "GangRunning",
            f"all {expected} workers running",
            started=status.start_time is None,
            events=(("Normal", "GangRunning", f"all {expected} workers running"),),
        )
    return Step(Verb.NOTHING, requeue_after=seen.bind_timeout if stuck else None)


def _worker_failed(spec: TrainingJobSpec, status: TrainingJobStatus, worker: Worker) -> Step:
    restarts = status.restarts or 0
    limit = spec.run_policy.backoff_limit
    detail = f"worker {worker.rank} failed (exit code {worker.exit_code})"
    if restarts >= limit:
        return Step(
            Verb.DELETE_WORKERS,
            Phase.FAILED,
            "BackoffLimitExceeded",
            f"{detail}; restarted {restarts} times, backoffLimit is {limit}",
            finished=True,
            events=(("Warning", "BackoffLimitExceeded", detail),),
        )
    return Step(
        Verb.DELETE_WORKERS,
        Phase.RESTARTING,
        "WorkerFailed",
        f"{detail}; restarting the whole gang ({restarts + 1} of {limit})",
        count_restart=True,
        events=(("Warning", "WorkerFailed", f"{detail}; restarting the gang"),),
    )
