"""Running an interruptible job in carbon chunks (aisched.policy.carbon.chunk_ends), as the operator steps it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from aisched.api import TrainingJob, TrainingJobPhase
from aisched.api.training_job import Deferral, TrainingJobStatus
from aisched.policy.carbon import (
    CHUNK_ENDED,
    PAUSED_BETWEEN_CHUNKS,
    CarbonPlan,
    DeferrableJob,
    Forecast,
    PlanOptions,
    at_chunk_end,
    current_chunk_end,
    pause_grace_seconds,
    plan_start,
    work_in_chunk,
    work_left,
)
from aisched.policy.lifecycle import Observation, Verb, Worker, WorkerPhase, next_step
from tests.builders import a_training_job

T0 = datetime(2024, 5, 6, tzinfo=UTC)
STEP = timedelta(minutes=30)
POWER_W = 700.0


def _forecast(*values: float) -> Forecast:
    return Forecast("GB", T0, STEP, values)


def _run_in_chunks(fc: Forecast, duration: timedelta, deadline: datetime, overhead: timedelta) -> tuple[datetime, int]:
    """Step a job through plan, chunk ends and resumes as the operator does, with a perfect forecast.

    Returns when it finished and how many times it paused.
    """
    options = PlanOptions(interruptible=True, min_chunk=STEP, chunk_overhead=overhead)

    def plan(now: datetime, left: timedelta, *, running: bool = False, paused: bool = False) -> CarbonPlan:
        job = DeferrableJob(left, power_w=POWER_W, deadline=deadline, running=running, paused=paused)
        return plan_start(fc, now, job, options)

    now, done, pauses = T0, None, 0
    for _ in range(4 * len(fc.values) + 4):
        left = work_left(duration, done)
        assert left is not None
        first = plan(now, left, paused=done is not None)
        now = first.start  # Deferred until the planned start, then the gang runs
        resumed, since = done is not None, now
        end = current_chunk_end(first, now)
        while end is not None:
            ran = (done or 0.0) + work_in_chunk(since, end, resumed=resumed, restore=overhead)
            rest = work_left(duration, ran)
            decision = at_chunk_end(plan(end, rest, running=True) if rest is not None else None, end)
            if decision.pause:
                assert decision.until is not None and decision.until > end
                done, now, pauses = ran, decision.until, pauses + 1
                break
            end = decision.until
        else:
            restore = overhead if resumed else timedelta(0)
            finished = now + restore + (work_left(duration, done) or timedelta(0))
            return finished, pauses
    raise AssertionError("the job never finished")


@given(
    st.lists(st.sampled_from([50.0, 120.0, 300.0, 450.0]), min_size=6, max_size=30),
    st.integers(1, 8),
    st.integers(0, 12),
    st.sampled_from([timedelta(0), timedelta(minutes=5)]),
)
def test_a_job_run_in_chunks_finishes_by_its_deadline(
    values: list[float], steps: int, slack_steps: int, overhead: timedelta
) -> None:
    fc = _forecast(*values)
    duration = STEP * steps
    deadline = min(fc.end, T0 + duration + STEP * slack_steps)
    if deadline < T0 + duration:
        return  # infeasible from the start: not what chunking is asked to fix
    finished, pauses = _run_in_chunks(fc, duration, deadline, overhead)
    assert finished <= deadline + timedelta(seconds=1)
    assert pauses < len(values)


def test_two_clean_windows_make_one_pause() -> None:
    #            dirty  clean  clean  dirty  dirty  clean  dirty ...
    fc = _forecast(400, 40, 40, 400, 400, 40, 400, 400, 400, 400)
    finished, pauses = _run_in_chunks(fc, STEP * 3, T0 + STEP * 9, timedelta(0))
    assert pauses == 1
    assert finished == T0 + STEP * 6


def test_at_chunk_end_pauses_until_the_next_chunk_or_carries_on() -> None:
    fc = _forecast(400, 40, 400, 40, 400, 400)
    deferred = plan_start(
        fc,
        T0,
        DeferrableJob(STEP * 2, power_w=POWER_W, deadline=fc.end),
        PlanOptions(interruptible=True, min_chunk=STEP),
    )
    assert [c.start for c in deferred.chunks] == [T0 + STEP, T0 + 3 * STEP]
    pause = at_chunk_end(deferred, T0)
    assert (pause.pause, pause.until) == (True, T0 + STEP)
    assert pause.message.startswith("paused between chunks until 2024-05-06 00:30:00 UTC")
    running = at_chunk_end(deferred, T0 + STEP)
    assert (running.pause, running.until) == (False, T0 + 2 * STEP)
    assert current_chunk_end(deferred, T0 + STEP) == T0 + 2 * STEP
    assert at_chunk_end(None, T0).until is None


def test_a_source_that_fails_at_a_chunk_end_runs_the_job_to_completion() -> None:
    plan = plan_start(
        None,
        T0,
        DeferrableJob(STEP, power_w=POWER_W, deadline=T0 + 4 * STEP, running=True),
        PlanOptions(interruptible=True),
    )
    decision = at_chunk_end(plan, T0)
    assert (decision.pause, decision.until) == (False, None)
    assert "running to completion" in decision.message


def test_work_accounting() -> None:
    assert work_left(timedelta(hours=1), None) == timedelta(hours=1)
    assert work_left(timedelta(hours=1), 1800.0) == timedelta(minutes=30)
    assert work_left(timedelta(hours=1), 4000.0) is None
    since = T0
    assert work_in_chunk(since, T0 + STEP, resumed=False, restore=timedelta(minutes=5)) == 1800.0
    assert work_in_chunk(since, T0 + STEP, resumed=True, restore=timedelta(minutes=5)) == 1500.0
    assert work_in_chunk(since, T0 + timedelta(minutes=2), resumed=True, restore=timedelta(minutes=5)) == 0.0


def test_pause_grace_fits_the_checkpoint() -> None:
    assert pause_grace_seconds(60) == 100
    assert pause_grace_seconds(600) == 910
    assert pause_grace_seconds(None) == pause_grace_seconds(60)


def _chunked_job() -> TrainingJob:
    return TrainingJob.model_validate(
        a_training_job("c").set("checkpoint.path", "/ckpt").set("expectedDurationSeconds", 3600).obj()
    )


def test_a_gang_stopped_at_a_chunk_end_waits_deferred_not_queued() -> None:
    spec = _chunked_job().spec
    deferral = Deferral(until=T0 + STEP, reason="paused between chunks until 00:30")
    status = TrainingJobStatus(phase=TrainingJobPhase.CHECKPOINTING, reason=CHUNK_ENDED, deferral=deferral)
    going = Worker(name="w0", rank=0, phase=WorkerPhase.RUNNING, terminating=True)
    assert next_step(spec, status, Observation(now=T0, workers=(going,))).verb == Verb.NOTHING
    step = next_step(spec, status, Observation(now=T0, workers=()))
    assert (step.phase, step.reason, step.message) == (
        TrainingJobPhase.DEFERRED,
        PAUSED_BETWEEN_CHUNKS,
        "paused between chunks until 00:30",
    )
    interrupted = status.model_copy(update={"reason": "CapacityInterrupted"})
    assert next_step(spec, interrupted, Observation(now=T0, workers=())).phase == TrainingJobPhase.QUEUED
