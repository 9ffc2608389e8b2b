"""A TrainingJob's status transitions, and what an interruption cost (aisched.policy.job_status)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aisched.api import CapacityType, ConditionStatus
from aisched.api.common import set_condition
from aisched.api.training_job import CheckpointRecord, TrainingJob, TrainingJobPhase, TrainingJobStatus
from aisched.policy.carbon import CHUNK_ENDED, PAUSED_BETWEEN_CHUNKS, CarbonPlan, PlanReason, RunChunk
from aisched.policy.cluster import DomainId
from aisched.policy.job_status import (
    WAITING_MESSAGE_REFRESH,
    apply_step,
    checkpoint_reason,
    deferred,
    interruption_lost_work,
    pausing_at_chunk_end,
    placed,
    preempted,
    queued,
    record_checkpoints,
    waiting_write_due,
    with_chunk_end,
    with_emissions,
)
from aisched.policy.lifecycle import Step, Verb
from aisched.policy.placement import Placement
from aisched.policy.spot import CapacityChoice, CapacityDecision
from aisched.workload.contract import CheckpointReport
from tests.builders import a_training_job
from tests.levels import RACK

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Phase = TrainingJobPhase


def a_job(status: TrainingJobStatus | None = None, generation: int = 3) -> TrainingJob:
    obj = a_training_job("llm").namespace("ns").gpus(8).obj()
    obj["metadata"]["generation"] = generation
    job = TrainingJob.model_validate(obj)
    if status is not None:
        job.status = status
    return job


def report(step: int) -> CheckpointReport:
    """What a worker that saved STEP reported."""
    return CheckpointReport(step, f"/ckpt/{step}", T0 + timedelta(seconds=step), 0.0)


def condition(status: TrainingJobStatus, kind: str) -> tuple[str, str | None, str | None]:
    found = next(c for c in status.conditions if c.type == kind)
    return (str(found.status), found.reason, found.message)


# -- checkpoints the workers reported ---------------------------------------------------------


def test_the_gang_resumes_from_the_oldest_step_every_rank_reported() -> None:
    status = TrainingJobStatus(replicas=2)
    assert record_checkpoints(status, [("0", report(1200))]) == status  # rank 1 may still be saving
    recorded = record_checkpoints(status, [("0", report(1200)), ("1", report(1100))])
    assert recorded.last_checkpoint == CheckpointRecord(step=1100, path="/ckpt/1100", time=T0 + timedelta(seconds=1100))
    assert status.last_checkpoint is None  # the status given is left as it was


def test_a_resized_gangs_last_generation_is_counted_by_its_own_ranks() -> None:
    # Grown from one worker to two: the one worker of the generation before reported all it had.
    grown = TrainingJobStatus(replicas=2)
    assert record_checkpoints(grown, [("0", report(300))]) == grown
    recorded = record_checkpoints(grown, [("0", report(300))], ranks=1)
    assert recorded.last_checkpoint is not None and recorded.last_checkpoint.step == 300
    # Shrunk from two to one: both ranks of the generation before must have reported.
    shrunk = TrainingJobStatus(replicas=1)
    assert record_checkpoints(shrunk, [("0", report(300)), ("1", None)], ranks=2) == shrunk


def test_a_later_report_of_a_rank_replaces_its_earlier_one() -> None:
    status = TrainingJobStatus(replicas=2)
    # The departed pod of rank 1 said 900; its live pod, listed after it, says 1300.
    recorded = record_checkpoints(status, [("1", report(900)), ("0", report(1200)), ("1", report(1300))])
    assert recorded.last_checkpoint is not None and recorded.last_checkpoint.step == 1200


def test_a_report_never_moves_the_checkpoint_back_and_workers_without_one_do_not_count() -> None:
    last = CheckpointRecord(step=2000, path="/ckpt/2000", time=T0)
    status = TrainingJobStatus(replicas=1, last_checkpoint=last)
    assert record_checkpoints(status, [("0", report(1500))]) == status
    assert record_checkpoints(TrainingJobStatus(replicas=1), [("0", None)]).last_checkpoint is None


def test_a_checkpoint_is_counted_as_periodic_deferral_or_interruption_by_the_phase_it_was_taken_in() -> None:
    assert checkpoint_reason(TrainingJobStatus(phase=Phase.RUNNING)) == "Periodic"
    assert checkpoint_reason(TrainingJobStatus(phase=Phase.CHECKPOINTING, reason=CHUNK_ENDED)) == "Deferral"
    assert checkpoint_reason(TrainingJobStatus(phase=Phase.CHECKPOINTING, reason="CapacityInterrupted")) == (
        "Interruption"
    )


# -- lost work --------------------------------------------------------------------------------


def interrupted(admitted: datetime, notice: datetime, checkpoint: datetime | None) -> TrainingJobStatus:
    """A gang admitted, running, then stopped by a notice; CHECKPOINT is the last one it reported."""
    conditions = set_condition([], "Admitted", ConditionStatus.TRUE, "Admitted", "", now=admitted, generation=1)
    conditions = set_condition(
        conditions, "Running", ConditionStatus.TRUE, "GangRunning", "", now=admitted, generation=1
    )
    conditions = set_condition(
        conditions, "Running", ConditionStatus.FALSE, "CapacityInterrupted", "", now=notice, generation=1
    )
    last = CheckpointRecord(step=1, time=checkpoint) if checkpoint else None
    return TrainingJobStatus(conditions=conditions, last_checkpoint=last)


def test_a_checkpoint_saved_on_the_notice_loses_no_work_however_long_the_gang_ran() -> None:
    notice = T0 + timedelta(hours=5)
    assert interruption_lost_work(interrupted(T0, notice, notice + timedelta(seconds=20))) == 0.0


def test_without_a_notice_save_the_work_since_the_last_checkpoint_is_lost() -> None:
    notice = T0 + timedelta(hours=5)
    assert interruption_lost_work(interrupted(T0, notice, notice - timedelta(minutes=10))) == 600.0


def test_a_checkpoint_of_an_earlier_gang_counts_only_this_gangs_run() -> None:
    admitted = T0 + timedelta(hours=1)
    assert interruption_lost_work(interrupted(admitted, admitted + timedelta(minutes=3), T0)) == 180.0
    assert interruption_lost_work(interrupted(admitted, admitted + timedelta(minutes=3), None)) == 180.0


def test_a_gang_interrupted_before_it_ran_loses_only_the_time_to_place_it() -> None:
    conditions = set_condition([], "Admitted", ConditionStatus.TRUE, "Admitted", "", now=T0, generation=1)
    placing = T0 + timedelta(seconds=1)
    conditions = set_condition(conditions, "Running", ConditionStatus.FALSE, "Placing", "", now=placing, generation=1)
    # The notice, an hour later, leaves Running as it was: False since the gang was placed.
    conditions = set_condition(
        conditions,
        "Running",
        ConditionStatus.FALSE,
        "CapacityInterrupted",
        "",
        now=T0 + timedelta(hours=1),
        generation=1,
    )
    assert interruption_lost_work(TrainingJobStatus(conditions=conditions)) == 1.0
    assert interruption_lost_work(TrainingJobStatus()) == 0.0


def gang_stops(status: TrainingJobStatus) -> TrainingJobStatus:
    """The interrupted gang's last worker is gone: the job goes back to the queue."""
    checkpointing = status.model_copy(update={"phase": TrainingJobPhase.CHECKPOINTING})
    return apply_step(a_job(), checkpointing, Step(Verb.NOTHING, TrainingJobPhase.QUEUED), T0 + timedelta(hours=6))


def test_a_checkpoint_written_in_the_notice_window_counts_as_saved_on_notice() -> None:
    notice = T0 + timedelta(hours=5)
    saved = gang_stops(interrupted(T0, notice, notice + timedelta(seconds=20)))
    assert saved.saved_on_notice == 1
    assert saved.lost_work_seconds == 0.0
    missed = gang_stops(interrupted(T0, notice, notice - timedelta(minutes=10)))
    assert not missed.saved_on_notice
    assert missed.lost_work_seconds == 600.0


# -- the lifecycle's steps --------------------------------------------------------------------


def test_a_step_without_a_phase_or_a_count_leaves_the_status_alone() -> None:
    status = TrainingJobStatus(phase=Phase.RUNNING)
    assert apply_step(a_job(), status, Step(Verb.RELEASE_GATES), T0) is status


def test_a_gang_running_for_the_first_time_gets_its_start_time_and_every_replica_ready() -> None:
    status = TrainingJobStatus(phase=Phase.PLACING, replicas=4, gpus=32)
    step = Step(Verb.NOTHING, Phase.RUNNING, "GangRunning", "all 4 workers running", started=True)
    running = apply_step(a_job(), status, step, T0)
    assert (running.phase, running.start_time, running.ready_replicas, running.observed_generation) == (
        Phase.RUNNING,
        T0,
        4,
        3,
    )
    assert condition(running, "Running") == ("True", "GangRunning", "all 4 workers running")


def test_a_restarting_gang_counts_the_restart_holds_no_ready_replica_and_its_gpus_go_once_queued() -> None:
    status = TrainingJobStatus(phase=Phase.RUNNING, replicas=2, ready_replicas=2, gpus=16, restarts=1)
    step = Step(Verb.DELETE_WORKERS, Phase.RESTARTING, "WorkerFailed", "worker 1 failed", count_restart=True)
    restarting = apply_step(a_job(), status, step, T0)
    assert (restarting.restarts, restarting.ready_replicas, restarting.gpus) == (2, 0, 16)
    assert condition(restarting, "Running") == ("False", "WorkerFailed", "worker 1 failed")
    requeued = apply_step(a_job(), restarting, Step(Verb.NOTHING, Phase.QUEUED, "Restarting", "waiting"), T0)
    assert requeued.gpus == 0


def test_a_finished_job_gets_its_completion_time_and_the_finished_condition() -> None:
    step = Step(Verb.NOTHING, Phase.SUCCEEDED, "Completed", "all 2 workers succeeded", finished=True)
    done = apply_step(a_job(), TrainingJobStatus(phase=Phase.RUNNING), step, T0)
    assert done.completion_time == T0
    assert condition(done, "Finished") == ("True", "Completed", "all 2 workers succeeded")


def test_an_interruption_is_counted_when_it_is_noticed() -> None:
    step = Step(Verb.DELETE_WORKERS, Phase.CHECKPOINTING, "CapacityInterrupted", "node n1", count_interruption=True)
    assert apply_step(a_job(), TrainingJobStatus(phase=Phase.RUNNING), step, T0).interruptions == 1


# -- waiting, placed, preempted ----------------------------------------------------------------


def test_a_queued_job_says_why_it_waits_and_keeps_the_time_it_first_queued() -> None:
    first = queued(a_job(), "NoCapacity", "needs 16 GPUs", T0)
    assert (first.phase, first.reason, first.message, first.queued_time) == (
        Phase.QUEUED,
        "NoCapacity",
        "needs 16 GPUs",
        T0,
    )
    assert condition(first, "Admitted") == ("False", "NoCapacity", "needs 16 GPUs")
    later = queued(a_job(first), "QuotaExceeded", "queue is full", T0 + timedelta(minutes=5))
    assert later.queued_time == T0


def a_placement() -> Placement:
    return Placement(
        nodes=("n1", "n2"),
        gpus_per_replica=8,
        domain=DomainId(RACK, ("z1", "r1")),
        capacity_type=CapacityType.SPOT,
    )


def test_a_placed_gang_is_the_next_generation_with_its_nodes_gpus_and_capacity() -> None:
    capacity = CapacityDecision(CapacityChoice.SPOT, "SpotAvailable", "spot fits")
    status = placed(
        a_job(TrainingJobStatus(gang_generation=1, queued_time=T0)),
        a_placement(),
        reason="Admitted",
        message="placed in r1",
        selector="aisched.io/job-name=llm",
        checkpoint_interval_seconds=600,
        capacity=capacity,
        now=T0 + timedelta(minutes=1),
    )
    assert (status.phase, status.gang_generation, status.replicas, status.gpus) == (Phase.PLACING, 2, 2, 16)
    assert status.placement is not None and status.placement.nodes == ["n1", "n2"]
    assert (status.checkpoint_interval_seconds, status.selector, status.queued_time) == (
        600,
        "aisched.io/job-name=llm",
        T0,
    )
    assert condition(status, "Admitted") == ("True", "Admitted", "2 x 8 GPUs on n1, n2")
    assert condition(status, "Capacity") == ("True", "SpotAvailable", "spot fits")


def test_a_preempted_job_waits_holding_no_gpus_and_remembers_who_preempted_it() -> None:
    status = preempted(a_job(TrainingJobStatus(phase=Phase.RUNNING, gpus=16)), "Preempted", "by ns/urgent", T0)
    assert (status.phase, status.gpus) == (Phase.QUEUED, 0)
    assert condition(status, "Preempted") == ("True", "Preempted", "by ns/urgent")
    assert condition(status, "Admitted") == ("False", "Preempted", "by ns/urgent")


# -- carbon-aware deferral and chunks ----------------------------------------------------------


def a_plan(start: datetime) -> CarbonPlan:
    return CarbonPlan(
        start=start,
        chunks=(RunChunk(start, start + timedelta(hours=1)),),
        latest_start=start + timedelta(hours=2),
        reason=PlanReason.CLEANEST_WINDOW,
        message="cleanest hour",
        intensity_at_start=50.0,
        planned_grams=100.0,
        immediate_grams=400.0,
    )


def test_a_deferred_job_shows_its_planned_start_and_expected_saving() -> None:
    plan = a_plan(T0 + timedelta(hours=6))
    status = deferred(a_job(), plan, T0, paused=False)
    assert (status.phase, status.reason, status.message) == (Phase.DEFERRED, "CleanestWindow", "cleanest hour")
    assert status.deferral is not None
    assert (status.deferral.until, status.deferral.reason, status.deferral.expected_saving_grams) == (
        plan.start,
        "cleanest hour",
        300.0,
    )
    assert condition(status, "Admitted") == ("False", "CleanestWindow", "cleanest hour")


def test_a_job_paused_between_chunks_waits_deferred_and_says_until_when() -> None:
    plan = a_plan(T0 + timedelta(hours=6))
    status = deferred(a_job(TrainingJobStatus(chunk_work_done_seconds=1800.0)), plan, T0, paused=True)
    assert (status.phase, status.reason) == (Phase.DEFERRED, PAUSED_BETWEEN_CHUNKS)
    assert status.message == "paused between chunks until 2026-01-01 06:00:00 UTC: cleanest hour"
    assert status.deferral is not None and status.deferral.reason == status.message


def test_a_gang_pausing_at_its_chunk_end_keeps_the_work_it_did_and_forgets_the_chunk_end() -> None:
    plan = a_plan(T0 + timedelta(hours=6))
    running = with_chunk_end(TrainingJobStatus(phase=Phase.RUNNING), T0)
    assert running.chunk_end == T0
    paused = pausing_at_chunk_end(running, plan, "paused until 06:00", 1799.96)
    assert (paused.chunk_end, paused.chunk_work_done_seconds) == (None, 1800.0)
    assert paused.deferral is not None and paused.deferral.reason == "paused until 06:00"
    assert running.chunk_end == T0


def test_emissions_add_up_to_a_tenth_of_a_gram() -> None:
    status = with_emissions(TrainingJobStatus(), 12.34)
    assert status.estimated_emissions_grams == 12.3
    assert with_emissions(status, 0.07).estimated_emissions_grams == 12.4


def test_a_waiting_job_gets_a_new_reason_at_once_and_a_new_message_at_most_every_refresh() -> None:
    waiting = queued(a_job(), "QuotaExceeded", "18 of 16 GPUs in use", T0).model_copy()
    soon, later = T0 + timedelta(seconds=5), T0 + WAITING_MESSAGE_REFRESH

    assert waiting_write_due(a_job().status, "QuotaExceeded", "x", last_written=None, now=T0)  # not Queued yet
    assert not waiting_write_due(waiting, "QuotaExceeded", "18 of 16 GPUs in use", last_written=T0, now=later)
    assert waiting_write_due(waiting, "InsufficientCapacity", "no room", last_written=T0, now=soon)
    assert not waiting_write_due(waiting, "QuotaExceeded", "17 of 16 GPUs in use", last_written=T0, now=soon)
    assert waiting_write_due(waiting, "QuotaExceeded", "17 of 16 GPUs in use", last_written=T0, now=later)
    assert waiting_write_due(waiting, "QuotaExceeded", "17 of 16 GPUs in use", last_written=None, now=soon)


def test_a_preempted_run_adds_its_gpu_time_to_the_attained_service_kept_in_status() -> None:
    running = TrainingJobStatus(
        phase=Phase.RUNNING, gpus=16, run_start_time=T0 - timedelta(minutes=30), attained_gpu_seconds=100.0
    )
    status = preempted(a_job(running), "Preempted", "by ns/short", T0)
    assert status.attained_gpu_seconds == 100.0 + 16 * 1800
    assert status.run_start_time is None


def test_a_gang_placed_anew_counts_the_run_before_it_and_starts_a_new_one() -> None:
    restarting = TrainingJobStatus(phase=Phase.RUNNING, gpus=8, run_start_time=T0, attained_gpu_seconds=10.0)
    status = placed(
        a_job(restarting),
        a_placement(),
        reason="Admitted",
        message="placed in r1",
        selector="aisched.io/job-name=llm",
        checkpoint_interval_seconds=None,
        capacity=None,
        now=T0 + timedelta(minutes=1),
    )
    assert status.attained_gpu_seconds == 10.0 + 8 * 60
    assert status.run_start_time == T0 + timedelta(minutes=1)


def test_a_gang_of_parts_of_gpus_says_what_it_holds_and_attains_service_by_it() -> None:
    obj = a_training_job("small").namespace("ns").replicas(3).gpu_share(computePercent=30).obj()
    job = TrainingJob.model_validate(obj)
    three = Placement(nodes=("n1", "n1", "n1"), gpus_per_replica=1, domain=DomainId(RACK, ("z1", "r1")))
    status = placed(
        job,
        three,
        reason="Admitted",
        message="placed on n1",
        selector="aisched.io/job-name=small",
        checkpoint_interval_seconds=None,
        capacity=None,
        now=T0,
    )
    assert status.gpu_equivalents == 0.9
    job.status = status
    ended = preempted(job, "Preempted", "by ns/other", T0 + timedelta(seconds=100))
    assert ended.attained_gpu_seconds == 90.0  # 0.9 of a GPU for 100 s, not 3 GPUs
    assert (ended.gpus, ended.gpu_equivalents) == (0, None)
