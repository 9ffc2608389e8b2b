"""Carbon-aware TrainingJobs: deferral to a cleaner start, chunks of an interruptible job, emissions.

The plans come from `policy.carbon`; this layer reads the
forecast and the energy counters, and writes what the plans decide.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aisched.api import TrainingJob, TrainingJobPhase
from aisched.api.training_job import TrainingJobStatus
from aisched.controller.concurrency import all_done
from aisched.controller.training.isolation import CHUNK_ENDS, EMISSIONS, CycleWrites, StageGuard
from aisched.controller.training.reconcile import JobReconciler
from aisched.controller.training.store import JobKey, JobStore, start_now_requested, wake_at
from aisched.controller.training.writer import StatusWriter
from aisched.controller.workqueue import WorkQueue
from aisched.kube import labels
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.metrics import Metrics
from aisched.policy.carbon import (
    CHUNK_ENDED,
    CarbonPlan,
    DeferrableJob,
    PlanOptions,
    at_chunk_end,
    current_chunk_end,
    grams_from_joules,
    pause_grace_seconds,
    plan_awaiting_forecast,
    plan_start,
    work_in_chunk,
    work_left,
)
from aisched.policy.job_messages import deferred_message
from aisched.policy.job_status import (
    carbon_forecast_noted,
    deferral_write_due,
    deferred,
    pausing_at_chunk_end,
    queued,
    with_chunk_end,
    with_emissions,
)
from aisched.policy.lifecycle import Step, Verb
from aisched.settings import Settings
from aisched.sources.carbon import CARBON_SOURCE_NAMES, CachedCarbonSource, CarbonSourceError
from aisched.sources.carbon.reading import read_forecast
from aisched.sources.energy import GpuEnergySource
from aisched.sources.prometheus import PrometheusError

log = logging.getLogger(__name__)
Phase = TrainingJobPhase


@dataclass(frozen=True)
class _Planned:
    """A plan made on the zone's forecast, why the zone has none (when it has none), and, while its
    first read is under way, until when the plan waits for it (`plan_awaiting_forecast`)."""

    plan: CarbonPlan
    missing: str | None = None
    awaiting_until: datetime | None = None


@dataclass(kw_only=True)
class CarbonDeferral:
    """Deferral to a cleaner start, the ends of carbon chunks, and emissions, for every job that asks."""

    settings: Settings
    store: JobStore
    writer: StatusWriter
    guard: StageGuard
    reconciler: JobReconciler
    kube: KubeClient
    inventory: Inventory
    queue: WorkQueue[JobKey]
    metrics: Metrics
    carbon: CachedCarbonSource | None
    energy: GpuEnergySource | None  # DCGM's energy counters, where Prometheus has them
    _emissions_marks: dict[JobKey, datetime] = field(default_factory=dict, init=False)

    async def defer(self, obj: dict[str, Any], job: TrainingJob, now: datetime, writes: CycleWrites) -> bool:
        """Hold a deferrable job in Deferred until its planned start; True while it waits.

        Re-planned on every cycle, so a newer forecast moves the start. With no forecast the
        plan is "now", and every plan starts no later than the latest start meeting the deadline.
        A job paused between carbon chunks is planned the same way for the work it has left.
        """
        spec, status = job.spec, job.status
        paused = status.chunk_work_done_seconds is not None
        if not spec.carbon.deferrable or (status.start_time is not None and not paused):
            return False
        if start_now_requested(job):
            if status.phase == Phase.DEFERRED:
                self.kube.post_event(obj, "Normal", "StartNow", f"{labels.START_NOW} set: starting now")
            return False
        work = work_left(timedelta(seconds=spec.expected_duration_seconds or 0), status.chunk_work_done_seconds)
        if work is None:
            return False
        planned = await self._carbon_plan(job, now, work, paused=paused)
        plan, missing = planned.plan, planned.missing
        if planned.awaiting_until is None:
            noted = carbon_forecast_noted(job, missing, now)
            if noted is not None:
                # Said on this job alone, and first: the cycle that admits it writes from the status it read.
                # It sits this one cycle out for it, and enters the next with the condition in its status.
                if missing is not None:
                    self.kube.post_event(obj, "Warning", "CarbonForecastUnavailable", missing)
                self.guard.write_in_cycle(writes, obj, job, noted, now)
                wake_at(self.queue, job, now, now)
                return True
            if not plan.is_deferred(now):
                self._start_chunk(obj, job, plan, now, writes, first=not paused)
                return False
            self._note_deferred(obj, job, plan, now, writes, paused=paused)
        # else nothing is written: the job keeps the phase and message it had until its zone is read.
        wake_at(self.queue, job, plan.start, now)
        return True

    def _note_deferred(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        plan: CarbonPlan,
        now: datetime,
        writes: CycleWrites,
        *,
        paused: bool,
    ) -> None:
        """The job waits Deferred for PLAN's start: said and counted when it enters, written when due."""
        updated = deferred(job, plan, now, paused=paused)
        if job.status.phase != Phase.DEFERRED:
            self.metrics.carbon.record_deferral(str(job.spec.carbon.mode))
            self.kube.post_event(obj, "Normal", "Deferred", deferred_message(plan))
        if deferral_write_due(job.status, updated):
            self.guard.write_in_cycle(writes, obj, job, updated, now)

    def _start_chunk(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        plan: CarbonPlan,
        now: datetime,
        writes: CycleWrites,
        *,
        first: bool,
    ) -> None:
        """A planned start (or resume) has come: queue the job, with the end of the chunk it runs in."""
        status = job.status
        chunk_end = current_chunk_end(plan, now) if job.spec.carbon.interruptible else None
        if status.phase == Phase.DEFERRED:
            if first:  # the saving a chunked job expects is counted once, at its first start
                saved = status.deferral.expected_saving_grams if status.deferral else None
                self.metrics.carbon.record_carbon(
                    "TrainingJob", emitted_grams=0.0, avoided_grams=max(0.0, saved or 0.0)
                )
            updated = with_chunk_end(queued(job, str(plan.reason), plan.message, now), chunk_end)
        elif chunk_end != status.chunk_end:
            updated = with_chunk_end(status, chunk_end)  # keep the scheduler's reason for the wait
        else:
            return
        writes.append(
            functools.partial(
                self.guard.carried_out, obj, job, now, functools.partial(self._write_chunk_end, obj, job, updated)
            )
        )
        if chunk_end is not None:
            wake_at(self.queue, job, chunk_end, now)

    async def _carbon_plan(
        self, job: TrainingJob, now: datetime, work: timedelta, *, running: bool = False, paused: bool = False
    ) -> _Planned:
        """Plan the work left against the current forecast (none when the source fails: start in time),
        with why the job's zone has no forecast, if it has none. A zone whose first read is under way
        is waited for a bounded while (`forecast_pending_seconds`), a running job's read first."""
        spec = job.spec
        region = spec.carbon.region or self.settings.carbon.region
        read = await read_forecast(self.carbon, self.settings.carbon, region, now, priority=running)
        if read.failed:
            self.metrics.carbon.record_carbon_source_error(CARBON_SOURCE_NAMES[self.settings.carbon.provider])
        created = job.metadata.get("creationTimestamp")
        deferrable = DeferrableJob(
            work,
            power_w=self.settings.carbon.power_per_gpu(spec.gpu_type) * spec.total_gpus,
            deadline=spec.deadline,
            # 0 is a delay too (start at once): only an unset one is none.
            max_delay=(
                timedelta(seconds=spec.carbon.max_delay_seconds) if spec.carbon.max_delay_seconds is not None else None
            ),
            submitted_at=datetime.fromisoformat(created) if isinstance(created, str) else now,
            running=running,
            paused=paused,
        )
        options = PlanOptions(
            interruptible=spec.carbon.interruptible,
            threshold_grams_per_kwh=spec.carbon.threshold_grams_per_kwh if spec.carbon.mode == "Threshold" else None,
            min_chunk=timedelta(seconds=self.settings.carbon.min_chunk_seconds),
            chunk_overhead=timedelta(seconds=self.settings.restart_overhead_seconds),
            min_saving_fraction=self.settings.carbon.min_saving_fraction,
            forecast_error=self.settings.carbon.forecast_error,
        )
        if read.awaiting_until is not None:
            waiting = plan_awaiting_forecast(now, deferrable, options, until=read.awaiting_until)
            if waiting.is_deferred(now):
                return _Planned(waiting, None, read.awaiting_until)
            return _Planned(waiting, read.missing)  # its latest start has come: it starts without the forecast
        return _Planned(plan_start(read.forecast, now, deferrable, options), read.missing)

    async def end_chunks(self, now: datetime) -> None:
        """Running gangs whose carbon chunk is over: re-plan, then carry on or pause for the next chunk."""
        for key, obj, job in self.store.running():
            if job.status.chunk_end is None or self.guard.sits_out(CHUNK_ENDS, key):
                continue
            with self.guard.isolated(CHUNK_ENDS, key):
                if not (job.spec.carbon.deferrable and job.spec.carbon.interruptible) or start_now_requested(job):
                    await self._set_chunk_end(obj, job, None)
                elif now >= job.status.chunk_end:
                    await self._end_chunk(obj, job, now)
                else:
                    # A job keeps one wake-up, the earliest asked for: one for its chunk's end
                    # may have given way to an earlier one, so it is asked for again every pass.
                    wake_at(self.queue, job, job.status.chunk_end, now)

    async def _end_chunk(self, obj: dict[str, Any], job: TrainingJob, now: datetime) -> None:
        status = job.status
        running = next((c for c in status.conditions if c.type == "Running" and c.status == "True"), None)
        done = (status.chunk_work_done_seconds or 0.0) + work_in_chunk(
            (running.last_transition_time if running else None) or now,
            now,
            resumed=status.chunk_work_done_seconds is not None,
            restore=timedelta(seconds=self.settings.restart_overhead_seconds),
        )
        work = work_left(timedelta(seconds=job.spec.expected_duration_seconds or 0), done)
        planned = await self._carbon_plan(job, now, work, running=True) if work is not None else None
        if planned is not None and planned.awaiting_until is not None:
            # The zone's first read since a restart is under way: the chunk end waits for it (running on
            # meanwhile), rather than take the source for down and drop the pause the plan has.
            wake_at(self.queue, job, planned.awaiting_until, now)
            return
        plan = planned.plan if planned is not None else None
        decision = at_chunk_end(plan, now)
        late = (now - status.chunk_end).total_seconds() if status.chunk_end is not None else 0.0
        log.info(
            "chunk end of %s/%s, %.1f s after it was due: %.1f s of work done; %s",
            job.metadata["namespace"],
            job.metadata["name"],
            late,
            done,
            decision.message,
        )
        if plan is None or not decision.pause:
            await self._set_chunk_end(obj, job, decision.until)
            if decision.until is not None:
                wake_at(self.queue, job, decision.until, now)
            return
        # The planned checkpoint: the gang saves on SIGTERM, reports it, and waits Deferred.
        paused = pausing_at_chunk_end(status, plan, decision.message, done)
        checkpoint = job.spec.checkpoint
        grace = pause_grace_seconds(checkpoint.cost_seconds if checkpoint else None)
        pods = self.inventory.pods_of_job(job.metadata["namespace"], job.metadata["name"])
        events = (("Normal", CHUNK_ENDED, f"checkpointing the gang; {decision.message}"),)
        step = Step(Verb.NOTHING, Phase.CHECKPOINTING, CHUNK_ENDED, decision.message, events=events)
        # The status first, as for a preemption: ended before the deletes, the operator leaves a
        # job Checkpointing whose live workers the next one stops, and pauses as planned.
        await self.reconciler.carry_out(obj, job, paused, step, pods, now=now)
        await all_done(*(self.kube.delete_pod(p.namespace, p.name, grace) for p in pods if not p.terminating))
        await self.writer.drop_chunk_end(job)

    async def _set_chunk_end(self, obj: dict[str, Any], job: TrainingJob, end: datetime | None) -> None:
        await self._write_chunk_end(obj, job, with_chunk_end(job.status, end))

    async def _write_chunk_end(self, obj: dict[str, Any], job: TrainingJob, status: TrainingJobStatus) -> None:
        """STATUS written, its chunk end included: a chunk end it no longer has is dropped explicitly."""
        await self.writer.write(obj, job, status)
        if status.chunk_end is None:
            await self.writer.drop_chunk_end(job)

    async def account_emissions(self, now: datetime) -> None:
        """Add each running gang's emissions since its last period: GPU power x grid intensity seen."""
        if self.carbon is None:
            return
        intensities: dict[str, float | None] = {}
        running: set[JobKey] = set()
        for key, obj, job in self.store.running():
            started = job.status.start_time
            if started is None:
                continue
            running.add(key)
            if self.guard.sits_out(EMISSIONS, key):
                continue
            with self.guard.isolated(EMISSIONS, key):
                await self._account_job_emissions(
                    self.carbon, key, obj, job, started=started, now=now, intensities=intensities
                )
        for gone in self._emissions_marks.keys() - running:  # a gang that stopped starts its count again
            del self._emissions_marks[gone]

    async def _account_job_emissions(
        self,
        carbon: CachedCarbonSource,
        key: JobKey,
        obj: dict[str, Any],
        job: TrainingJob,
        *,
        started: datetime,
        now: datetime,
        intensities: dict[str, float | None],
    ) -> None:
        """JOB's emissions since its mark; INTENSITIES holds each region's, asked for once a pass."""
        period = timedelta(seconds=self.settings.carbon.emissions_period_seconds)
        since = self._emissions_marks.setdefault(key, max(started, now - period))
        if now - since < period:
            return
        region = job.spec.carbon.region or self.settings.carbon.region
        if region not in intensities:
            try:
                intensities[region] = (await carbon.current(region)).grams_per_kwh
                self.metrics.carbon.record_grid_intensity(region, intensities[region] or 0.0)
            except CarbonSourceError as error:
                log.warning("no carbon intensity for %s: %s", region, error)
                intensities[region] = None
        intensity = intensities[region]
        if intensity is None:
            return
        joules = await self._measured_energy(job, since, now)
        if joules is None:
            watts = self.settings.carbon.power_per_gpu(job.spec.gpu_type) * (job.status.gpus or 0)
            joules = watts * (now - since).total_seconds()
        grams = grams_from_joules(joules, intensity)
        self._emissions_marks[key] = now
        self.metrics.carbon.record_carbon("TrainingJob", emitted_grams=grams)
        await self.writer.write(obj, job, with_emissions(job.status, grams))

    async def _measured_energy(self, job: TrainingJob, start: datetime, end: datetime) -> float | None:
        """Joules the job's GPUs used over [start, end) as DCGM measured them; None without a measurement."""
        if self.energy is None:
            return None
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        pods = [p.name for p in self.inventory.pods_of_job(namespace, name)]
        try:
            return await self.energy.joules(namespace, pods, start, end)
        except PrometheusError as error:
            log.warning("no DCGM energy for %s/%s: %s; estimating from GPU power", namespace, name, error)
            return None
