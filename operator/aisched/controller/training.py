"""The TrainingJob reconcile loop: one writer for every TrainingJob.

Watch handlers (handlers.py) only record what they see and mark jobs dirty.
This loop wakes on those marks (and on a periodic resync), and for each dirty
job observes its pods, asks `policy.lifecycle.next_step` what to do, and does
it; then it hands the waiting jobs to the scheduler. All state lives in the
objects (job status, pod labels), so a restarted operator picks up where the
last one stopped, and every write is idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from aisched.api import CapacityType, ConditionStatus, Queue, SpotPolicy, TrainingJob, TrainingJobPhase
from aisched.api.common import set_condition
from aisched.api.training_job import CheckpointRecord, Deferral, TrainingJobStatus
from aisched.kube import labels
from aisched.kube.builders import GangLaunch, WorkerSlot, build_headless_service, build_worker_pod
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory, PodRecord
from aisched.kube.pools import PoolTracker
from aisched.metrics import GpuPoolUsage, Metrics
from aisched.policy.carbon import CarbonPlan, plan_start
from aisched.policy.chunks import (
    CHUNK_ENDED,
    PAUSED_BETWEEN_CHUNKS,
    at_chunk_end,
    current_chunk_end,
    pause_grace_seconds,
    work_in_chunk,
    work_left,
)
from aisched.policy.cluster import ClusterSnapshot, Toleration
from aisched.policy.interruptions import InterruptionPrior
from aisched.policy.lifecycle import HOLDS_GPUS, Observation, Step, Verb, Worker, WorkerPhase, next_step
from aisched.policy.placement import GangRequest, place_gang
from aisched.policy.placement import Placement as PlacementDecision
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import JobRequest, ScheduleResult, schedule
from aisched.policy.spot import (
    CapacityChoice,
    CapacityDecision,
    choose_capacity,
    lost_work_seconds,
    spot_checkpoint_interval,
)
from aisched.settings import Settings
from aisched.sources.carbon import CachedCarbonSource, CarbonSourceError
from aisched.sources.energy import GpuEnergySource
from aisched.sources.prometheus import PrometheusError
from aisched.workload.contract import parse_checkpoint_report

log = logging.getLogger(__name__)
Phase = TrainingJobPhase
JobKey = tuple[str, str]
PLURAL = "trainingjobs"
DEADLINE_NEEDS_ON_DEMAND = "DeadlineNeedsOnDemand"
# Jobs reconciled at once; a little under the API client's threads, leaving some to the serving loop.
CONCURRENT_RECONCILES = 24
EMISSIONS_PERIOD = timedelta(minutes=1)  # how often running gangs' emissions are added up
# How often the per-job and cluster gauges are refreshed: a pass over every job, well
# under Prometheus' scrape interval, and not once per cycle when hundreds of jobs arrive.
REPORT_PERIOD = timedelta(seconds=5)
# Settings' provider names -> the source label values of aisched_carbon_source_errors_total.
CARBON_SOURCE_NAMES = {
    "electricitymaps": "ElectricityMaps",
    "watttime": "WattTime",
    "nationalgrid": "NationalGrid",
    "prometheus": "Prometheus",
    "file": "File",
    "none": "File",
}


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class TrainingJobController:
    settings: Settings
    kube: KubeClient
    inventory: Inventory
    metrics: Metrics = field(default_factory=lambda: Metrics(CollectorRegistry(), process_metrics=False))
    carbon: CachedCarbonSource | None = None
    energy: GpuEnergySource | None = None  # DCGM's energy counters, where Prometheus has them
    _emissions_marks: dict[JobKey, datetime] = field(default_factory=dict)
    clock: Callable[[], datetime] = utc_now
    pools: PoolTracker = field(init=False)
    jobs: dict[JobKey, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    _dirty: set[JobKey] = field(default_factory=set)
    # Workers deleted right after they stopped: their checkpoint reports outlive the pods.
    _departed: dict[JobKey, dict[str, PodRecord]] = field(default_factory=dict)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    # Each cycle reads every job several times; an object is parsed once, until the next watch event replaces it.
    _parsed: dict[JobKey, tuple[dict[str, Any], TrainingJob | None]] = field(default_factory=dict)
    _reported_at: datetime | None = None

    def __post_init__(self) -> None:
        self.pools = PoolTracker(
            InterruptionPrior.per_hour(
                self.settings.spot_prior_interruptions_per_hour, self.settings.spot_prior_weight_hours
            )
        )

    # -- fed by the watch handlers ------------------------------------------

    def job_seen(self, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.jobs[key] = obj
        self.mark(key)

    def job_gone(self, namespace: str, name: str) -> None:
        self.jobs.pop((namespace, name), None)
        self._parsed.pop((namespace, name), None)
        self._departed.pop((namespace, name), None)
        self.metrics.forget_job(namespace, name)
        self._wake.set()  # its GPUs are free for whoever waits

    def queue_seen(self, obj: dict[str, Any]) -> None:
        self.queues[obj["metadata"]["name"]] = obj
        self._wake.set()

    def queue_gone(self, name: str) -> None:
        self.queues.pop(name, None)

    def pod_changed(self, record: PodRecord | None) -> None:
        if record is not None and record.job_key and record.labels.get(labels.JOB_KIND) == "TrainingJob":
            if record.termination_message and (record.namespace, record.name) not in self.inventory.pods:
                self._departed.setdefault(record.job_key, {})[record.name] = record
            self.mark(record.job_key)
        else:
            self._wake.set()  # someone else's pod came or went: GPUs changed

    def nodes_changed(self) -> None:
        # An interruption taint or NotReady affects every job on the node.
        self._dirty.update(self.jobs)
        self._wake.set()

    def mark(self, key: JobKey) -> None:
        self._dirty.add(key)
        self._wake.set()

    # -- the loop -----------------------------------------------------------

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.resync_seconds)
            except TimeoutError:
                self._dirty.update(self.jobs)  # periodic resync: timers (TTL, deadlines) fire here
            self._wake.clear()
            await self.reconcile_once()

    async def reconcile_once(self) -> None:
        self.pools.tick(self.clock(), self.inventory.nodes)
        dirty, self._dirty = self._dirty, set()
        # Jobs are independent: their API round trips overlap, so hundreds of jobs
        # submitted at once do not wait for each other's writes.
        await _at_most(CONCURRENT_RECONCILES, [self._reconcile_counted(key) for key in sorted(dirty)])
        try:
            await self.schedule()
        except Exception:
            log.exception("scheduling cycle failed; will retry")
        try:
            await self._account_emissions(self.clock())
        except Exception:
            log.exception("estimating emissions failed; will retry")
        try:
            await self._end_chunks(self.clock())
        except Exception:
            log.exception("ending carbon chunks failed; will retry")
        now = self.clock()
        if self._reported_at is None or now - self._reported_at >= REPORT_PERIOD or not self._dirty:
            self._report()
            self._reported_at = now

    async def _reconcile_counted(self, key: JobKey) -> None:
        started = time.perf_counter()
        try:
            await self.reconcile(key)
        except Exception:
            log.exception("reconciling TrainingJob %s/%s failed; will retry", *key)
            self._dirty.add(key)
            self.metrics.record_reconcile("TrainingJob", time.perf_counter() - started, failed=True)
        else:
            self.metrics.record_reconcile("TrainingJob", time.perf_counter() - started)

    async def reconcile(self, key: JobKey) -> None:
        obj = self.jobs.get(key)
        if obj is None:
            return
        job = self._read(obj)
        if job is None:
            return
        now = self.clock()
        status = job.status
        generation = status.gang_generation or 0
        pods = self.inventory.pods_of_job(*key)
        current = [p for p in pods if p.labels.get(labels.GANG_GENERATION) == str(generation)]
        stale = tuple(p.name for p in pods if p not in current)
        placement_nodes = status.placement.nodes if status.placement else []
        gone = {n for n in placement_nodes if n not in self.inventory.nodes}
        disrupted = {p.node for p in current if p.disruption_target and p.node}
        seen = Observation(
            now=now,
            workers=tuple(_worker(p) for p in current if not (p.terminating and p.phase == "Pending")),
            stale_pods=stale,
            doomed_nodes=self.inventory.doomed_nodes() | frozenset(gone) | frozenset(disrupted),
        )
        # Departed first: a rank's live pod, when there is one, is its newer word.
        status = _record_checkpoints(status, self.departed_workers(key, generation) + current)
        step = next_step(job.spec, status, seen)
        await self._carry_out(obj, job, status, step, pods, now)

    async def _carry_out(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        status: TrainingJobStatus,
        step: Step,
        pods: list[PodRecord],
        now: datetime,
    ) -> None:
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        if step.verb == Verb.CREATE_WORKERS:
            await self._create_workers(obj, job, status, pods)
        elif step.verb == Verb.RELEASE_GATES:
            await asyncio.gather(*(self.kube.release_scheduling_gates(p.namespace, p.name) for p in pods if p.gated))
        elif step.verb == Verb.DELETE_WORKERS:
            grace = self._checkpoint_grace(job) if step.phase == Phase.CHECKPOINTING else None
            await asyncio.gather(*(self.kube.delete_pod(p.namespace, p.name, grace) for p in pods if not p.terminating))
        elif step.verb == Verb.DELETE_JOB:
            await self.kube.delete_custom(PLURAL, namespace, name)
            return
        for event_type, reason, message in step.events:
            self.kube.post_event(obj, event_type, reason, message)
        updated = _apply_step(job, status, step, now)
        self._count_step(job, status, updated, step)
        await self._write_status(obj, job, updated)
        if step.requeue_after is not None:
            asyncio.get_running_loop().call_later(step.requeue_after.total_seconds(), self.mark, (namespace, name))

    def _count_step(self, job: TrainingJob, before: TrainingJobStatus, after: TrainingJobStatus, step: Step) -> None:
        if after.last_checkpoint != job.status.last_checkpoint and after.last_checkpoint is not None:
            self.metrics.record_checkpoint(_checkpoint_reason(before))
        capacity = str(before.placement.capacity_type) if before.placement and before.placement.capacity_type else None
        if _interrupted_gang_stopped(before, step):
            lost = (after.lost_work_seconds or 0.0) - (before.lost_work_seconds or 0.0)
            signal = "NodeLost" if before.reason == "WorkerLost" else "NodeTaint"
            self.metrics.record_interruption(capacity or "OnDemand", signal, lost_seconds=lost, gpus=before.gpus or 0)
            self.metrics.record_gang_restart("Interruption")
        if step.count_restart:
            self.metrics.record_gang_restart("WorkerFailure")
        if step.finished and step.phase in (Phase.SUCCEEDED, Phase.FAILED):
            self.metrics.record_job_finished(job.spec.queue, str(step.phase))

    def _report(self) -> None:
        """Refresh the gauges that describe the whole cluster and every job."""
        census: dict[tuple[str, str], int] = {}
        gangs_by_level: dict[str, int] = {}
        pending_sizes: list[int] = []
        for (namespace, name), obj in self.jobs.items():
            job = self._read(obj)
            if job is None:
                continue
            phase = str(job.status.phase or Phase.QUEUED)  # new jobs wait like queued ones
            census[(job.spec.queue, phase)] = census.get((job.spec.queue, phase), 0) + 1
            if phase == Phase.QUEUED:
                pending_sizes.append(job.spec.gpus_per_replica)
                self.metrics.record_job_pending(namespace, name, job.spec.queue, job.status.queued_time or self.clock())
            if phase == Phase.RUNNING and job.status.placement:
                level = str(job.status.placement.level or "Cluster")
                gangs_by_level[level] = gangs_by_level.get(level, 0) + 1
            if job.spec.deadline is not None and phase not in (Phase.SUCCEEDED, Phase.FAILED):
                remaining = float(job.spec.expected_duration_seconds or 0)
                self.metrics.record_deadline_slack(
                    namespace, name, (job.spec.deadline - self.clock()).total_seconds() - remaining
                )
            pods = [p.name for p in self.inventory.pods_of_job(namespace, name)]
            self.metrics.record_job_pods(namespace, name, "TrainingJob", pods)
        self.metrics.record_jobs(census)
        self.metrics.record_running_gangs(gangs_by_level)
        self.metrics.record_gpu_pools(_gpu_pools(self.cluster_snapshot(), min(pending_sizes, default=None)))

    def _read(self, obj: dict[str, Any]) -> TrainingJob | None:
        """OBJ as a model; the models are shared, so callers copy before they change one."""
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        cached = self._parsed.get(key)
        if cached is not None and cached[0] is obj:
            return cached[1]
        job = _parse(obj)
        self._parsed[key] = (obj, job)
        return job

    def departed_workers(self, key: JobKey, generation: int) -> list[PodRecord]:
        """Workers of gang GENERATION already deleted that left a termination message; older ones are dropped."""
        departed = self._departed.get(key, {})
        for name in [n for n, p in departed.items() if p.labels.get(labels.GANG_GENERATION) != str(generation)]:
            del departed[name]
        return list(departed.values())

    def _checkpoint_grace(self, job: TrainingJob) -> int:
        # Workers get the whole notice window minus a margin for the pod to be torn down.
        margin = 10
        return max(5, self.settings.spot_notice_seconds - margin)

    async def _create_workers(
        self, obj: dict[str, Any], job: TrainingJob, status: TrainingJobStatus, pods: list[PodRecord]
    ) -> None:
        placement = status.placement
        if placement is None or not placement.nodes:
            return
        generation = status.gang_generation or 0
        existing = {p.name for p in pods}
        last = status.last_checkpoint
        launch = GangLaunch(
            generation=generation,
            world_size=len(placement.nodes),
            slots=tuple(WorkerSlot(rank, node) for rank, node in enumerate(placement.nodes)),
            gpu_resource=self.settings.gpu_resource,
            checkpoint_interval_seconds=status.checkpoint_interval_seconds,
            resume_step=last.step if last else None,
            resume_path=last.path if last else None,
            termination_grace_seconds=(self._checkpoint_grace(job) if placement.capacity_type == "Spot" else None),
        )
        to_create = [build_worker_pod(job, launch, slot) for slot in launch.slots]
        # Only a gang needs the Service to rendezvous; a lone worker is its own master.
        service = [self.kube.create(build_headless_service(job))] if launch.world_size > 1 else []
        await asyncio.gather(
            *service, *(self.kube.create(pod) for pod in to_create if pod["metadata"]["name"] not in existing)
        )
        # Every pod of the gang exists now (a failed create raised above): hand them to
        # kube-scheduler together, without a round trip through the watch first.
        namespace = job.metadata["namespace"]
        await asyncio.gather(
            *(
                self.kube.release_scheduling_gates(namespace, pod["metadata"]["name"])
                for pod in to_create
                if pod["spec"].get("schedulingGates")
            )
        )

    async def _write_status(self, obj: dict[str, Any], job: TrainingJob, status: TrainingJobStatus) -> None:
        if status == job.status:
            return
        wire = status.to_wire()
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        await self.kube.patch_status(PLURAL, namespace, name, wire)
        # Keep our copy current so the next pass does not act on stale status.
        obj = {**obj, "status": wire}
        self.jobs[(namespace, name)] = obj

    # -- scheduling ---------------------------------------------------------

    async def schedule(self) -> None:
        """One scheduling cycle: admit, keep waiting, preempt and resize, as the scheduler decides."""
        now = self.clock()
        snapshot = self.cluster_snapshot()
        doomed = self.inventory.doomed_nodes()
        parsed: dict[str, tuple[dict[str, Any], TrainingJob]] = {}
        requests: list[JobRequest] = []
        capacity_of: dict[str, CapacityDecision] = {}
        for obj in self.jobs.values():
            job = self._read(obj)
            if job is None:
                continue
            key = f"{job.metadata['namespace']}/{job.metadata['name']}"
            phase = job.status.phase
            # A new job (no phase yet) is first written Queued only if this cycle cannot place it.
            if phase in (None, Phase.QUEUED, Phase.DEFERRED) and not job.spec.suspend:
                if await self._defer(obj, job, now):
                    continue
                capacity = self._choose_capacity(job, snapshot, doomed, now)
                if capacity.choice == CapacityChoice.WAIT:
                    await self._write_status(obj, job, _queued(job, capacity.reason, capacity.message, now))
                    continue
                capacity_of[key] = capacity
                spot = capacity.choice == CapacityChoice.SPOT
                types = (CapacityType.SPOT,) if spot else (CapacityType.ON_DEMAND,)
                requests.append(JobRequest.from_training_job(job, capacity_types=types, excluded_nodes=doomed))
            elif phase in (Phase.PLACING, Phase.RUNNING) and job.status.placement and job.status.placement.nodes:
                placement = PlacementDecision.of_nodes(job.status.placement.nodes, job.spec.gpus_per_replica, snapshot)
                types = (placement.capacity_type,) if placement.capacity_type else (CapacityType.ON_DEMAND,)
                requests.append(
                    JobRequest.from_training_job(job, capacity_types=types, placement=placement, excluded_nodes=doomed)
                )
            else:
                continue
            parsed[key] = (obj, job)
        queues = [QueueQuota.from_queue(Queue.model_validate(q)) for q in self.queues.values()]
        started = time.perf_counter()
        result = schedule(snapshot, requests, queues, now)
        elapsed = time.perf_counter() - started
        for preemption in result.preempted:
            obj, job = parsed[preemption.key]
            await self._stop_gang(obj, job, now, preemption.reason, preemption.message)
            self.metrics.record_preemption(job.spec.queue)
            self.metrics.record_gang_restart("Preemption")
        for resize in result.resized:
            obj, job = parsed[resize.key]
            await self._launch(obj, job, resize.placement, now, resize.reason, resize.message, None)
            self.metrics.record_gang_restart("Resize")
        launches: list[Coroutine[Any, Any, None]] = []
        for admission in result.admitted:
            obj, job = parsed[admission.key]
            self.metrics.record_placement(elapsed, placed=True)
            waited = (now - job.status.queued_time).total_seconds() if job.status.queued_time else 0.0
            self.metrics.record_job_admitted(job.metadata["namespace"], job.metadata["name"], job.spec.queue, waited)
            decision = capacity_of.get(admission.key)
            if decision is not None and decision.pinned_on_demand and not _was_pinned(job):
                self.metrics.record_on_demand_fallback()
            message = f"placed in {admission.placement.to_status().domain or 'the cluster'}"
            if admission.preempting:
                message += f" after preempting {', '.join(admission.preempting)}"
            launches.append(self._launch(obj, job, admission.placement, now, "Admitted", message, decision))
        # Admitted gangs never share nodes, so their launches overlap like reconciles do.
        await _at_most(CONCURRENT_RECONCILES, launches)
        for waiting in result.waiting:
            obj, job = parsed[waiting.key]
            self.metrics.record_placement(elapsed, placed=False)
            if job.status.reason != waiting.reason:
                self.kube.post_event(obj, "Normal", waiting.reason, waiting.message)
            await self._write_status(obj, job, _queued(job, waiting.reason, waiting.message, now))
        await self._report_queues(result)

    async def _account_emissions(self, now: datetime) -> None:
        """Add each running gang's emissions since the last minute: GPU power x grid intensity seen."""
        if self.carbon is None:
            return
        intensities: dict[str, float | None] = {}
        for key, obj in list(self.jobs.items()):
            job = self._read(obj)
            if job is None or job.status.phase != Phase.RUNNING or job.status.start_time is None:
                self._emissions_marks.pop(key, None)
                continue
            since = self._emissions_marks.setdefault(key, max(job.status.start_time, now - EMISSIONS_PERIOD))
            if now - since < EMISSIONS_PERIOD:
                continue
            region = job.spec.carbon.region or self.settings.carbon.region
            if region not in intensities:
                try:
                    intensities[region] = (await self.carbon.current(region)).grams_per_kwh
                    self.metrics.record_grid_intensity(region, intensities[region] or 0.0)
                except CarbonSourceError as error:
                    log.warning("no carbon intensity for %s: %s", region, error)
                    intensities[region] = None
            intensity = intensities[region]
            if intensity is None:
                continue
            joules = await self._measured_energy(job, since, now)
            if joules is None:
                watts = self.settings.carbon.power_per_gpu(job.spec.gpu_type) * (job.status.gpus or 0)
                joules = watts * (now - since).total_seconds()
            grams = joules / 3.6e6 * intensity
            self._emissions_marks[key] = now
            self.metrics.record_carbon("TrainingJob", emitted_grams=grams)
            status = job.status.model_copy(deep=True)
            status.estimated_emissions_grams = round((status.estimated_emissions_grams or 0.0) + grams, 1)
            await self._write_status(obj, job, status)

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

    async def _defer(self, obj: dict[str, Any], job: TrainingJob, now: datetime) -> bool:
        """Hold a deferrable job in Deferred until its planned start; True while it waits.

        Re-planned on every cycle, so a newer forecast moves the start. With no forecast the
        plan is "now", and every plan starts no later than the latest start meeting the deadline.
        A job paused between carbon chunks is planned the same way for the work it has left.
        """
        spec, status = job.spec, job.status
        paused = status.chunk_work_done_seconds is not None
        if not spec.carbon.deferrable or (status.start_time is not None and not paused):
            return False
        if _start_now_requested(job):
            if status.phase == Phase.DEFERRED:
                self.kube.post_event(obj, "Normal", "StartNow", f"{labels.START_NOW} set: starting now")
            return False
        work = work_left(timedelta(seconds=spec.expected_duration_seconds or 0), status.chunk_work_done_seconds)
        if work is None:
            return False
        plan = await self._carbon_plan(job, now, work, paused=paused)
        if not plan.is_deferred(now):
            await self._start_chunk(obj, job, plan, now, first=not paused)
            return False
        updated = _queued(job, str(plan.reason), plan.message, now)
        updated.phase = Phase.DEFERRED
        updated.deferral = _deferral(plan, at_chunk_end(plan, now).message if paused else plan.message)
        if paused:
            updated.reason, updated.message = PAUSED_BETWEEN_CHUNKS, updated.deferral.reason
        if status.phase != Phase.DEFERRED:
            self.metrics.record_deferral(str(spec.carbon.mode))
            self.kube.post_event(
                obj, "Normal", "Deferred", f"start deferred to {plan.start:%Y-%m-%d %H:%M} UTC: {plan.message}"
            )
        await self._write_status(obj, job, updated)
        self._wake_at(job, plan.start, now)
        return True

    async def _start_chunk(
        self, obj: dict[str, Any], job: TrainingJob, plan: CarbonPlan, now: datetime, *, first: bool
    ) -> None:
        """A planned start (or resume) has come: queue the job, with the end of the chunk it runs in."""
        status = job.status
        chunk_end = current_chunk_end(plan, now) if job.spec.carbon.interruptible else None
        if status.phase == Phase.DEFERRED:
            if first:  # the saving a chunked job expects is counted once, at its first start
                saved = status.deferral.expected_saving_grams if status.deferral else None
                self.metrics.record_carbon("TrainingJob", emitted_grams=0.0, avoided_grams=max(0.0, saved or 0.0))
            updated = _queued(job, str(plan.reason), plan.message, now)
        elif chunk_end != status.chunk_end:
            updated = status.model_copy(deep=True)  # keep the scheduler's reason for the wait
        else:
            return
        updated.chunk_end = chunk_end
        await self._write_status(obj, job, updated)
        if chunk_end is None:
            await self._drop_chunk_end(job)
        else:
            self._wake_at(job, chunk_end, now)

    async def _carbon_plan(
        self, job: TrainingJob, now: datetime, work: timedelta, *, running: bool = False, paused: bool = False
    ) -> CarbonPlan:
        """Plan the work left against the current forecast (none when the source fails: start in time)."""
        spec = job.spec
        region = spec.carbon.region or self.settings.carbon.region
        forecast = None
        if self.carbon is not None:
            horizon = timedelta(seconds=self.settings.carbon.forecast_horizon_seconds)
            try:
                forecast = await self.carbon.forecast(region, now, now + horizon)
            except CarbonSourceError as error:
                log.warning("no carbon forecast for %s: %s; deferrable jobs start in time", region, error)
                self.metrics.record_carbon_source_error(CARBON_SOURCE_NAMES[self.settings.carbon.provider])
        created = job.metadata.get("creationTimestamp")
        return plan_start(
            forecast,
            now,
            work,
            power_w=self.settings.carbon.power_per_gpu(spec.gpu_type) * spec.total_gpus,
            deadline=spec.deadline,
            max_delay=timedelta(seconds=spec.carbon.max_delay_seconds) if spec.carbon.max_delay_seconds else None,
            submitted_at=datetime.fromisoformat(created) if isinstance(created, str) else now,
            interruptible=spec.carbon.interruptible,
            threshold_grams_per_kwh=spec.carbon.threshold_grams_per_kwh if spec.carbon.mode == "Threshold" else None,
            min_chunk=timedelta(seconds=self.settings.carbon.min_chunk_seconds),
            chunk_overhead=timedelta(seconds=self.settings.restart_overhead_seconds),
            min_saving_fraction=self.settings.carbon.min_saving_fraction,
            forecast_error=self.settings.carbon.forecast_error,
            running=running,
            paused=paused,
        )

    async def _end_chunks(self, now: datetime) -> None:
        """Running gangs whose carbon chunk is over: re-plan, then carry on or pause for the next chunk."""
        for obj in list(self.jobs.values()):
            job = self._read(obj)
            if job is None or job.status.phase != Phase.RUNNING or job.status.chunk_end is None:
                continue
            if not (job.spec.carbon.deferrable and job.spec.carbon.interruptible) or _start_now_requested(job):
                await self._set_chunk_end(obj, job, None)
            elif now >= job.status.chunk_end:
                await self._end_chunk(obj, job, now)

    async def _end_chunk(self, obj: dict[str, Any], job: TrainingJob, now: datetime) -> None:
        status = job.status.model_copy(deep=True)
        running = next((c for c in status.conditions if c.type == "Running" and c.status == "True"), None)
        done = (status.chunk_work_done_seconds or 0.0) + work_in_chunk(
            (running.last_transition_time if running else None) or now,
            now,
            resumed=status.chunk_work_done_seconds is not None,
            restore=timedelta(seconds=self.settings.restart_overhead_seconds),
        )
        work = work_left(timedelta(seconds=job.spec.expected_duration_seconds or 0), done)
        plan = await self._carbon_plan(job, now, work, running=True) if work is not None else None
        decision = at_chunk_end(plan, now)
        if plan is None or not decision.pause:
            await self._set_chunk_end(obj, job, decision.until)
            if decision.until is not None:
                self._wake_at(job, decision.until, now)
            return
        # The planned checkpoint: the gang saves on SIGTERM, reports it, and waits Deferred.
        status.chunk_end, status.chunk_work_done_seconds = None, round(done, 1)
        status.deferral = _deferral(plan, decision.message)
        checkpoint = job.spec.checkpoint
        grace = pause_grace_seconds(checkpoint.cost_seconds if checkpoint else None)
        pods = self.inventory.pods_of_job(job.metadata["namespace"], job.metadata["name"])
        await asyncio.gather(*(self.kube.delete_pod(p.namespace, p.name, grace) for p in pods if not p.terminating))
        events = (("Normal", CHUNK_ENDED, f"checkpointing the gang; {decision.message}"),)
        step = Step(Verb.NOTHING, Phase.CHECKPOINTING, CHUNK_ENDED, decision.message, events=events)
        await self._carry_out(obj, job, status, step, pods, now)
        await self._drop_chunk_end(job)

    async def _set_chunk_end(self, obj: dict[str, Any], job: TrainingJob, end: datetime | None) -> None:
        status = job.status.model_copy(deep=True)
        status.chunk_end = end
        await self._write_status(obj, job, status)
        if end is None:
            await self._drop_chunk_end(job)

    async def _drop_chunk_end(self, job: TrainingJob) -> None:
        """Status writes are merge patches, which drop a field only when told so with a null."""
        if job.status.chunk_end is not None:
            namespace, name = job.metadata["namespace"], job.metadata["name"]
            await self.kube.patch_status(PLURAL, namespace, name, {"chunkEnd": None})

    def _wake_at(self, job: TrainingJob, when: datetime, now: datetime) -> None:
        key = (job.metadata["namespace"], job.metadata["name"])
        asyncio.get_running_loop().call_later(max(1.0, (when - now).total_seconds()), self.mark, key)

    async def _launch(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        placement: PlacementDecision,
        now: datetime,
        reason: str,
        message: str,
        capacity: CapacityDecision | None,
    ) -> None:
        """Record a (new) placement as the gang's next generation; reconcile then creates its pods."""
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        generation = job.metadata.get("generation")
        running = [p for p in self.inventory.pods_of_job(namespace, name) if not p.terminating]
        await asyncio.gather(*(self.kube.delete_pod(p.namespace, p.name) for p in running))
        status = job.status.model_copy(deep=True)
        status.phase, status.reason, status.message = Phase.PLACING, reason, message
        status.observed_generation = generation
        status.queued_time = status.queued_time or now
        status.placement = placement.to_status()
        status.gang_generation = (status.gang_generation or 0) + 1
        status.replicas = placement.replicas
        status.gpus = placement.total_gpus
        status.selector = labels.job_selector("TrainingJob", name)
        status.checkpoint_interval_seconds = self._checkpoint_interval(job, placement.nodes, now)
        status.conditions = set_condition(
            status.conditions,
            "Admitted",
            ConditionStatus.TRUE,
            reason,
            f"{placement.replicas} x {job.spec.gpus_per_replica} GPUs on {', '.join(placement.nodes)}",
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
        self.kube.post_event(obj, "Normal", reason, message)
        await self._write_status(obj, job, status)
        # Create the gang now rather than on the next pass: that pass waits for every other job.
        await self._reconcile_counted((namespace, name))

    async def _stop_gang(self, obj: dict[str, Any], job: TrainingJob, now: datetime, reason: str, message: str) -> None:
        """Preempted: the whole gang goes (checkpointing on SIGTERM) and the job waits again."""
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        pods = [p for p in self.inventory.pods_of_job(namespace, name) if not p.terminating]
        await asyncio.gather(*(self.kube.delete_pod(p.namespace, p.name, self._checkpoint_grace(job)) for p in pods))
        self.kube.post_event(obj, "Warning", reason, message)
        status = _queued(job, reason, message, now)
        status.gpus = 0
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
        await self._write_status(obj, job, status)

    async def _report_queues(self, result: ScheduleResult) -> None:
        for name, usage in result.queues.items():
            obj = self.queues.get(name)
            if obj is None:
                continue
            queue = Queue.model_validate(obj)
            self.metrics.record_queue(
                name, nominal_gpus=queue.spec.nominal_gpus, used_gpus=usage.used_gpus, borrowed_gpus=usage.borrowed_gpus
            )
            status = queue.status.model_copy(deep=True)
            status.used_gpus, status.borrowed_gpus = usage.used_gpus, usage.borrowed_gpus
            status.admitted_jobs, status.pending_jobs = usage.admitted_jobs, usage.pending_jobs
            status.observed_generation = obj["metadata"].get("generation")
            if status != queue.status:
                await self.kube.patch_status("queues", None, name, status.to_wire())
                self.queues[name] = {**obj, "status": status.to_wire()}

    def _choose_capacity(
        self, job: TrainingJob, snapshot: ClusterSnapshot, doomed: frozenset[str], now: datetime
    ) -> CapacityDecision:
        spec = job.spec
        spot_fits = spec.spot.policy != SpotPolicy.NEVER and isinstance(
            place_gang(self._request(job, doomed, (CapacityType.SPOT,)), snapshot), PlacementDecision
        )
        capacity = next((c for c in job.status.conditions if c.type == "Capacity"), None)
        pinned = None
        if capacity is not None and capacity.reason == DEADLINE_NEEDS_ON_DEMAND:
            pinned = CapacityDecision(CapacityChoice.ON_DEMAND, capacity.reason, capacity.message, True)
        return choose_capacity(
            SpotPolicy(spec.spot.policy),
            now=now,
            deadline=spec.deadline,
            # Conservative: work done before an interruption is not credited, so
            # the switch to on-demand comes early rather than late.
            remaining_work_s=float(spec.expected_duration_seconds or 0),
            restart_overhead_s=self.settings.restart_overhead_seconds,
            spot_available=spot_fits,
            decision_period_s=self.settings.resync_seconds,
            previous=pinned,
        )

    def _checkpoint_interval(self, job: TrainingJob, nodes: tuple[str, ...], now: datetime) -> int | None:
        checkpoint = job.spec.checkpoint
        if checkpoint is None:
            return None
        if checkpoint.interval_seconds is not None:
            return checkpoint.interval_seconds
        # A gang stops when any of its nodes goes: the rates of its nodes add up.
        rate = sum(self.pools.rate_per_second(self.inventory.nodes[n]) for n in nodes if n in self.inventory.nodes)
        slack = None
        if job.spec.deadline is not None:
            slack = (
                (job.spec.deadline - now).total_seconds()
                - float(job.spec.expected_duration_seconds or 0)
                - self.settings.restart_overhead_seconds
                - self.settings.resync_seconds
            )
        interval = spot_checkpoint_interval(
            checkpoint.cost_seconds,
            rate,
            notice_s=self.settings.spot_notice_seconds,
            interruptions=job.status.interruptions or 0,
            saved_on_notice=min(job.status.saved_on_notice or 0, job.status.interruptions or 0),
            slack_s=slack,
        )
        return round(interval)

    def _request(
        self, job: TrainingJob, doomed: frozenset[str], capacity_types: tuple[CapacityType, ...]
    ) -> GangRequest:
        spec = job.spec
        tolerations = tuple(Toleration.from_dict(t) for t in (spec.template.get("spec") or {}).get("tolerations", []))
        return GangRequest(
            replicas=spec.replicas,
            gpus_per_replica=spec.gpus_per_replica,
            gpu_types=frozenset({spec.gpu_type}) if spec.gpu_type else None,
            required_level=spec.topology.required_level,
            preferred_level=spec.topology.preferred_level,
            tolerations=tolerations,
            capacity_types=capacity_types,
            excluded_nodes=doomed,
        )

    def cluster_snapshot(self) -> ClusterSnapshot:
        """The cluster as placement sees it, shared with the InferenceService controller."""
        reserved: dict[str, int] = {}
        for (namespace, name), obj in self.jobs.items():
            job = self._read(obj)
            if job is None or job.status.phase not in HOLDS_GPUS or job.status.placement is None:
                continue
            # Pods that exist hold their GPUs in the inventory (pinned by node selector even
            # while gated); ranks whose pods are not created yet hold them through the placement.
            created = {
                p.labels.get(labels.RANK)
                for p in self.inventory.pods_of_job(namespace, name)
                if p.labels.get(labels.GANG_GENERATION) == str(job.status.gang_generation)
            }
            for rank, node in enumerate(job.status.placement.nodes):
                if str(rank) not in created:
                    reserved[node] = reserved.get(node, 0) + job.spec.gpus_per_replica
        return self.inventory.snapshot(reserved)


def _start_now_requested(job: TrainingJob) -> bool:
    return str((job.metadata.get("annotations") or {}).get(labels.START_NOW, "")).lower() == "true"


def _deferral(plan: CarbonPlan, reason: str) -> Deferral:
    return Deferral(
        until=plan.start,
        reason=reason,
        forecast_grams_per_kwh=plan.intensity_at_start,
        expected_saving_percent=plan.saving_percent,
        expected_saving_grams=plan.saving_grams,
    )


def _checkpoint_reason(before: TrainingJobStatus) -> str:
    if before.phase != Phase.CHECKPOINTING:
        return "Periodic"
    return "Deferral" if before.reason == CHUNK_ENDED else "Interruption"


async def _at_most(limit: int, calls: list[Coroutine[Any, Any, None]]) -> None:
    """Await CALLS concurrently, at most LIMIT at a time."""
    slots = asyncio.Semaphore(limit)

    async def bounded(call: Coroutine[Any, Any, None]) -> None:
        async with slots:
            await call

    await asyncio.gather(*(bounded(call) for call in calls))


def _was_pinned(job: TrainingJob) -> bool:
    return any(c.type == "Capacity" and c.reason == DEADLINE_NEEDS_ON_DEMAND for c in job.status.conditions)


def _gpu_pools(snapshot: ClusterSnapshot, smallest_pending_replica: int | None) -> list[GpuPoolUsage]:
    """GPUs per (product, capacity type); fragmented = free GPUs on nodes too full for any waiting replica."""
    pools: dict[tuple[str, str], list[int]] = {}
    for node in snapshot.nodes():
        key = (node.gpu_product or "unknown", str(node.capacity_type))
        free = max(0, node.allocatable_gpus - node.used_gpus)
        stranded = free if smallest_pending_replica is not None and free < smallest_pending_replica else 0
        totals = pools.setdefault(key, [0, 0, 0, 0])
        for index, value in enumerate(
            (node.allocatable_gpus, min(node.used_gpus, node.allocatable_gpus), free, stranded)
        ):
            totals[index] += value
    return [GpuPoolUsage(product, capacity, *totals) for (product, capacity), totals in sorted(pools.items())]


def _parse(obj: dict[str, Any]) -> TrainingJob | None:
    try:
        return TrainingJob.model_validate(obj)
    except ValidationError as error:
        # The API server validated it; this means our model and the CRD differ.
        log.error("cannot read TrainingJob %s: %s", obj.get("metadata", {}).get("name"), error)
        return None


def _worker(pod: PodRecord) -> Worker:
    if pod.gated:
        phase = WorkerPhase.GATED
    else:
        phase = {
            "Running": WorkerPhase.RUNNING,
            "Succeeded": WorkerPhase.SUCCEEDED,
            "Failed": WorkerPhase.FAILED,
        }.get(pod.phase, WorkerPhase.PENDING)
    return Worker(
        name=pod.name,
        rank=int(pod.labels.get(labels.RANK, "0")),
        phase=phase,
        node=pod.node or None,
        terminating=pod.terminating,
        exit_code=pod.exit_code,
        termination_message=pod.termination_message,
        unschedulable_since=pod.unschedulable_since,
        unschedulable_message=pod.unschedulable_message,
    )


def _record_checkpoints(status: TrainingJobStatus, pods: list[PodRecord]) -> TrainingJobStatus:
    """The newest checkpoint every worker of the gang reported (the gang resumes where all saved)."""
    # Until every rank has reported, the ranks still saving may end at an older step.
    by_rank = {p.labels.get(labels.RANK): parse_checkpoint_report(p.termination_message) for p in pods}
    steps = [r for r in by_rank.values() if r is not None]
    if not steps or len(steps) < (status.replicas or 1):
        return status
    oldest = min(steps, key=lambda r: r.step)  # a rank that saved less decides the resume point
    last = status.last_checkpoint
    if last is not None and last.step >= oldest.step:
        return status
    updated = status.model_copy(deep=True)
    updated.last_checkpoint = CheckpointRecord(step=oldest.step, path=oldest.path, time=oldest.time)
    return updated


def _interrupted_gang_stopped(before: TrainingJobStatus, step: Step) -> bool:
    """Every worker of an interrupted gang is gone: the checkpoints they saved on the notice are in."""
    return before.phase == Phase.CHECKPOINTING and step.phase == Phase.QUEUED


def _saved_on_notice(status: TrainingJobStatus) -> bool:
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


def _queued(job: TrainingJob, reason: str, message: str, now: datetime) -> TrainingJobStatus:
    status = job.status.model_copy(deep=True)
    status.phase, status.reason, status.message = Phase.QUEUED, reason, message
    status.observed_generation = job.metadata.get("generation")
    status.queued_time = status.queued_time or now
    status.conditions = set_condition(
        status.conditions,
        "Admitted",
        ConditionStatus.FALSE,
        reason,
        message,
        now=now,
        generation=job.metadata.get("generation"),
    )
    return status


def _apply_step(job: TrainingJob, status: TrainingJobStatus, step: Step, now: datetime) -> TrainingJobStatus:
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
    if _interrupted_gang_stopped(status, step):
        updated.lost_work_seconds = (updated.lost_work_seconds or 0.0) + interruption_lost_work(status)
        if _saved_on_notice(status):
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
        updated.gpus = 0
    return updated
