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
from collections.abc import Callable
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
from aisched.policy.carbon import plan_start
from aisched.policy.cluster import ClusterSnapshot, Toleration
from aisched.policy.interruptions import InterruptionPrior
from aisched.policy.lifecycle import HOLDS_GPUS, Observation, Step, Verb, Worker, WorkerPhase, next_step
from aisched.policy.placement import GangRequest, place_gang
from aisched.policy.placement import Placement as PlacementDecision
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import JobRequest, ScheduleResult, schedule
from aisched.policy.spot import CapacityChoice, CapacityDecision, choose_capacity, optimal_checkpoint_interval
from aisched.settings import Settings
from aisched.sources.carbon import CachedCarbonSource, CarbonSourceError
from aisched.workload.contract import parse_checkpoint_report

log = logging.getLogger(__name__)
Phase = TrainingJobPhase
JobKey = tuple[str, str]
PLURAL = "trainingjobs"
DEADLINE_NEEDS_ON_DEMAND = "DeadlineNeedsOnDemand"
EMISSIONS_PERIOD = timedelta(minutes=1)  # how often running gangs' emissions are added up
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
    _emissions_marks: dict[JobKey, datetime] = field(default_factory=dict)
    clock: Callable[[], datetime] = utc_now
    pools: PoolTracker = field(init=False)
    jobs: dict[JobKey, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    _dirty: set[JobKey] = field(default_factory=set)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

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
        self.metrics.forget_job(namespace, name)
        self._wake.set()  # its GPUs are free for whoever waits

    def queue_seen(self, obj: dict[str, Any]) -> None:
        self.queues[obj["metadata"]["name"]] = obj
        self._wake.set()

    def queue_gone(self, name: str) -> None:
        self.queues.pop(name, None)

    def pod_changed(self, record: PodRecord | None) -> None:
        if record is not None and record.job_key and record.labels.get(labels.JOB_KIND) == "TrainingJob":
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
        for key in sorted(dirty):
            started = time.perf_counter()
            try:
                await self.reconcile(key)
            except Exception:
                log.exception("reconciling TrainingJob %s/%s failed; will retry", *key)
                self._dirty.add(key)
                self.metrics.record_reconcile("TrainingJob", time.perf_counter() - started, failed=True)
            else:
                self.metrics.record_reconcile("TrainingJob", time.perf_counter() - started)
        try:
            await self.schedule()
        except Exception:
            log.exception("scheduling cycle failed; will retry")
        try:
            await self._account_emissions(self.clock())
        except Exception:
            log.exception("estimating emissions failed; will retry")
        self._report()

    async def reconcile(self, key: JobKey) -> None:
        obj = self.jobs.get(key)
        if obj is None:
            return
        job = _parse(obj)
        if job is None:
            return
        now = self.clock()
        status = job.status
        if status.phase is None:
            await self._write_status(obj, job, _queued(job, "Submitted", "waiting for placement", now))
            return
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
        status = _record_checkpoints(status, current)
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
            await self.kube.post_event(obj, event_type, reason, message)
        updated = _apply_step(job, status, step, now)
        self._count_step(job, status, updated, step)
        await self._write_status(obj, job, updated)
        if step.requeue_after is not None:
            asyncio.get_running_loop().call_later(step.requeue_after.total_seconds(), self.mark, (namespace, name))

    def _count_step(self, job: TrainingJob, before: TrainingJobStatus, after: TrainingJobStatus, step: Step) -> None:
        if after.last_checkpoint != job.status.last_checkpoint and after.last_checkpoint is not None:
            self.metrics.record_checkpoint("Interruption" if before.phase == Phase.CHECKPOINTING else "Periodic")
        capacity = str(before.placement.capacity_type) if before.placement and before.placement.capacity_type else None
        if step.count_interruption:
            lost = (after.lost_work_seconds or 0.0) - (before.lost_work_seconds or 0.0)
            signal = "NodeLost" if step.reason == "WorkerLost" else "NodeTaint"
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
            job = _parse(obj)
            if job is None or job.status.phase is None:
                continue
            phase = str(job.status.phase)
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
        await self.kube.create(build_headless_service(job))
        to_create = [build_worker_pod(job, launch, slot) for slot in launch.slots]
        await asyncio.gather(*(self.kube.create(pod) for pod in to_create if pod["metadata"]["name"] not in existing))

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
            job = _parse(obj)
            if job is None:
                continue
            key = f"{job.metadata['namespace']}/{job.metadata['name']}"
            phase = job.status.phase
            if phase in (Phase.QUEUED, Phase.DEFERRED) and not job.spec.suspend:
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
            await self._launch(obj, job, admission.placement, now, "Admitted", message, decision)
        for waiting in result.waiting:
            obj, job = parsed[waiting.key]
            self.metrics.record_placement(elapsed, placed=False)
            if job.status.reason != waiting.reason:
                await self.kube.post_event(obj, "Normal", waiting.reason, waiting.message)
            await self._write_status(obj, job, _queued(job, waiting.reason, waiting.message, now))
        await self._report_queues(result)

    async def _account_emissions(self, now: datetime) -> None:
        """Add each running gang's emissions since the last minute: GPU power x grid intensity seen."""
        if self.carbon is None:
            return
        intensities: dict[str, float | None] = {}
        for key, obj in list(self.jobs.items()):
            job = _parse(obj)
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
            watts = self.settings.carbon.power_per_gpu(job.spec.gpu_type) * (job.status.gpus or 0)
            grams = watts * (now - since).total_seconds() / 3.6e6 * intensity
            self._emissions_marks[key] = now
            self.metrics.record_carbon("TrainingJob", emitted_grams=grams)
            status = job.status.model_copy(deep=True)
            status.estimated_emissions_grams = round((status.estimated_emissions_grams or 0.0) + grams, 1)
            await self._write_status(obj, job, status)

    async def _defer(self, obj: dict[str, Any], job: TrainingJob, now: datetime) -> bool:
        """Hold a deferrable job in Deferred until its planned start; True while it waits.

        Re-planned on every cycle, so a newer forecast moves the start. With no forecast the
        plan is "now", and every plan starts no later than the latest start meeting the deadline.
        """
        spec = job.spec
        annotations = job.metadata.get("annotations") or {}
        if not spec.carbon.deferrable or job.status.start_time is not None:
            return False
        if annotations.get(labels.START_NOW, "").lower() == "true":
            if job.status.phase == Phase.DEFERRED:
                await self.kube.post_event(obj, "Normal", "StartNow", f"{labels.START_NOW} set: starting now")
            return False
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
        plan = plan_start(
            forecast,
            now,
            timedelta(seconds=spec.expected_duration_seconds or 0),
            power_w=self.settings.carbon.power_per_gpu(spec.gpu_type) * spec.total_gpus,
            deadline=spec.deadline,
            max_delay=timedelta(seconds=spec.carbon.max_delay_seconds) if spec.carbon.max_delay_seconds else None,
            submitted_at=datetime.fromisoformat(created) if isinstance(created, str) else now,
            threshold_grams_per_kwh=spec.carbon.threshold_grams_per_kwh if spec.carbon.mode == "Threshold" else None,
            min_saving_fraction=self.settings.carbon.min_saving_fraction,
            forecast_error=self.settings.carbon.forecast_error,
        )
        if not plan.is_deferred(now):
            if job.status.phase == Phase.DEFERRED:
                saved = job.status.deferral.expected_saving_grams if job.status.deferral else None
                self.metrics.record_carbon("TrainingJob", emitted_grams=0.0, avoided_grams=max(0.0, saved or 0.0))
                await self._write_status(obj, job, _queued(job, str(plan.reason), plan.message, now))
            return False
        status = _queued(job, str(plan.reason), plan.message, now)
        status.phase = Phase.DEFERRED
        status.deferral = Deferral(
            until=plan.start,
            reason=plan.message,
            forecast_grams_per_kwh=plan.intensity_at_start,
            expected_saving_percent=plan.saving_percent,
            expected_saving_grams=plan.saving_grams,
        )
        if job.status.phase != Phase.DEFERRED:
            self.metrics.record_deferral(str(spec.carbon.mode))
            await self.kube.post_event(
                obj, "Normal", "Deferred", f"start deferred to {plan.start:%Y-%m-%d %H:%M} UTC: {plan.message}"
            )
        await self._write_status(obj, job, status)
        key = (job.metadata["namespace"], job.metadata["name"])
        asyncio.get_running_loop().call_later(max(1.0, (plan.start - now).total_seconds()), self.mark, key)
        return True

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
        status.placement = placement.to_status()
        status.gang_generation = (status.gang_generation or 0) + 1
        status.replicas = placement.replicas
        status.gpus = placement.total_gpus
        status.selector = labels.job_selector("TrainingJob", name)
        status.checkpoint_interval_seconds = self._checkpoint_interval(job, placement.nodes)
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
        await self._write_status(obj, job, status)
        await self.kube.post_event(obj, "Normal", reason, message)
        self.mark((namespace, name))

    async def _stop_gang(self, obj: dict[str, Any], job: TrainingJob, now: datetime, reason: str, message: str) -> None:
        """Preempted: the whole gang goes (checkpointing on SIGTERM) and the job waits again."""
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        pods = [p for p in self.inventory.pods_of_job(namespace, name) if not p.terminating]
        await asyncio.gather(*(self.kube.delete_pod(p.namespace, p.name, self._checkpoint_grace(job)) for p in pods))
        await self.kube.post_event(obj, "Warning", reason, message)
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

    def _checkpoint_interval(self, job: TrainingJob, nodes: tuple[str, ...]) -> int | None:
        checkpoint = job.spec.checkpoint
        if checkpoint is None:
            return None
        if checkpoint.interval_seconds is not None:
            return checkpoint.interval_seconds
        # A gang stops when any of its nodes goes: the rates of its nodes add up.
        rate = sum(self.pools.rate_per_second(self.inventory.nodes[n]) for n in nodes if n in self.inventory.nodes)
        return round(optimal_checkpoint_interval(checkpoint.cost_seconds, rate))

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
            job = _parse(obj)
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
    reports = [parse_checkpoint_report(p.termination_message) for p in pods if p.termination_message]
    steps = [r for r in reports if r is not None]
    if not steps:
        return status
    oldest = min(steps, key=lambda r: r.step)  # a rank that saved less decides the resume point
    last = status.last_checkpoint
    if last is not None and last.step >= oldest.step:
        return status
    updated = status.model_copy(deep=True)
    updated.last_checkpoint = CheckpointRecord(step=oldest.step, path=oldest.path, time=oldest.time)
    return updated


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
        since = updated.last_checkpoint.time if updated.last_checkpoint else updated.start_time
        if since is not None:
            updated.lost_work_seconds = (updated.lost_work_seconds or 0.0) + max(0.0, (now - since).total_seconds())
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
