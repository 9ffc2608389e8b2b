from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aisched.api import TrainingJob, TrainingJobPhase
from aisched.api.training_job import Placement, TrainingJobStatus
from aisched.policy.lifecycle import (
    Observation,
    Verb,
    Worker,
    WorkerPhase,
    next_step,
)
from aisched.workload.contract import CHECKPOINTED_EXIT_CODE
from tests.builders import a_training_job

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
Phase = TrainingJobPhase


def _spec(**changes: object) -> TrainingJob:
    builder = a_training_job().replicas(2).gpus(4)
    for path, value in changes.items():
        builder.set(path, value)
    return TrainingJob.model_validate(builder.obj())


def _status(phase: Phase, **fields: object) -> TrainingJobStatus:
    return TrainingJobStatus(
        phase=phase, replicas=2, gang_generation=1, placement=Placement(nodes=["n1", "n2"]), **fields
    )


def _workers(*phases: WorkerPhase, **fields: Any) -> tuple[Worker, ...]:
    return tuple(Worker(name=f"w{i}", rank=i, phase=p, node=f"n{i + 1}", **fields) for i, p in enumerate(phases))


def _see(*workers: Worker, **fields: Any) -> Observation:
    return Observation(now=NOW, workers=workers, **fields)


def test_missing_workers_are_created_then_released_together() -> None:
    job = _spec()
    create = next_step(job.spec, _status(Phase.PLACING), _see())
    assert create.verb == Verb.CREATE_WORKERS
    one_gated = _workers(WorkerPhase.GATED)
    assert next_step(job.spec, _status(Phase.PLACING), _see(*one_gated)).verb == Verb.CREATE_WORKERS
    both = _workers(WorkerPhase.GATED, WorkerPhase.GATED)
    release = next_step(job.spec, _status(Phase.PLACING), _see(*both))
    assert release.verb == Verb.RELEASE_GATES
    # Still Placing, as the scheduler wrote it: neither step costs a status write.
    assert create.phase is None and release.phase is None and not create.events and not release.events


def test_gang_running_when_every_worker_runs() -> None:
    step = next_step(_spec().spec, _status(Phase.PLACING), _see(*_workers(WorkerPhase.RUNNING, WorkerPhase.RUNNING)))
    assert (step.phase, step.started) == (Phase.RUNNING, True)


def test_a_failed_worker_restarts_the_whole_gang_until_the_backoff_limit() -> None:
    workers = _workers(WorkerPhase.RUNNING, WorkerPhase.FAILED, exit_code=1)
    job = _spec(**{"runPolicy.backoffLimit": 2})
    step = next_step(job.spec, _status(Phase.RUNNING, restarts=1), _see(*workers))
    assert (step.verb, step.phase, step.count_restart) == (Verb.DELETE_WORKERS, Phase.RESTARTING, True)
    step = next_step(job.spec, _status(Phase.RUNNING, restarts=2), _see(*workers))
    assert (step.phase, step.reason, step.finished) == (Phase.FAILED, "BackoffLimitExceeded", True)


def test_a_worker_that_checkpointed_on_sigterm_is_not_a_failure() -> None:
    workers = _workers(WorkerPhase.RUNNING, WorkerPhase.FAILED, exit_code=CHECKPOINTED_EXIT_CODE)
    step = next_step(_spec().spec, _status(Phase.RUNNING), _see(*workers))
    assert step.phase != Phase.RESTARTING


def test_interruption_notice_checkpoints_and_moves_the_gang() -> None:
    workers = _workers(WorkerPhase.RUNNING, WorkerPhase.RUNNING)
    step = next_step(_spec().spec, _status(Phase.RUNNING), _see(*workers, doomed_nodes=frozenset({"n2"})))
    assert (step.verb, step.phase, step.count_interruption) == (Verb.DELETE_WORKERS, Phase.CHECKPOINTING, True)
    assert "n2" in (step.message or "")
    # Once every worker is gone, the gang goes back to the scheduler.
    step = next_step(_spec().spec, _status(Phase.CHECKPOINTING), _see())
    assert step.phase == Phase.QUEUED


def test_succeeded_when_every_worker_succeeds_and_deleted_after_ttl() -> None:
    job = _spec(**{"runPolicy.ttlSecondsAfterFinished": 60})
    done = _workers(WorkerPhase.SUCCEEDED, WorkerPhase.SUCCEEDED)
    step = next_step(job.spec, _status(Phase.RUNNING), _see(*done))
    assert (step.phase, step.finished) == (Phase.SUCCEEDED, True)
    finished = _status(Phase.SUCCEEDED, completion_time=NOW - timedelta(seconds=30))
    step = next_step(job.spec, finished, _see(*done))
    assert step.verb == Verb.NOTHING
    assert step.requeue_after == timedelta(seconds=30)
    expired = _status(Phase.SUCCEEDED, completion_time=NOW - timedelta(seconds=61))
    assert next_step(job.spec, expired, _see(*done)).verb == Verb.DELETE_JOB


def test_suspend_stops_the_gang_and_resume_requeues() -> None:
    running = _workers(WorkerPhase.RUNNING, WorkerPhase.RUNNING)
    suspended = _spec(suspend=True)
    step = next_step(suspended.spec, _status(Phase.RUNNING), _see(*running))
    assert (step.verb, step.phase) == (Verb.DELETE_WORKERS, Phase.SUSPENDED)
    step = next_step(_spec().spec, _status(Phase.SUSPENDED), _see())
    assert step.phase == Phase.QUEUED


def test_active_deadline_fails_the_job() -> None:
    job = _spec(**{"runPolicy.activeDeadlineSeconds": 600})
    status = _status(Phase.RUNNING, start_time=NOW - timedelta(seconds=601))
    step = next_step(job.spec, status, _see(*_workers(WorkerPhase.RUNNING, WorkerPhase.RUNNING)))
    assert (step.phase, step.reason) == (Phase.FAILED, "DeadlineExceeded")


def test_unbindable_gang_is_placed_again_after_the_bind_timeout() -> None:
    stuck = _workers(WorkerPhase.PENDING, WorkerPhase.PENDING, unschedulable_since=NOW - timedelta(seconds=61))
    step = next_step(_spec().spec, _status(Phase.PLACING), _see(*stuck))
    assert (step.verb, step.reason) == (Verb.DELETE_WORKERS, "BindFailed")


def test_a_vanished_worker_of_a_running_gang_restarts_it() -> None:
    step = next_step(_spec().spec, _status(Phase.RUNNING), _see(*_workers(WorkerPhase.RUNNING)))
    assert (step.phase, step.reason) == (Phase.CHECKPOINTING, "WorkerLost")


def test_a_waiting_job_whose_stop_was_cut_short_stops_its_live_workers_and_stays_waiting() -> None:
    """The stop's status was written, the operator ended before the deletes (preemption, chunk end)."""
    for phase in (Phase.QUEUED, Phase.DEFERRED):
        live = _workers(WorkerPhase.RUNNING, WorkerPhase.RUNNING)
        step = next_step(_spec().spec, _status(phase), _see(*live))
        assert (step.verb, step.phase) == (Verb.DELETE_WORKERS, None)
        going = _workers(WorkerPhase.RUNNING, WorkerPhase.RUNNING, terminating=True)
        assert next_step(_spec().spec, _status(phase), _see(*going)).verb == Verb.NOTHING


@given(
    phase=st.sampled_from(list(Phase)),
    worker_phases=st.lists(st.sampled_from(list(WorkerPhase)), max_size=3),
    suspend=st.booleans(),
    doomed=st.booleans(),
)
def test_every_state_gets_one_definite_step(
    phase: Phase, worker_phases: list[WorkerPhase], suspend: bool, doomed: bool
) -> None:
    """Total over its inputs: never raises, never both finishes and restarts, stays put when finished."""
    workers = _workers(*worker_phases, exit_code=1)
    job = _spec(suspend=suspend)
    step = next_step(job.spec, _status(phase), _see(*workers, doomed_nodes=frozenset({"n1"} if doomed else ())))
    assert not (step.finished and step.count_restart)
    if phase in (Phase.SUCCEEDED, Phase.FAILED):
        assert step.phase is None
    if step.verb in (Verb.CREATE_WORKERS, Verb.RELEASE_GATES):
        assert not suspend
