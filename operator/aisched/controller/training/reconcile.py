"""Reconcile one TrainingJob: observe its pods, ask the lifecycle what to do, and do it.

All state lives in the objects (job status, pod labels), so a restarted operator
picks up where the last one stopped, and every write is idempotent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from aisched.api import TrainingJob, TrainingJobPhase
from aisched.api.training_job import TrainingJobStatus
from aisched.controller.concurrency import all_done
from aisched.controller.sharing import GpuShares, ShareDoesNotFitError
from aisched.controller.training.releases import WorkerReleases
from aisched.controller.training.store import PLURAL, JobKey, JobStore, parse_job
from aisched.controller.training.stray_workers import StrayWorkers
from aisched.controller.training.writer import StatusWriter
from aisched.controller.workqueue import RefusedError, WorkQueue
from aisched.kube import labels
from aisched.kube.api_errors import namespace_closing, refused_create
from aisched.kube.builders import GangLaunch, WorkerSlot, build_headless_service, build_worker_pod, owner_reference
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory, PodRecord
from aisched.metrics import Metrics
from aisched.policy.checkpoint_grace import checkpoint_grace_condition
from aisched.policy.checkpoint_reports import REPORT_REJECTED, ReportReading, read_report, rejection_message
from aisched.policy.deadlines import checkpoint_grace_seconds
from aisched.policy.job_status import apply_step, checkpoint_reason, interrupted_gang_stopped, record_checkpoints
from aisched.policy.lifecycle import WAITING, Observation, Step, Verb, Worker, WorkerPhase, next_step
from aisched.policy.placement_record import (
    PLACEMENT_NOT_VERIFIED,
    WorkerSeat,
    placement_ignored,
    placement_vouched_for,
)
from aisched.policy.refusals import FAILED_CREATE, failed_create, workers_created
from aisched.settings import Settings

Phase = TrainingJobPhase


@dataclass(kw_only=True)
class JobReconciler:
    """One job at a time: observe its pods, ask the lifecycle what to do, do it."""

    settings: Settings
    store: JobStore
    writer: StatusWriter
    kube: KubeClient
    inventory: Inventory
    queue: WorkQueue[JobKey]
    metrics: Metrics
    shares: GpuShares
    releases: WorkerReleases
    strays: StrayWorkers
    clock: Callable[[], datetime]
    # Workers of each job whose checkpoint report was rejected and the job told so (a Warning event, once).
    _rejected_reports_told: dict[JobKey, frozenset[str]] = field(default_factory=dict, init=False)

    async def reconcile(self, key: JobKey) -> None:
        obj = self.store.jobs.get(key)
        if obj is None:
            self._rejected_reports_told.pop(key, None)
        if obj is None or self.store.in_closing_namespace(key):
            return
        job = self.store.read(obj)
        if job is None:
            return
        now = self.clock()
        status = job.status
        generation = status.gang_generation or 0
        # A pod named as one of its workers whose labels were taken off or changed goes first: it is
        # none of its workers, whatever its labels say (policy/stray_workers.py).
        strays = await self.strays.sweep(key)
        pods = [p for p in self.inventory.pods_of_job(*key) if p.name not in strays]
        seats = [WorkerSeat(p.labels.get(labels.GANG_GENERATION), p.labels.get(labels.RANK), p.gpu_node) for p in pods]
        if not placement_vouched_for(status, self.store.placement_made(key), seats):
            ignored = placement_ignored(job, now)
            self.kube.post_event(obj, "Warning", PLACEMENT_NOT_VERIFIED, ignored.message or "")
            await self.writer.write(obj, job, ignored)
            return
        current = [p for p in pods if p.labels.get(labels.GANG_GENERATION) == str(generation)]
        stale = tuple(p.name for p in pods if p not in current)
        placement_nodes = status.placement.nodes if status.placement else []
        gone = {n for n in placement_nodes if n not in self.inventory.nodes}
        disrupted = {p.node for p in current if p.disruption_target and p.node}
        seen = Observation(
            now=now,
            workers=tuple(_worker(p) for p in current if not (p.terminating and p.phase == "Pending")),
            stale_pods=stale,
            doomed_nodes=self.inventory.doomed_nodes(now) | frozenset(gone) | frozenset(disrupted),
        )
        if self._others_leaving(key, placement_nodes):
            # A preemptor's workers wait for their victims, who may take their checkpoint grace to go.
            seen = replace(seen, bind_timeout=seen.bind_timeout + timedelta(seconds=checkpoint_grace(self.settings)))
        if (grace_ends := self.inventory.not_ready_grace_ends(placement_nodes)) is not None and grace_ends > now:
            self.queue.add_after(key, (grace_ends - now).total_seconds())  # lost then, unless Ready again
        # Workers keep their pods (the report finalizer) until the status written below holds their reports.
        readings = [(p, read_report(p.termination_message, now)) for p in current]
        self._tell_rejected_reports(obj, key, readings, status)
        status = record_checkpoints(status, [(p.labels.get(labels.RANK), r.report) for p, r in readings])
        # A resize relaunches the gang at once: the generation before saves on SIGTERM as it goes, and
        # its reports are the resume point the next relaunch (or the operator's restart) needs.
        before = [p for p in pods if p.labels.get(labels.GANG_GENERATION) == str(generation - 1)]
        if before:
            reports = [(p.labels.get(labels.RANK), read_report(p.termination_message, now).report) for p in before]
            status = record_checkpoints(status, reports, ranks=len({rank for rank, _ in reports}))
        step = next_step(job.spec, status, seen)
        await self.carry_out(obj, job, status, step, pods, now=now)
        await self.releases.release_workers(key, pods, now)

    def _tell_rejected_reports(
        self, obj: dict[str, Any], key: JobKey, readings: list[tuple[PodRecord, ReportReading]], kept: TrainingJobStatus
    ) -> None:
        """A Warning on the job for each worker whose report is rejected, once per worker (its message
        does not change once its containers stopped), not once per reconcile."""
        rejected = [(pod, reading.rejection) for pod, reading in readings if reading.rejection is not None]
        told = self._rejected_reports_told.get(key, frozenset())
        for pod, rejection in rejected:
            if pod.name not in told:
                message = rejection_message(pod.name, pod.labels.get(labels.RANK), rejection, kept.last_checkpoint)
                self.kube.post_event(obj, "Warning", REPORT_REJECTED, message)
        if rejected or told:
            self._rejected_reports_told[key] = frozenset(pod.name for pod, _ in rejected)  # the gone are forgotten

    def _others_leaving(self, key: JobKey, nodes: list[str]) -> bool:
        """Pods of others that still hold GPUs on NODES are being deleted."""
        return any(
            p.terminating and p.holds_gpus and p.job_key != key
            for node in set(nodes)
            for p in self.inventory.pods_on_node(node)
        )

    async def reconcile_now(self, key: JobKey) -> None:
        """Reconcile KEY at once rather than on the next pass, which waits for every other job.

        Through the queue, so a failure is logged and retried with backoff as any other.
        """
        await self.queue.process([key], self.reconcile, concurrency=1, on_done=self.reconciled)

    def reconciled(self, key: JobKey, seconds: float, failed: bool) -> None:
        self.metrics.process.record_reconcile("TrainingJob", seconds, failed=failed)

    async def carry_out(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        status: TrainingJobStatus,
        step: Step,
        pods: list[PodRecord],
        *,
        now: datetime,
    ) -> None:
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        if step.verb == Verb.CREATE_WORKERS:
            status = await self._create_workers(obj, job, status, pods, now)
            if self.store.in_closing_namespace((namespace, name)):
                return
        elif step.verb == Verb.RELEASE_GATES:
            await all_done(*(self.kube.release_scheduling_gates(p.namespace, p.name) for p in pods if p.gated))
        elif step.verb == Verb.DELETE_WORKERS:
            # Workers stopped to be resumed later save first; those of a failed or finished gang need not.
            saving = (step.phase or status.phase) in (Phase.CHECKPOINTING, *WAITING)
            grace = checkpoint_grace(self.settings) if saving else None
            await all_done(*(self.kube.delete_pod(p.namespace, p.name, grace) for p in pods if not p.terminating))
        elif step.verb == Verb.DELETE_JOB:
            await self.kube.delete_custom(PLURAL, namespace, name)
            return
        for event_type, reason, message in step.events:
            self.kube.post_event(obj, event_type, reason, message)
        updated = apply_step(job, status, step, now)
        self._count_step(job, status, updated, step)
        await self.writer.write(obj, job, updated)
        if step.requeue_after is not None:
            self.queue.add_after((namespace, name), step.requeue_after.total_seconds())

    def _count_step(self, job: TrainingJob, before: TrainingJobStatus, after: TrainingJobStatus, step: Step) -> None:
        if after.last_checkpoint != job.status.last_checkpoint and after.last_checkpoint is not None:
            self.metrics.interruptions.record_checkpoint(checkpoint_reason(before))
        capacity = str(before.placement.capacity_type) if before.placement and before.placement.capacity_type else None
        if interrupted_gang_stopped(before, step):
            lost = (after.lost_work_seconds or 0.0) - (before.lost_work_seconds or 0.0)
            signal = "NodeLost" if before.reason == "WorkerLost" else "NodeTaint"
            self.metrics.interruptions.record_interruption(
                capacity or "OnDemand", signal, lost_seconds=lost, gpus=before.gpus or 0
            )
            self.metrics.interruptions.record_gang_restart("Interruption")
        if step.count_restart:
            self.metrics.interruptions.record_gang_restart("WorkerFailure")
        if step.finished and step.phase in (Phase.SUCCEEDED, Phase.FAILED):
            self.metrics.workload.record_job_finished(job.spec.queue, str(step.phase))

    async def _create_workers(
        self, obj: dict[str, Any], job: TrainingJob, status: TrainingJobStatus, pods: list[PodRecord], now: datetime
    ) -> TrainingJobStatus:
        """Create the gang's missing workers and release them together; STATUS as it stands after.

        A worker the API server refuses is the job's condition (`failed_create`), and the reconcile
        fails, to be retried with backoff; refused long enough, the gang gives its GPUs back.
        """
        placement = status.placement
        if placement is None or not placement.nodes:
            return status
        with_template = await self._with_full_template(job)
        if with_template is None:
            return status  # deleted meanwhile: the watch tells the rest
        job = with_template
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
            termination_grace_seconds=(checkpoint_grace(self.settings) if placement.capacity_type == "Spot" else None),
            priority_class_name=self.settings.worker_priority_class_name,
            stop_grace_seconds=checkpoint_grace(self.settings),  # any stop to save deletes the workers with it
        )
        to_create = [build_worker_pod(job, launch, slot) for slot in launch.slots]
        # Only a gang needs the Service to rendezvous; a lone worker is its own master.
        service = [self.kube.create(build_headless_service(job))] if launch.world_size > 1 else []
        try:
            claims, missing = self.shares.shared_pods(
                job.spec.gpu_share,
                [pod for pod in to_create if pod["metadata"]["name"] not in existing],
                owner_reference(job),
                job.spec.gpu_type,
            )
            try:
                await all_done(*(self.kube.create(claim) for claim in claims))
                await all_done(*service, *(self.kube.create(pod) for pod in missing))
            except ApiException:
                self.shares.forget(missing)  # a worker the next attempt makes is handed its share again
                raise
        except ShareDoesNotFitError as full:
            raise WorkersRefusedError(f"a worker's GPU share does not fit: {full}") from None
        except ApiException as error:
            if namespace_closing(error):
                self.store.namespace_closed(job.metadata["namespace"])
                return status
            refused = refused_create(error)
            if refused is None:
                raise
            await self._refused(obj, job, failed_create(job, status, refused, now), refused, to_create)
            raise WorkersRefusedError(f"the API server refused a worker: {refused}") from None
        # Every pod of the gang exists now (a failed create raised above): hand them to
        # kube-scheduler together, without a round trip through the watch first.
        namespace = job.metadata["namespace"]
        await all_done(
            *(
                self.kube.release_scheduling_gates(namespace, pod["metadata"]["name"])
                for pod in to_create
                if pod["spec"].get("schedulingGates")
            )
        )
        return checkpoint_grace_condition(job, workers_created(job, status, now), checkpoint_grace(self.settings), now)

    async def _with_full_template(self, job: TrainingJob) -> TrainingJob | None:
        """JOB with the whole of its template, to build its pods from; None when it is gone.

        A job kept without its template's process settings is read again from the API server:
        one read a launch. A spec that changed since our copy fails the launch, to be tried again
        (with backoff) on the new spec the watch is bringing.
        """
        key = (job.metadata["namespace"], job.metadata["name"])
        if key not in self.store.elided_templates:
            return job
        current = await self.kube.get_custom(PLURAL, *key)
        if current is None:
            return None
        full = parse_job(current)
        if isinstance(full, ValidationError):
            raise TemplateChangedError(f"TrainingJob {key[0]}/{key[1]} as stored now cannot be read: {full}")
        if full.metadata.get("generation") != job.metadata.get("generation"):
            raise TemplateChangedError(f"TrainingJob {key[0]}/{key[1]} changed since it was placed")
        return job.model_copy(update={"spec": full.spec})

    async def _refused(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        status: TrainingJobStatus,
        refusal: str,
        workers: list[dict[str, Any]],
    ) -> None:
        """Say why the gang cannot start, in an event as the Job controller does and in STATUS; a
        gang that gave its GPUs back leaves no worker behind."""
        self.kube.post_event(obj, "Warning", FAILED_CREATE, refusal)
        if status.phase == Phase.QUEUED:
            namespace = job.metadata["namespace"]
            await all_done(*(self.kube.delete_pod(namespace, w["metadata"]["name"]) for w in workers))
        await self.writer.write(obj, job, status)


def checkpoint_grace(settings: Settings) -> int:
    """Seconds a worker stopped to be resumed has to save its checkpoint."""
    return checkpoint_grace_seconds(settings.spot_notice_seconds)


class TemplateChangedError(Exception):
    """The job read again for its launch is not the one placed: the launch waits for the watch to catch up."""


class WorkersRefusedError(RefusedError):
    """The API server refused a worker of the gang; the job's WorkersCreated condition says what it said."""


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
