"""How a TrainingJob's status changes: the transitions the controller writes.

Pure: each takes the job (or its status) as it is and `now`, and returns a new
status; the controller observes, calls one of these, and patches what it gets.
Lost-work accounting lives here too: what an interruption cost is read off the
conditions the stopped gang left, so a restarted operator counts it the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from aisched.api import ConditionStatus
from aisched.api.common import set_condition
from aisched.api.training_job import CheckpointRecord, Deferral, TrainingJob, TrainingJobStatus
from aisched.api.training_job import TrainingJobPhase as Phase
from aisched.policy.carbon import CHUNK_ENDED, PAUSED_BETWEEN_CHUNKS, CarbonPlan, at_chunk_end
from aisched.policy.job_messages import gang_nodes_message
from aisched.policy.lifecycle import Step
from aisched.policy.placement import Placement
from aisched.policy.queueing import MILLI
from aisched.policy.sharing.charge import replica_milli
from aisched.policy.spot import CapacityDecision, lost_work_seconds
from aisched.workload.contract import CheckpointReport

# (rank label, checkpoint report) of one worker, as read from its pod (`checkpoint_reports.read_report`):
# None when it has none, or the one it wrote was rejected.
WorkerReport = tuple[str | None, CheckpointReport | None]


def record_checkpoints(
    status: TrainingJobStatus, reports: Iterable[WorkerReport], *, ranks: int | None = None
) -> TrainingJobStatus:
    """The newest checkpoint every worker of the gang reported (the gang resumes where all saved).

    REPORTS come oldest first: a later report of a rank replaces an earlier one. A rank whose
    report was rejected has none, so the status keeps the checkpoint it had. RANKS: how many
    workers the gang that reported had (default: the status's replicas; a resized gang's last
    generation had another count).
    """
    # Until every rank has reported, the ranks still saving may end at an older step.
    by_rank = dict(reports)
    steps = [r for r in by_rank.values() if r is not None]
    if not steps or len(steps) < (ranks if ranks is not None else status.replicas or 1):
        return status
    oldest = min(steps, key=lambda r: r.step)  # a rank that saved less decides the resume point
    last = status.last_checkpoint
    if last is not None and last.step >= oldest.step:
        return status
    updated = status.model_copy(deep=True)
    updated.last_checkpoint = CheckpointRecord(step=oldest.step, path=oldest.path, time=oldest.time)
    return updated


def checkpoint_reason(before: TrainingJobStatus) -> str:
    """Why the checkpoint just recorded was taken, as the checkpoints metric labels it."""
    if before.phase != Phase.CHECKPOINTING:
        return "Periodic"
    return "Deferral" if before.reason == CHUNK_ENDED else "Interruption"


def interrupted_gang_stopped(before: TrainingJobStatus, step: Step) -> bool:
    """Every worker of an interrupted gang is gone: the checkpoints they saved on the notice are in."""
    return before.phase == Phase.CHECKPOINTING and step.phase == Phase.QUEUED


def saved_on_notice(status: TrainingJobStatus) -> bool:
    """Did the stopped gang's workers checkpoint after the notice (Running's transition to False)?"""
    stopped = next((c.last_transition_time for c in status.conditions if c.type == "Running"), None)
    checkpoint = status.last_checkpoint
    return stopped is not None and checkpoint is not None and checkpoint.time >= stopped


def interruption_lost_work(status: TrainingJobStatus) -> float:
    """Seconds of training the interruption of the stopped gang undid, from the conditions it left.

    The gang ran from its admission (Admitted's transition) to the notice
    (Running's transition to False); what it did after the checkpoint it
    resumes from is lost. A gang stopped before it ran loses only its placement time.
    """
    transitions = {c.type: c.last_transition_time for c in status.conditions}
    admitted, stopped = transitions.get("Admitted"), transitions.get("Running")
    if admitted is None or stopped is None:
        return 0.0
    checkpoint = status.last_checkpoint.time if status.last_checkpoint else None
    return lost_work_seconds(checkpoint, stopped, admitted)


CARBON_FORECAST = "CarbonForecast"
"""A deferrable job's condition: False while its zone's forecast cannot be read (its own zone only)."""


def carbon_forecast_noted(job: TrainingJob, missing: str | None, now: datetime) -> TrainingJobStatus | None:
    """The status with the CarbonForecast condition after a plan: False saying MISSING when the zone's
    forecast could not be read, True again once it is; None when the condition says so already (a job
    whose forecasts were always read has none). Written on a change of state only, so a job costs one
    write however often its zone's source fails."""
    previous = next((c for c in job.status.conditions if c.type == CARBON_FORECAST), None)
    if missing is None:
        if previous is None or previous.status == ConditionStatus.TRUE:
            return None
        state, reason, message = ConditionStatus.TRUE, "ForecastRead", "the zone's carbon forecast is read"
    else:
        if previous is not None and previous.status == ConditionStatus.FALSE:
            return None  # said once: the source's later words (its circuit's timings) are no news to the tenant
        state, reason, message = ConditionStatus.FALSE, "ForecastUnavailable", missing
    status = job.status.model_copy(deep=True)
    status.conditions = set_condition(
        status.conditions, CARBON_FORECAST, state, reason, message, now=now, generation=job.metadata.get("generation")
    )
    return status


def queued(job: TrainingJob, reason: str, message: str, now: datetime) -> TrainingJobStatus:
    """The job waits for placement: Queued, and not Admitted, for REASON."""
    return waiting_status(job.status, reason, message, now, job.metadata.get("generation"))


# A waiting job's message (GPUs in use, the largest free domain) changes with every cycle on
# a busy cluster; rewritten each time, ten thousand waiting jobs would cost the API server
# ten thousand writes a cycle. A new reason is written at once, a new message this often.
WAITING_MESSAGE_REFRESH = timedelta(seconds=30)


def waiting_write_due(
    current: TrainingJobStatus, reason: str, message: str, *, last_written: datetime | None, now: datetime
) -> bool:
    """Whether a job the scheduler keeps waiting needs its status written this cycle."""
    if current.phase != Phase.QUEUED or current.reason != reason:
        return True
    if current.message == message:
        return False
    return last_written is None or now - last_written >= WAITING_MESSAGE_REFRESH


def waiting_status(
    current: TrainingJobStatus, reason: str, message: str, now: datetime, generation: int | None
) -> TrainingJobStatus:
    status = current.model_copy(deep=True)
    status.phase, status.reason, status.message = Phase.QUEUED, reason, message
    status.observed_generation = generation
    status.queued_time = status.queued_time or now
    status.attained_gpu_seconds = attained_after_run(current, now)
    status.run_start_time = None
    status.conditions = set_condition(
        status.conditions, "Admitted", ConditionStatus.FALSE, reason, message, now=now, generation=generation
    )
    return status


# Why the scheduler left a job out of its cycle: its spec is one this operator cannot read
# (an object stored before an upgrade tightened the schema), or handling it failed.
INVALID_SPEC = "InvalidSpec"
CANNOT_SCHEDULE = "CannotSchedule"
# The condition a placed gang the scheduler cannot handle carries: it runs on, out of the
# scheduler's reach (neither preempted nor resized) until its spec is fixed.
SCHEDULABLE = "Schedulable"
PENDING_PHASES = (None, Phase.QUEUED, Phase.DEFERRED)


def set_aside(
    current: TrainingJobStatus, reason: str, message: str, now: datetime, generation: int | None
) -> TrainingJobStatus:
    """The scheduler left the job out of its cycle for REASON: a pending job waits, Queued and not
    Admitted; a gang already placed keeps its phase and is marked not Schedulable."""
    if current.phase in PENDING_PHASES:
        return waiting_status(current, reason, message, now, generation)
    status = current.model_copy(deep=True)
    status.conditions = set_condition(
        status.conditions, SCHEDULABLE, ConditionStatus.FALSE, reason, message, now=now, generation=generation
    )
    return status


def taken_back(job: TrainingJob, now: datetime) -> TrainingJobStatus:
    """A placed gang the scheduler had set aside is in its reach again (no change for any other job)."""
    flagged = next((c for c in job.status.conditions if c.type == SCHEDULABLE), None)
    if flagged is None or flagged.status == ConditionStatus.TRUE:
        return job.status
    status = job.status.model_copy(deep=True)
    status.conditions = set_condition(
        status.conditions,
        SCHEDULABLE,
        ConditionStatus.TRUE,
        "SpecAccepted",
        "the scheduler handles the job again",
        now=now,
        generation=job.metadata.get("generation"),
    )
    return status


def attained_after_run(status: TrainingJobStatus, now: datetime) -> float | None:
    """Attained service once the gang that runs now ends (preempted, or re-placed after a restart or
    resize): the GPU-time it had counts towards the order among equals from then on, and, being in
    status, survives an operator restart."""
    if status.run_start_time is None or not status.gpus:
        return status.attained_gpu_seconds
    held = status.gpu_equivalents if status.gpu_equivalents is not None else status.gpus
    return attained_gpu_seconds_after_run(status.attained_gpu_seconds or 0.0, held, status.run_start_time, now)


def attained_gpu_seconds_after_run(earlier: float, gpus_held: float, run_start: datetime, now: datetime) -> float:
    """EARLIER attained GPU-seconds plus the run that ends at NOW: GPUS_HELD for as long as it ran.

    The one rule both the operator's status (`attained_after_run`) and the simulator's requests
    (`aisched.sim.policies.attained_after_run`) count service by, so the order among equals the
    simulator measures is the operator's."""
    ran = max(0.0, (now - run_start).total_seconds())
    return earlier + gpus_held * ran


def preempted(job: TrainingJob, reason: str, message: str, now: datetime) -> TrainingJobStatus:
    """The scheduler took the gang's GPUs: the job waits again, and remembers who preempted it."""
    status = queued(job, reason, message, now)  # which counts the run that ends here as attained service
    status.gpus, status.gpu_equivalents = 0, None
    # The queue reason changes as the job waits; this condition keeps who preempted it, and when.
    status.conditions = set_condition(
        status.conditions,
        "Preempted",
        ConditionStatus.TRUE,
        reason,
        message,
        now=now,
        generation=job.metadata.get("generation"),
    )
    return status


def placed(
    job: TrainingJob,
    placement: Placement,
    *,
    reason: str,
    message: str,
    selector: str,
    checkpoint_interval_seconds: int | None,
    capacity: CapacityDecision | None,
    now: datetime,
) -> TrainingJobStatus:
    """A (new) placement recorded as the gang's next generation: Placing, with its nodes and GPUs."""
    generation = job.metadata.get("generation")
    status = job.status.model_copy(deep=True)
    status.phase, status.reason, status.message = Phase.PLACING, reason, message
    status.observed_generation = generation
    status.queued_time = status.queued_time or now
    status.attained_gpu_seconds = attained_after_run(job.status, now)
    status.run_start_time = now
    status.placement = placement.to_status()
    # What its workers are made with and charged, whatever the spec says later (`scheduler.jobs.admitted_shape`).
    status.placement.gpus_per_replica = placement.gpus_per_replica
    status.placement.gpu_share = job.spec.gpu_share
    status.gang_generation = (status.gang_generation or 0) + 1
    status.replicas = placement.replicas
    status.gpus = placement.total_gpus
    status.gpu_equivalents = placement.replicas * replica_milli(job.spec.gpu_share, job.spec.gpus_per_replica) / MILLI
    status.selector = selector
    status.checkpoint_interval_seconds = checkpoint_interval_seconds
    status.conditions = set_condition(
        status.conditions,
        "Admitted",
        ConditionStatus.TRUE,
        reason,
        gang_nodes_message(placement.replicas, job.spec.gpus_per_replica, placement.nodes),
        now=now,
        generation=generation,
    )
    if capacity is not None:
        status.conditions = set_condition(
            status.conditions,
            "Capacity",
            ConditionStatus.TRUE,
            capacity.reason,
            capacity.message,
            now=now,
            generation=generation,
        )
    return status


def apply_step(job: TrainingJob, status: TrainingJobStatus, step: Step, now: datetime) -> TrainingJobStatus:
    """STATUS after the lifecycle's STEP: phase, counters, lost work, times and conditions."""
    if step.phase is None and not (step.count_restart or step.count_interruption):
        return status
    updated = status.model_copy(deep=True)
    generation = job.metadata.get("generation")
    updated.observed_generation = generation
    if step.phase is not None:
        updated.phase = step.phase
        updated.reason, updated.message = step.reason, step.message
    if step.count_restart:
        updated.restarts = (updated.restarts or 0) + 1
    if step.count_interruption:
        updated.interruptions = (updated.interruptions or 0) + 1
    if interrupted_gang_stopped(status, step):
        updated.lost_work_seconds = (updated.lost_work_seconds or 0.0) + interruption_lost_work(status)
        if saved_on_notice(status):
            updated.saved_on_notice = (updated.saved_on_notice or 0) + 1
    if step.started:
        updated.start_time = now
    if step.finished:
        updated.completion_time = now
        updated.conditions = set_condition(
            updated.conditions,
            "Finished",
            ConditionStatus.TRUE,
            step.reason or "",
            step.message or "",
            now=now,
            generation=generation,
        )
    if step.phase == Phase.RUNNING:
        updated.ready_replicas = updated.replicas
        updated.conditions = set_condition(
            updated.conditions,
            "Running",
            ConditionStatus.TRUE,
            step.reason or "",
            step.message or "",
            now=now,
            generation=generation,
        )
    elif step.phase is not None:
        updated.ready_replicas = 0
        updated.conditions = set_condition(
            updated.conditions,
            "Running",
            ConditionStatus.FALSE,
            step.reason or "",
            step.message or "",
            now=now,
            generation=generation,
        )
    if step.phase in (Phase.QUEUED, Phase.SUSPENDED):
        updated.gpus, updated.gpu_equivalents = 0, None
    return updated


# -- carbon-aware deferral and chunks -------------------------------------


def deferral(plan: CarbonPlan, reason: str) -> Deferral:
    """What status.deferral tells the user of PLAN: when it starts, why, and what it saves."""
    return Deferral(
        until=plan.start,
        reason=reason,
        forecast_grams_per_kwh=plan.intensity_at_start,
        expected_saving_percent=plan.saving_percent,
        expected_saving_grams=plan.saving_grams,
    )


def deferred(job: TrainingJob, plan: CarbonPlan, now: datetime, *, paused: bool) -> TrainingJobStatus:
    """The job waits, Deferred, for PLAN's start; PAUSED: between the chunks of a job that has run."""
    updated = queued(job, str(plan.reason), plan.message, now)
    updated.phase = Phase.DEFERRED
    updated.deferral = deferral(plan, at_chunk_end(plan, now).message if paused else plan.message)
    if paused:
        updated.reason, updated.message = PAUSED_BETWEEN_CHUNKS, updated.deferral.reason
    return updated


def deferral_write_due(current: TrainingJobStatus, updated: TrainingJobStatus) -> bool:
    """Whether a Deferred job's re-plan says something new enough to write.

    Its expected saving is counted against starting now, so it drifts with every pass; rewritten
    each time, every write's own watch event would bring the next pass at once, a deferred job
    alone keeping the operator busy. A new start, reason, forecast or generation is written at
    once, the saving when it moves a whole percent.
    """
    before, after = current.deferral, updated.deferral
    if current.phase != Phase.DEFERRED or before is None or after is None:
        return True
    if (current.reason, current.observed_generation) != (updated.reason, updated.observed_generation):
        return True
    if (before.until, before.forecast_grams_per_kwh) != (after.until, after.forecast_grams_per_kwh):
        return True
    return round(before.expected_saving_percent or 0.0) != round(after.expected_saving_percent or 0.0)


def pausing_at_chunk_end(
    status: TrainingJobStatus, plan: CarbonPlan, message: str, work_done_seconds: float
) -> TrainingJobStatus:
    """A running gang whose chunk is over checkpoints and then waits for PLAN's next chunk."""
    updated = status.model_copy(deep=True)
    updated.chunk_end, updated.chunk_work_done_seconds = None, round(work_done_seconds, 1)
    updated.deferral = deferral(plan, message)
    return updated


def with_chunk_end(status: TrainingJobStatus, end: datetime | None) -> TrainingJobStatus:
    updated = status.model_copy(deep=True)
    updated.chunk_end = end
    return updated


def with_emissions(status: TrainingJobStatus, grams: float) -> TrainingJobStatus:
    """GRAMS more emitted, added to the running total the status shows (to a tenth of a gram)."""
    updated = status.model_copy(deep=True)
    updated.estimated_emissions_grams = round((updated.estimated_emissions_grams or 0.0) + grams, 1)
    return updated
