"""The scheduling cycle's decisions carried out: preempted gangs stopped, resized and admitted
gangs launched, waiting jobs told why.

Each job's share is guarded on its own (`isolation.StageGuard.carried_out`): a job whose
decision cannot be carried out is set aside, and every other job's goes on.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aisched.api import TrainingJob
from aisched.controller.concurrency import all_done, at_most
from aisched.controller.in_flight import Promised, placement_fits
from aisched.controller.training.capacity import was_pinned
from aisched.controller.training.isolation import CycleWrites, StageGuard
from aisched.controller.training.reconcile import JobReconciler, checkpoint_grace
from aisched.controller.training.store import JobKey, JobStore, job_key
from aisched.controller.training.writer import CONCURRENT_RECONCILES, StatusWriter
from aisched.controller.workqueue import WorkQueue
from aisched.kube import labels
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.kube.pools import PoolTracker
from aisched.metrics import Metrics
from aisched.policy.deadlines import deadline_slack_seconds
from aisched.policy.job_messages import admitted_message
from aisched.policy.job_status import placed, preempted, queued, waiting_write_due
from aisched.policy.placement import Placement as PlacementDecision
from aisched.policy.placement import hold
from aisched.policy.scheduler import ScheduleResult
from aisched.policy.scheduler.results import Admission
from aisched.policy.spot import CapacityChoice, CapacityDecision, spot_checkpoint_interval
from aisched.settings import Settings

log = logging.getLogger(__name__)
# The jobs the cycle read, by the scheduler's key: each with the object it was read from.
CycleJobs = dict[str, tuple[dict[str, Any], TrainingJob]]


@dataclass(kw_only=True)
class CycleDecisions:
    settings: Settings
    store: JobStore
    writer: StatusWriter
    guard: StageGuard
    reconciler: JobReconciler
    kube: KubeClient
    inventory: Inventory
    queue: WorkQueue[JobKey]
    metrics: Metrics
    pools: PoolTracker
    # When each waiting job's status was last written by the scheduling cycle: its message is refreshed
    # at most every WAITING_MESSAGE_REFRESH.
    _waiting_written: dict[JobKey, datetime] = field(default_factory=dict, init=False)

    def forget(self, key: JobKey) -> None:
        self._waiting_written.pop(key, None)

    def waiting_write_due(self, job: TrainingJob, reason: str, message: str, now: datetime) -> bool:
        """Whether JOB's waiting status (REASON, MESSAGE) is to be written now; if so, it is taken as written."""
        key = job_key(job)
        if not waiting_write_due(job.status, reason, message, last_written=self._waiting_written.get(key), now=now):
            return False
        self._waiting_written[key] = now
        return True

    async def carry_out(
        self,
        result: ScheduleResult,
        parsed: CycleJobs,
        capacity_of: dict[str, CapacityDecision],
        *,
        now: datetime,
        elapsed: float,
    ) -> None:
        """Stop the preempted, relaunch the resized, launch the admitted, tell the waiting why; each job's
        share is guarded on its own."""
        guard = self.guard
        for preemption in result.preempted:
            obj, job = parsed[preemption.key]
            stop = functools.partial(self.stop_gang, obj, job, now, preemption.reason, preemption.message)
            if await guard.carried_out(obj, job, now, stop):
                self.metrics.workload.record_preemption(job.spec.queue)
                self.metrics.interruptions.record_gang_restart("Preemption")
        for resize in result.resized:
            obj, job = parsed[resize.key]
            relaunch = functools.partial(
                self.launch, obj, job, resize.placement, reason=resize.reason, message=resize.message, now=now
            )
            if await guard.carried_out(obj, job, now, relaunch):
                self.metrics.interruptions.record_gang_restart("Resize")
        launches: CycleWrites = []
        for admission in self._still_free(result.admitted):
            obj, job = parsed[admission.key]
            self.metrics.workload.record_placement(elapsed, placed=True)
            waited = (now - job.status.queued_time).total_seconds() if job.status.queued_time else 0.0
            self.metrics.workload.record_job_admitted(*job_key(job), job.spec.queue, waited)
            decision = capacity_of.get(admission.key)
            if decision is not None and decision.choice == CapacityChoice.WAIT:
                # It waited for spot and the cycle made room there (preempted or shrank lower priorities).
                decision = CapacityDecision(CapacityChoice.SPOT, "SpotAvailable", "spot capacity made by the cycle")
            if decision is not None and decision.pinned_on_demand and not was_pinned(job):
                self.metrics.interruptions.record_on_demand_fallback()
            message = admitted_message(admission.placement, admission.preempting, admission.key)
            launch = functools.partial(
                self.launch,
                obj,
                job,
                admission.placement,
                reason="Admitted",
                message=message,
                capacity=decision,
                now=now,
            )
            launches.append(functools.partial(guard.carried_out, obj, job, now, launch))
        # Admitted gangs never share nodes, so their launches overlap like reconciles do.
        await at_most(CONCURRENT_RECONCILES, launches)
        # Thousands may wait: their writes overlap too, and only those due are made.
        waits: CycleWrites = []
        for waiting in result.waiting:
            obj, job = parsed[waiting.key]
            self.metrics.workload.record_placement(elapsed, placed=False)
            reason, message = waiting.reason, waiting.message
            if (decision := capacity_of.get(waiting.key)) is not None and decision.choice == CapacityChoice.WAIT:
                reason, message = decision.reason, decision.message  # waiting for spot, not for any GPU
            if not self.waiting_write_due(job, reason, message, now):
                continue
            wait = functools.partial(self._keep_waiting, obj, job, reason, message, now)
            waits.append(functools.partial(guard.carried_out, obj, job, now, wait))
        await at_most(CONCURRENT_RECONCILES, waits)

    def _still_free(self, admitted: Sequence[Admission]) -> list[Admission]:
        """The admissions whose GPUs are still free, each promised (`in_flight`) before any is carried out.

        The cycle decided on the snapshot it took at its start, and waited on the API server since:
        kube-scheduler may have bound someone else's pod to those GPUs meanwhile. An admission
        that no longer fits waits for the next cycle, which comes at once. One that
        preempts fits once its victims are gone, which their own stopping sees to.
        """
        if not admitted:
            return []
        fresh = self.store.cluster_snapshot()
        kept = []
        for admission in admitted:
            if not admission.preempting and not placement_fits(fresh, admission.placement):
                log.info(
                    "%s: its GPUs were promised elsewhere while the cycle ran; it waits for the next", admission.key
                )
                self.queue.wake()
                continue
            hold(fresh, admission.placement)
            self.store.in_flight.promise(("TrainingJob", admission.key), Promised.of(admission.placement))
            kept.append(admission)
        return kept

    async def _keep_waiting(
        self, obj: dict[str, Any], job: TrainingJob, reason: str, message: str, now: datetime
    ) -> None:
        if job.status.reason != reason:
            self.kube.post_event(obj, "Normal", reason, message)
        await self.writer.write(obj, job, queued(job, reason, message, now))

    async def launch(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        placement: PlacementDecision,
        *,
        reason: str,
        message: str,
        capacity: CapacityDecision | None = None,
        now: datetime,
    ) -> None:
        """Record a (new) placement as the gang's next generation; reconcile then creates its pods.

        Once the status holds the placement (or the write failed), the cycle's promise of its GPUs goes."""
        namespace, name = job_key(job)
        promise = ("TrainingJob", f"{namespace}/{name}")
        try:
            running = [p for p in self.inventory.pods_of_job(namespace, name) if not p.terminating]
            await all_done(*(self.kube.delete_pod(p.namespace, p.name) for p in running))
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
            await self.writer.write(obj, job, status)
        finally:
            self.store.in_flight.settle(promise)  # the status holds the GPUs now, or the decision is dropped
        # Create the gang now rather than on the next pass: that pass waits for every other job.
        await self.reconciler.reconcile_now((namespace, name))

    async def stop_gang(self, obj: dict[str, Any], job: TrainingJob, now: datetime, reason: str, message: str) -> None:
        """Preempted: the job waits again and its whole gang goes (checkpointing on SIGTERM).

        The status first: should the operator end before the deletes, the next one finds a waiting
        job with live workers and stops them (`lifecycle`); the other way round, it would find a
        running gang losing workers, and count an interruption that never was."""
        self.kube.post_event(obj, "Warning", reason, message)
        await self.writer.write(obj, job, preempted(job, reason, message, now))
        pods = [p for p in self.inventory.pods_of_job(*job_key(job)) if not p.terminating]
        grace = checkpoint_grace(self.settings)
        await all_done(*(self.kube.delete_pod(p.namespace, p.name, grace) for p in pods))

    def _checkpoint_interval(self, job: TrainingJob, nodes: tuple[str, ...], now: datetime) -> int | None:
        checkpoint = job.spec.checkpoint
        if checkpoint is None:
            return None
        if checkpoint.interval_seconds is not None:
            return checkpoint.interval_seconds
        # A gang stops when any of its nodes goes: the rates of its nodes add up.
        nodes_known = self.inventory.nodes
        rate = sum(self.pools.rate_per_second(nodes_known[n]) for n in nodes if n in nodes_known)
        settings = self.settings
        slack = None
        if job.spec.deadline is not None:
            # Beyond the work: a restart after an interruption, and one decision period to notice it.
            slack = deadline_slack_seconds(
                job.spec.deadline,
                now,
                float(job.spec.expected_duration_seconds or 0),
                settings.restart_overhead_seconds,
                settings.resync_seconds,
            )
        interval = spot_checkpoint_interval(
            checkpoint.cost_seconds,
            rate,
            notice_s=settings.spot_notice_seconds,
            interruptions=job.status.interruptions or 0,
            saved_on_notice=min(job.status.saved_on_notice or 0, job.status.interruptions or 0),
            slack_s=slack,
        )
        return round(interval)
