"""The scheduling cycle's glue: waiting jobs to the scheduler, its decisions to the cluster.

The scheduler (`policy.scheduler`) decides who is admitted, preempted, resized or
keeps waiting; this layer builds its requests (capacity type, excluded nodes),
launches the admitted gangs, stops the preempted ones and writes why others wait.
Each job's part, from its request to its decision carried out, is guarded on its
own: a job the cycle cannot handle is set aside, and the cycle goes on without it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Coroutine, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from aisched.api import CapacityType, Queue, SpotPolicy, TrainingJob, TrainingJobPhase
from aisched.controller.in_flight import placement_fits
from aisched.controller.mig import waiting_instances
from aisched.controller.training.carbon import CarbonDeferral
from aisched.controller.training.isolation import CycleWrites, QueueRefusalError
from aisched.controller.training.reporting import Reporting
from aisched.controller.training.state import CONCURRENT_RECONCILES, finished
from aisched.kube import labels
from aisched.policy.cluster import ClusterSnapshot, Toleration
from aisched.policy.culprits import culprits
from aisched.policy.deadlines import deadline_slack_seconds
from aisched.policy.job_messages import admitted_message
from aisched.policy.job_status import placed, preempted, queued, waiting_write_due
from aisched.policy.level_refusals import level_refusal
from aisched.policy.lifecycle import HOLDS_GPUS
from aisched.policy.placement import INSUFFICIENT_GPUS, GangRequest, gang_fits, hold
from aisched.policy.placement import Placement as PlacementDecision
from aisched.policy.provisioning import ProvisioningPlan
from aisched.policy.queueing import QueueQuota, with_locked_default
from aisched.policy.refusals import refusal_retry_at
from aisched.policy.scheduler import JobRequest, ScheduleResult, schedule
from aisched.policy.scheduler.demand import pending_demand
from aisched.policy.scheduler.results import Admission
from aisched.policy.shared_room import ShareShape
from aisched.policy.spot import CapacityChoice, CapacityDecision, SpotJob, choose_capacity, spot_checkpoint_interval
from aisched.policy.topology import Level, Topology

log = logging.getLogger(__name__)
Phase = TrainingJobPhase
DEADLINE_NEEDS_ON_DEMAND = "DeadlineNeedsOnDemand"


class SchedulingCycle(CarbonDeferral, Reporting):
    async def schedule(self) -> None:
        """One scheduling cycle: admit, keep waiting, preempt and resize, as the scheduler decides.

        Each job is read into the cycle, and each decision carried out, inside its own guard:
        a job the cycle cannot handle is set aside (`isolation.py`) and every other job goes on.
        """
        now = self.clock()
        cycle_started, cpu_started = time.perf_counter(), time.thread_time()
        snapshot = self.cluster_snapshot()
        parsed, requests, capacity_of, writes = await self._requests(snapshot, now)
        started = time.perf_counter()
        result = await self._decide(snapshot, requests, parsed, now)
        self.queue_room = {name: usage.room_milli for name, usage in result.queues.items()}
        # MIG gangs left waiting for instances: an idle node may be repartitioned for them (controller/mig.py).
        short = (parsed[w.key][1].spec for w in result.waiting if w.key in parsed and w.reason == INSUFFICIENT_GPUS)
        self.shares.mig.asked(waiting_instances(short))
        elapsed = time.perf_counter() - started
        self.metrics.process.record_scheduling_cycle(
            time.perf_counter() - cycle_started, time.thread_time() - cpu_started
        )
        # Thousands of jobs may sit this cycle out with a status to write: the writes overlap, and
        # land before any decision is carried out (one job may be written again by its launch).
        # They wait on the API server, not on the decision, so they are not part of its time.
        await _at_most(CONCURRENT_RECONCILES, writes)
        await self._carry_out_cycle(result, parsed, capacity_of, now=now, elapsed=elapsed)
        plan = await self._provision(result, requests, now)
        self._record_demand(snapshot, result, requests, plan)
        await self._report_queues(result)
        if result.deferred:
            self.queue.wake()  # the jobs this cycle did not reach have the next one, at once

    def _record_demand(
        self,
        snapshot: ClusterSnapshot,
        result: ScheduleResult,
        requests: list[JobRequest],
        plan: ProvisioningPlan | None,
    ) -> None:
        """The queue depth other autoscalers scale on: label values only from nodes and offerings."""
        products = {pool.gpu_product for pool in snapshot.pools if pool.gpu_product is not None}
        waiting = {w.key for w in result.waiting} | set(result.deferred)
        zones = {z for z in (n.zone for n in snapshot.nodes()) if z is not None}
        if self.provisioner is not None:  # what the fleet can grow into is known, from zero nodes up
            zones.update(o.zone for o in self.provisioner.offerings)
            products.update(o.gpu_product for o in self.provisioner.offerings if o.gpu_product is not None)
        zone_of = plan.zones if plan is not None else {}
        self.metrics.capacity.record_pending_demand(pending_demand(requests, waiting, products, zone_of, zones))

    async def _provision(
        self, result: ScheduleResult, requests: list[JobRequest], now: datetime
    ) -> ProvisioningPlan | None:
        """Nodes for whole gangs left waiting for capacity (`controller.provisioning`), when it is on.

        On its own: a failure here (Karpenter's CRDs missing, the API server refusing) is logged and
        the next cycle tries again; the decisions of this one are carried out already."""
        if self.provisioner is None:
            return None
        held = {node for r in requests if r.placement is not None for node in r.placement.nodes}
        held.update(node for a in result.admitted for node in a.placement.nodes)
        held.update(node for r in result.resized for node in r.placement.nodes)
        try:
            rates = {pool: self.pools.spot_rate_per_second(*pool) for pool in self.provisioner.spot_offerings()}
            return await self.provisioner.after_cycle(result, requests, held, now, rates)
        except Exception:
            log.exception("asking for nodes failed; the next cycle tries again")
            return None

    async def _requests(
        self, snapshot: ClusterSnapshot, now: datetime
    ) -> tuple[
        dict[str, tuple[dict[str, Any], TrainingJob]], list[JobRequest], dict[str, CapacityDecision], CycleWrites
    ]:
        """What the scheduler is asked: every waiting job (unless deferred, waiting for capacity or set
        aside) and every placed one, with the jobs by key, the capacity chosen for each waiting job,
        and the status writes of the jobs that sit the cycle out, for the caller to make."""
        doomed = self.inventory.doomed_nodes(now)
        self._spot_fits.clear()  # the snapshot is this cycle's: so are the answers about it
        self._requests_made.begin_cycle()
        parsed: dict[str, tuple[dict[str, Any], TrainingJob]] = {}
        requests: list[JobRequest] = []
        capacity_of: dict[str, CapacityDecision] = {}
        writes: CycleWrites = []
        for key, obj in list(self.jobs.items()):
            if finished(obj) or self._still_set_aside(key, obj) or self._in_closing_namespace(key):
                continue
            job = self._parse_once(obj)
            if isinstance(job, ValidationError):  # a CRD older or looser than this operator let it in
                await self._set_aside(obj, None, job, now)
                continue
            queue = job.spec.queue
            try:
                refused = self.tenancy.refusal(
                    key,
                    queue_name=queue,
                    queue=self.queue_object(queue),
                    priority=job.spec.priority,
                    template=job.spec.template,
                )
                if refused is not None and job.status.phase in HOLDS_GPUS and queue in self.queues:
                    # Its spec changed under a running gang (a priority raised past the cap, another
                    # queue, a toleration, a template the pod policy refuses): it stops to a checkpoint,
                    # so it never runs uncharged, and the next cycle finds it waiting and refused. Not
                    # for a queue this process has not read (yet): a new leader's first cycle may come
                    # before the Queues, and that is no reason to stop anyone.
                    await self._stop_gang(obj, job, now, refused.reason, f"stopped: {refused.message}")
                    continue
                if refused is not None:  # tenancy: its namespace is not bound to the queue, or it asks too much
                    raise QueueRefusalError(refused)
                if job.status.phase not in HOLDS_GPUS:  # a level the cluster cannot give: said at once
                    levels = level_refusal(job.spec.topology, snapshot.topology, snapshot.labelled_levels())
                    if levels is not None:
                        raise QueueRefusalError(levels)
                entry = await self._enter_cycle(obj, job, snapshot, doomed, now=now, writes=writes)
                self._taken_back(key, obj, job, now, writes)
            except Exception as error:
                await self._set_aside(obj, job, error, now)
                continue
            if entry is None:
                continue
            request, capacity = entry
            requests.append(request)
            if capacity is not None:
                capacity_of[request.key] = capacity
            parsed[request.key] = (obj, job)
        self._requests_made.end_cycle()
        return parsed, requests, capacity_of, writes

    async def _carry_out_cycle(
        self,
        result: ScheduleResult,
        parsed: dict[str, tuple[dict[str, Any], TrainingJob]],
        capacity_of: dict[str, CapacityDecision],
        *,
        now: datetime,
        elapsed: float,
    ) -> None:
        """Stop the preempted, relaunch the resized, launch the admitted, tell the waiting why; each job's
        share is guarded on its own."""
        for preemption in result.preempted:
            obj, job = parsed[preemption.key]
            stop = functools.partial(self._stop_gang, obj, job, now, preemption.reason, preemption.message)
            if await self._carried_out(obj, job, now, stop):
                self.metrics.workload.record_preemption(job.spec.queue)
                self.metrics.interruptions.record_gang_restart("Preemption")
        for resize in result.resized:
            obj, job = parsed[resize.key]
            relaunch = functools.partial(
                self._launch,
                obj,
                job,
                resize.placement,
                reason=resize.reason,
                message=resize.message,
                capacity=None,
                now=now,
            )
            if await self._carried_out(obj, job, now, relaunch):
                self.metrics.interruptions.record_gang_restart("Resize")
        launches: list[Coroutine[Any, Any, bool]] = []
        for admission in self._still_free(result.admitted):
            obj, job = parsed[admission.key]
            self.metrics.workload.record_placement(elapsed, placed=True)
            waited = (now - job.status.queued_time).total_seconds() if job.status.queued_time else 0.0
            self.metrics.workload.record_job_admitted(
                job.metadata["namespace"], job.metadata["name"], job.spec.queue, waited
            )
            decision = capacity_of.get(admission.key)
            if decision is not None and decision.pinned_on_demand and not _was_pinned(job):
                self.metrics.interruptions.record_on_demand_fallback()
            message = admitted_message(admission.placement, admission.preempting)
            launch = functools.partial(
                self._launch,
                obj,
                job,
                admission.placement,
                reason="Admitted",
                message=message,
                capacity=decision,
                now=now,
            )
            launches.append(self._carried_out(obj, job, now, launch))
        # Admitted gangs never share nodes, so their launches overlap like reconciles do.
        await _at_most(CONCURRENT_RECONCILES, launches)
        # Thousands may wait: their writes overlap too, and only those due are made.
        waits: list[Coroutine[Any, Any, bool]] = []
        for waiting in result.waiting:
            obj, job = parsed[waiting.key]
            self.metrics.workload.record_placement(elapsed, placed=False)
            key = (job.metadata["namespace"], job.metadata["name"])
            if not waiting_write_due(
                job.status, waiting.reason, waiting.message, last_written=self._waiting_written.get(key), now=now
            ):
                continue
            self._waiting_written[key] = now
            wait = functools.partial(self._keep_waiting, obj, job, waiting.reason, waiting.message, now)
            waits.append(self._carried_out(obj, job, now, wait))
        await _at_most(CONCURRENT_RECONCILES, waits)

    def _still_free(self, admitted: Sequence[Admission]) -> list[Admission]:
        """The admissions whose GPUs are still free, each promised (`in_flight`) before any is carried out.

        The cycle decided on the snapshot it took at its start, and waited on the API server since:
        the InferenceService controller may have placed replicas on those GPUs meanwhile. An
        admission that no longer fits waits for the next cycle, which comes at once. One that
        preempts fits once its victims are gone, which their own stopping sees to.
        """
        if not admitted:
            return []
        fresh = self.cluster_snapshot()
        kept = []
        for admission in admitted:
            wanted = admission.placement.gpus_by_node()  # a share's or a MIG instance's: no whole GPU, or fewer
            if not admission.preempting and not placement_fits(fresh, admission.placement):
                log.info(
                    "%s: its GPUs were promised elsewhere while the cycle ran; it waits for the next", admission.key
                )
                self.queue.wake()
                continue
            hold(fresh, admission.placement)
            self.in_flight.promise(("TrainingJob", admission.key), wanted)
            kept.append(admission)
        return kept

    async def _enter_cycle(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        snapshot: ClusterSnapshot,
        doomed: frozenset[str],
        *,
        now: datetime,
        writes: CycleWrites,
    ) -> tuple[JobRequest, CapacityDecision | None] | None:
        """What JOB asks of this cycle, and the capacity chosen for it; None when it sits this one out.

        The status writes this asks for are added to WRITES, for the cycle to make together."""
        phase = job.status.phase
        key = (job.metadata["namespace"], job.metadata["name"])
        # A new job (no phase yet) is first written Queued only if this cycle cannot place it.
        if phase in (None, Phase.QUEUED, Phase.DEFERRED) and not job.spec.suspend:
            # While its last gang is still stopping, the step it would resume from is not in yet.
            stopping = bool(self.inventory.pods_of_job(job.metadata["namespace"], job.metadata["name"]))
            if stopping or await self._defer(obj, job, now, writes):
                return None
            if (retry_at := refusal_retry_at(job, now)) is not None:
                self._wake_at(job, retry_at, now)
                return None
            capacity = self._choose_capacity(job, snapshot, doomed, now)
            if capacity.choice == CapacityChoice.WAIT:
                last = self._waiting_written.get(key)
                if waiting_write_due(job.status, capacity.reason, capacity.message, last_written=last, now=now):
                    self._waiting_written[key] = now
                    self._write_in_cycle(writes, obj, job, queued(job, capacity.reason, capacity.message, now), now)
                return None
            spot = capacity.choice == CapacityChoice.SPOT
            types = (CapacityType.SPOT,) if spot else (CapacityType.ON_DEMAND,)
            memory = self.inventory.smallest_gpu_memory_mib() if job.spec.gpu_share else 0
            made = self._requests_made.waiting(
                key, obj, job, types, doomed, topology=snapshot.topology, gpu_memory_mib=memory
            )
            return made, capacity
        if phase in (Phase.PLACING, Phase.RUNNING) and job.status.placement and job.status.placement.nodes:
            generation = self.inventory.node_generation
            memory = self.inventory.smallest_gpu_memory_mib() if job.spec.gpu_share else 0
            request = self._requests_made.running(
                key, obj, job, snapshot, node_generation=generation, excluded=doomed, gpu_memory_mib=memory
            )
            return request, None
        return None

    async def _decide(
        self,
        snapshot: ClusterSnapshot,
        requests: list[JobRequest],
        parsed: dict[str, tuple[dict[str, Any], TrainingJob]],
        now: datetime,
    ) -> ScheduleResult:
        """The scheduler's decision. Should it raise, the jobs it raises on are found by halving
        (`policy.culprits`), set aside (and dropped from PARSED), and it decides for the others."""
        most = self.settings.admissions_per_cycle
        decide = functools.partial(
            schedule,
            snapshot,
            queues=self._queue_quotas(),
            now=now,
            first_band_gpu_seconds=self.settings.first_service_band_gpu_seconds,
            held_elsewhere=self.held_elsewhere(),
        )
        try:
            return decide(requests, admissions_per_cycle=most)
        except Exception:
            log.exception("the scheduler raised on this cycle's jobs; halving them for the ones it cannot take")

        def fails(some: Sequence[JobRequest]) -> Exception | None:
            try:
                # With no bound on admissions: a job the bound would leave out could be the one raising.
                decide(list(some), admissions_per_cycle=len(some) + 1)
            except Exception as error:
                return error
            return None

        # Placed gangs are kept in while the waiting jobs are halved: a failure may need one of each.
        placed_gangs = [r for r in requests if r.placement is not None]
        waiting = [r for r in requests if r.placement is None]
        found = culprits([], placed_gangs, fails) if fails(placed_gangs) else culprits(placed_gangs, waiting, fails)
        for request, raised in found:
            obj, job = parsed.pop(request.key)
            await self._set_aside(obj, job, raised, now)
        # With no job to blame this raises, and the stage fails as a whole, to be tried next pass.
        return decide([r for r in requests if r.key in parsed], admissions_per_cycle=most)

    def _queue_quotas(self) -> list[QueueQuota]:
        """The quotas of the Queues this operator can read; the jobs of one it cannot wait, as for a missing
        queue, but for the default queue's, which get the locked one (`with_locked_default`)."""
        quotas = []
        for name, obj in self.queues.items():
            try:
                quotas.append(QueueQuota.from_queue(Queue.model_validate(obj)))
            except ValidationError as error:
                if self._refused_queues.get(name) is not obj:  # once per version of the object, not per cycle
                    log.error("cannot read Queue %s: %s; its jobs wait as for a queue that does not exist", name, error)
                    self._refused_queues[name] = obj
        return with_locked_default(quotas)

    async def _keep_waiting(
        self, obj: dict[str, Any], job: TrainingJob, reason: str, message: str, now: datetime
    ) -> None:
        if job.status.reason != reason:
            self.kube.post_event(obj, "Normal", reason, message)
        await self._write_status(obj, job, queued(job, reason, message, now))

    async def _launch(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        placement: PlacementDecision,
        *,
        reason: str,
        message: str,
        capacity: CapacityDecision | None,
        now: datetime,
    ) -> None:
        """Record a (new) placement as the gang's next generation; reconcile then creates its pods.

        Once the status holds the placement (or the write failed), the cycle's promise of its GPUs goes."""
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        promise = ("TrainingJob", f"{namespace}/{name}")
        try:
            running = [p for p in self.inventory.pods_of_job(namespace, name) if not p.terminating]
            await asyncio.gather(*(self.kube.delete_pod(p.namespace, p.name) for p in running))
            status = placed(
                job,
                placement,
                reason=reason,
                message=message,
                selector=labels.job_selector("TrainingJob", name),
                checkpoint_interval_seconds=self._checkpoint_interval(job, placement.nodes, now),
                capacity=capacity,
                now=now,
            )
            self.kube.post_event(obj, "Normal", reason, message)
            await self._write_status(obj, job, status)
        finally:
            self.in_flight.settle(promise)  # the status holds the GPUs now, or the decision is dropped
        # Create the gang now rather than on the next pass: that pass waits for every other job.
        await self._reconcile_now((namespace, name))

    async def _stop_gang(self, obj: dict[str, Any], job: TrainingJob, now: datetime, reason: str, message: str) -> None:
        """Preempted: the job waits again and its whole gang goes (checkpointing on SIGTERM).

        The status first: should the operator end before the deletes, the next one finds a waiting
        job with live workers and stops them (`lifecycle`); the other way round, it would find a
        running gang losing workers, and count an interruption that never was."""
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        self.kube.post_event(obj, "Warning", reason, message)
        await self._write_status(obj, job, preempted(job, reason, message, now))
        pods = [p for p in self.inventory.pods_of_job(namespace, name) if not p.terminating]
        await asyncio.gather(*(self.kube.delete_pod(p.namespace, p.name, self._checkpoint_grace()) for p in pods))

    def _choose_capacity(
        self, job: TrainingJob, snapshot: ClusterSnapshot, doomed: frozenset[str], now: datetime
    ) -> CapacityDecision:
        spec = job.spec
        spot_fits = False
        if spec.spot.policy != SpotPolicy.NEVER:
            # Thousands of waiting jobs come in a few shapes: one search per shape and cycle, not per job.
            on_spot = self._request(job, doomed, (CapacityType.SPOT,), snapshot.topology)
            fits = self._spot_fits.get(on_spot)
            if fits is None:
                fits = self._spot_fits[on_spot] = gang_fits(on_spot, snapshot)
            # A fleet that grows has spot whenever it offers it: nodes are asked for after the cycle.
            spot_fits = fits or (
                self.provisioner is not None and self.provisioner.offers(CapacityType.SPOT, spec.gpu_type)
            )
        capacity = next((c for c in job.status.conditions if c.type == "Capacity"), None)
        pinned = None
        if capacity is not None and capacity.reason == DEADLINE_NEEDS_ON_DEMAND:
            pinned = CapacityDecision(CapacityChoice.ON_DEMAND, capacity.reason, capacity.message, True)
        return choose_capacity(
            SpotPolicy(spec.spot.policy),
            SpotJob(
                # Conservative: work done before an interruption is not credited, so
                # the switch to on-demand comes early rather than late.
                remaining_work_s=float(spec.expected_duration_seconds or 0),
                restart_overhead_s=self.settings.restart_overhead_seconds,
            ),
            now=now,
            deadline=spec.deadline,
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
            # Beyond the work: a restart after an interruption, and one decision period to notice it.
            slack = deadline_slack_seconds(
                job.spec.deadline,
                now,
                float(job.spec.expected_duration_seconds or 0),
                self.settings.restart_overhead_seconds,
                self.settings.resync_seconds,
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
        self, job: TrainingJob, doomed: frozenset[str], capacity_types: tuple[CapacityType, ...], topology: Topology
    ) -> GangRequest:
        spec = job.spec
        tolerations = tuple(Toleration.from_dict(t) for t in (spec.template.get("spec") or {}).get("tolerations", []))
        return GangRequest(
            replicas=spec.replicas,
            gpus_per_replica=spec.gpus_per_replica,
            gpu_types=frozenset({spec.gpu_type}) if spec.gpu_type else None,
            required_level=_level(topology, spec.topology.required_level),
            preferred_level=_level(topology, spec.topology.preferred_level),
            tolerations=tolerations,
            capacity_types=capacity_types,
            excluded_nodes=doomed,
            share=ShareShape.of(spec.gpu_share),
        )


def _was_pinned(job: TrainingJob) -> bool:
    return any(c.type == "Capacity" and c.reason == DEADLINE_NEEDS_ON_DEMAND for c in job.status.conditions)


async def _at_most(limit: int, calls: list[Coroutine[Any, Any, bool]]) -> None:
    """Await CALLS concurrently, at most LIMIT at a time."""
    slots = asyncio.Semaphore(limit)

    async def bounded(call: Coroutine[Any, Any, bool]) -> None:
        async with slots:
            await call

    await asyncio.gather(*(bounded(call) for call in calls))


def _level(topology: Topology, name: str | None) -> Level | None:
    return topology.find(name) if name else None
