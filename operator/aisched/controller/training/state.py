"""What the TrainingJob controller holds: the watch-fed caches, its clients and its work queue.

Every concern of the controller (reconcile, carbon, scheduling, reporting) is a
layer over this state; the layers share it rather than pass it around.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from aisched.api import DEFAULT_QUEUE, TrainingJob
from aisched.api.training_job import TrainingJobStatus
from aisched.controller.in_flight import InFlightPlacements
from aisched.controller.provisioning import NodeProvisioner
from aisched.controller.sharing import GpuShares
from aisched.controller.tenancy import TenancyBook
from aisched.controller.training.requests import RequestBook
from aisched.controller.workqueue import FailureBackoff, WorkQueue
from aisched.kube import labels
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory, PodKey
from aisched.kube.pools import PoolTracker
from aisched.metrics import Metrics
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.interruptions import InterruptionPrior
from aisched.policy.lifecycle import FINISHED, HOLDS_GPUS
from aisched.policy.placement import GangRequest
from aisched.policy.placement_record import PlacementMade
from aisched.policy.queueing import locked_default_queue
from aisched.policy.scheduler import HeldGpus
from aisched.settings import Settings
from aisched.sources.carbon import CachedCarbonSource
from aisched.sources.energy import GpuEnergySource

log = logging.getLogger(__name__)
JobKey = tuple[str, str]
PLURAL = "trainingjobs"
# A namespace found being deleted is left alone this long: its jobs can create nothing and hold no GPUs.
CLOSING_NAMESPACE_SECONDS = 60.0
# Jobs reconciled at once; a little under the API client's threads, leaving some to the serving loop.
CONCURRENT_RECONCILES = 24


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class TrainingJobState:
    settings: Settings
    kube: KubeClient
    inventory: Inventory
    metrics: Metrics = field(default_factory=lambda: Metrics(CollectorRegistry(), process_metrics=False))
    carbon: CachedCarbonSource | None = None
    provisioner: NodeProvisioner | None = None  # new nodes for whole gangs (settings.provisioning)
    energy: GpuEnergySource | None = None  # DCGM's energy counters, where Prometheus has them
    _emissions_marks: dict[JobKey, datetime] = field(default_factory=dict)
    clock: Callable[[], datetime] = utc_now
    pools: PoolTracker = field(init=False)
    jobs: dict[JobKey, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    queue: WorkQueue[JobKey] = field(init=False)
    """Jobs to reconcile: dirty marks, one wake-up per job, retries with backoff, the periodic resync."""
    # Workers (with the report finalizer) of TrainingJobs that are gone, to be let go (releases.py).
    _unowned_workers: set[PodKey] = field(default_factory=set)
    # Each cycle reads every job several times; an object is parsed once, until the next watch event replaces it.
    # An object the model refuses is kept with what the model said, for the condition that tells its user.
    _parsed: dict[JobKey, tuple[dict[str, Any], TrainingJob | ValidationError]] = field(default_factory=dict)
    # Jobs kept without their template's process settings (templates.py): their launch reads them again.
    _elided_templates: set[JobKey] = field(default_factory=set)
    # Jobs a cluster-wide stage failed on, per (stage, job): each waits out its backoff before that
    # stage tries it again; the generation of each job the scheduling cycle set aside, so a new
    # spec is tried at once.
    _stage_backoff: FailureBackoff[tuple[str, JobKey]] = field(default_factory=FailureBackoff)
    _set_aside_generation: dict[JobKey, object] = field(default_factory=dict)
    # Queue objects the model refuses, each version logged once.
    _refused_queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    _reported_at: datetime | None = None
    # Set by every mark; a pass during which no job was marked reports at once: the jobs have settled.
    _marked_during_cycle: bool = False
    # Whether a gang of each shape fits on spot capacity, for the scheduling cycle under way.
    _spot_fits: dict[GangRequest, bool] = field(default_factory=dict)
    # Each job's request to the scheduler, made again only when what it is made of changed.
    _requests_made: RequestBook = field(default_factory=RequestBook)
    # When each waiting job's status was last written by the scheduling cycle: its message is refreshed
    # at most every WAITING_MESSAGE_REFRESH.
    _waiting_written: dict[JobKey, datetime] = field(default_factory=dict)
    # GPUs the queues' other work holds (InferenceService replicas), charged to their queues each cycle.
    held_elsewhere: Callable[[], Sequence[HeldGpus]] = field(default=lambda: ())
    # GPUs each queue may still take, as the last cycle left it (its InferenceServices start replicas within it).
    queue_room: dict[str, int | None] = field(default_factory=dict)
    # GPUs this controller and the InferenceService controller promised and have not yet written down.
    in_flight: InFlightPlacements = field(default_factory=InFlightPlacements)
    # The placement this process last wrote for each job: the status is our record, never a grant
    # (`policy.placement_record`).
    _placements_made: dict[JobKey, PlacementMade] = field(default_factory=dict)
    # Jobs by the nodes of their status placement: a node's event marks those jobs, not every job.
    _placed_on: dict[str, set[JobKey]] = field(default_factory=dict)
    # Workers of each job whose checkpoint report was rejected and the job told so (a Warning event, once).
    _rejected_reports_told: dict[JobKey, frozenset[str]] = field(default_factory=dict)
    # What each queue refuses of each job, until either object changes.
    tenancy: TenancyBook = field(default_factory=TenancyBook)
    shares: GpuShares = field(init=False)
    """Which GPU each worker of a job with gpuShare gets, and its claim."""
    # Namespaces the API server said are being deleted, with when (monotonic) that is next asked again.
    _closing_namespaces: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.shares = GpuShares(self.inventory)
        self.pools = PoolTracker(
            InterruptionPrior.per_hour(
                self.settings.spot_prior_interruptions_per_hour, self.settings.spot_prior_weight_hours
            )
        )
        self.queue = WorkQueue(
            name="TrainingJob",
            resync_seconds=self.settings.resync_seconds,
            max_batch=self.settings.reconciles_per_pass,
        )

    def _read(self, obj: dict[str, Any]) -> TrainingJob | None:
        """OBJ as a model; the models are shared, so callers copy before they change one.

        None for an object the model refuses (`_refusal` says why).
        """
        parsed = self._parse_once(obj)
        return parsed if isinstance(parsed, TrainingJob) else None

    def _refusal(self, obj: dict[str, Any]) -> ValidationError | None:
        """Why the model refuses OBJ; None when it reads it."""
        parsed = self._parse_once(obj)
        return parsed if isinstance(parsed, ValidationError) else None

    def _parse_once(self, obj: dict[str, Any]) -> TrainingJob | ValidationError:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        cached = self._parsed.get(key)
        if cached is not None and cached[0] is obj:
            return cached[1]
        parsed = parse_job(obj)
        if finished(obj):
            # Most of a long backlog is jobs that finished, which the stages read off their
            # objects (`finished`): their models (~9 KiB each) are made when asked for, not kept.
            self._parsed.pop(key, None)
        else:
            self._parsed[key] = (obj, parsed)
        return parsed

    async def _write_status(self, obj: dict[str, Any], job: TrainingJob, status: TrainingJobStatus) -> None:
        if status == job.status:
            return
        wire = status.to_wire()
        namespace, name = job.metadata["namespace"], job.metadata["name"]
        version = await self.kube.patch_status(PLURAL, namespace, name, wire)
        made = PlacementMade.of(status)
        if made is None:
            self._placements_made.pop((namespace, name), None)
        else:
            self._placements_made[(namespace, name)] = made
        # Keep our copy current so the next pass does not act on stale status; at the version
        # the write made, so the watch events of earlier writes, still on their way, are older.
        metadata = {**obj["metadata"], "resourceVersion": version} if version else obj["metadata"]
        self._store_job((namespace, name), {**obj, "metadata": metadata, "status": wire})

    def room_of(self, queue: str) -> int | None:
        """GPU-equivalents (thousandths) QUEUE may still take as the last scheduling cycle left it; None: no
        limit known."""
        return self.queue_room.get(queue)

    def queue_object(self, name: str) -> dict[str, Any] | None:
        """Queue NAME as stored; the default queue, where nobody wrote one, as the locked one the
        operator creates (it grants nothing), never an open one."""
        queue = self.queues.get(name)
        if queue is None and name == DEFAULT_QUEUE:
            return locked_default_queue().to_wire()
        return queue

    async def _with_full_template(self, job: TrainingJob) -> TrainingJob | None:
        """JOB with the whole of its template, to build its pods from; None when it is gone.

        A job kept without its template's process settings is read again from the API server:
        one read a launch. A spec that changed since our copy fails the launch, to be tried again
        (with backoff) on the new spec the watch is bringing.
        """
        key = (job.metadata["namespace"], job.metadata["name"])
        if key not in self._elided_templates:
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

    def _store_job(self, key: JobKey, obj: dict[str, Any]) -> None:
        """Our copy of a job, from its watch event or our own status write."""
        old = self.jobs.get(key)
        self.jobs[key] = obj
        if finished(obj):
            self._parsed.pop(key, None)
        before, after = _placed_nodes(old), _placed_nodes(obj)
        for node in before - after:
            self._unplace(key, node)
        for node in after - before:
            self._placed_on.setdefault(node, set()).add(key)

    def _drop_job(self, key: JobKey) -> None:
        self._placements_made.pop(key, None)
        self.tenancy.forget(key)
        for node in _placed_nodes(self.jobs.pop(key, None)):
            self._unplace(key, node)

    def _unplace(self, key: JobKey, node: str) -> None:
        jobs = self._placed_on.get(node, set())
        jobs.discard(key)
        if not jobs:
            self._placed_on.pop(node, None)

    def _namespace_closed(self, namespace: str) -> None:
        """NAMESPACE is being deleted: its jobs are left out of scheduling and reconciles for a while.

        Until the namespace controller deletes them, they would otherwise be admitted, hold
        GPUs their pods can never use, and fail a reconcile each (a tenant deleting a
        namespace of a thousand jobs would stall everyone else)."""
        if namespace not in self._closing_namespaces:
            log.info("namespace %s is being deleted: its TrainingJobs are left alone", namespace)
        self._closing_namespaces[namespace] = time.monotonic() + CLOSING_NAMESPACE_SECONDS

    def _in_closing_namespace(self, key: JobKey) -> bool:
        until = self._closing_namespaces.get(key[0])
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        del self._closing_namespaces[key[0]]
        return False

    def jobs_on_node(self, node: str) -> set[JobKey]:
        """TrainingJobs with a worker on NODE, or NODE in their placement."""
        on_node = {
            p.job_key
            for p in self.inventory.pods_on_node(node)
            if p.job_key is not None and p.labels.get(labels.JOB_KIND) == "TrainingJob"
        }
        return (on_node | self._placed_on.get(node, set())) & self.jobs.keys()

    def _wake_at(self, job: TrainingJob, when: datetime, now: datetime) -> None:
        """Reconcile JOB again at WHEN; an earlier wake-up already pending for it stands."""
        key = (job.metadata["namespace"], job.metadata["name"])
        self.queue.add_after(key, max(1.0, (when - now).total_seconds()))

    def cluster_snapshot(self) -> ClusterSnapshot:
        """The cluster as placement sees it, shared with the InferenceService controller: every pod's
        GPUs, the ranks of placed gangs not created yet, and what is promised but not written yet."""
        reserved: dict[str, int] = self.in_flight.by_node()
        for (namespace, name), obj in self.jobs.items():
            if finished(obj):
                continue
            job = self._read(obj)
            if self._in_closing_namespace((namespace, name)):
                continue
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


def finished(obj: dict[str, Any]) -> bool:
    """The stored status says the job succeeded or failed: read off the object, with no model made."""
    status = obj.get("status")
    return isinstance(status, dict) and status.get("phase") in FINISHED


def start_now_requested(job: TrainingJob) -> bool:
    """The user set the start-now annotation: the job skips its carbon deferral."""
    return str((job.metadata.get("annotations") or {}).get(labels.START_NOW, "")).lower() == "true"


def _placed_nodes(obj: dict[str, Any] | None) -> set[str]:
    """The nodes in OBJ's status placement, read defensively: status is whatever was stored."""
    status = (obj or {}).get("status")
    placement = status.get("placement") if isinstance(status, dict) else None
    nodes = placement.get("nodes") if isinstance(placement, dict) else None
    return {n for n in nodes if isinstance(n, str)} if isinstance(nodes, list) else set()


def parse_job(obj: dict[str, Any]) -> TrainingJob | ValidationError:
    try:
        return TrainingJob.model_validate(obj)
    except ValidationError as error:
        # The API server validated it: the CRD installed is older or looser than this
        # operator's model (an object stored before an upgrade tightened a bound).
        log.error("cannot read TrainingJob %s: %s", obj.get("metadata", {}).get("name"), error)
        return error


class TemplateChangedError(Exception):
    """The job read again for its launch is not the one placed: the launch waits for the watch to catch up."""
