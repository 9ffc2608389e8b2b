"""What the TrainingJob controller knows of its jobs and Queues: one store, handed to every part.

The watch handlers put objects in; the parts read them (a job's model is made once per object,
until the next watch event or our own status write replaces it) and keep no copy of their own.
The store also answers what follows from the jobs alone: the views by phase (unfinished, holding
GPUs, running) kept as objects come and go, which jobs sit on a node, which are in a namespace
being deleted, and the cluster as placement sees it, with the GPUs of placed gangs whose pods are
not created yet.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from aisched.api import TrainingJob, TrainingJobPhase
from aisched.api.training_job import TrainingJobStatus
from aisched.controller.cluster_state import ClusterState, UncreatedHolds
from aisched.controller.templates import elided
from aisched.controller.workqueue import WorkQueue
from aisched.kube import labels
from aisched.kube.records import PodRecord
from aisched.kube.versions import is_newer
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.lifecycle import FINISHED, HOLDS_GPUS
from aisched.policy.placement_record import PlacementMade
from aisched.policy.scheduler.jobs import admitted_shape
from aisched.policy.shared_room import SharePart

log = logging.getLogger(__name__)
JobKey = tuple[str, str]
PLURAL = "trainingjobs"
# A namespace found being deleted is left alone this long: its jobs can create nothing and hold no GPUs.


def utc_now() -> datetime:
    return datetime.now(UTC)


class JobStore:
    """The TrainingJobs and Queues as the watches (and our own writes) last showed them."""

    def __init__(
        self,
        state: ClusterState,
    ) -> None:
        self.state = state
        self.inventory = state.inventory
        self.in_flight = state.in_flight
        """GPUs promised by any controller, not yet written down."""
        state.holds_from(self.uncreated_holds)
        self.jobs: dict[JobKey, dict[str, Any]] = {}
        self.queues = state.queues
        # Each cycle reads every job several times; an object is parsed once, until the next watch event
        # replaces it. An object the model refuses is kept with what the model said, for the condition
        # that tells its user.
        self._parsed: dict[JobKey, tuple[dict[str, Any], TrainingJob | ValidationError]] = {}
        self.elided_templates: set[JobKey] = set()
        """Jobs kept without their template's process settings (templates.py): their launch reads them again."""
        # The placement this process last wrote for each job: the status is our record, never a grant
        # (`policy.placement_record`).
        self._placements_made: dict[JobKey, PlacementMade] = {}
        # Jobs by the nodes of their status placement: a node's event marks those jobs, not every job.
        self._placed_on: dict[str, set[JobKey]] = {}
        self.closing = state.closing
        """Namespaces the API server said are being deleted (the serving controller's record too)."""
        # Views by the phase each stored object says (insertion-ordered, as `jobs`): a cycle reads the
        # unfinished jobs and a snapshot the placed ones, never the backlog of finished ones.
        self._unfinished: dict[JobKey, None] = {}
        self._holding: dict[JobKey, None] = {}
        self._running: dict[JobKey, None] = {}

    # -- the watch's objects, and our writes ----------------------------------------

    def seen(self, obj: dict[str, Any]) -> JobKey | None:
        """OBJ from a watch event, kept (without its template's process settings where they are
        large); its key, or None for the event of a write older than one of ours that has landed."""
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        held = self.jobs.get(key)
        if held is not None and is_newer(
            held["metadata"].get("resourceVersion"), obj["metadata"].get("resourceVersion")
        ):
            # Its status would undo ours (a chunk end's pause read back as Running). The events of
            # our writes follow.
            return None
        kept = elided(obj)
        # A template the model refuses is kept whole, for the condition that tells its user why.
        if kept is not None and not isinstance(parse_job(obj), ValidationError):
            obj = kept  # its key too: nothing kept points into the watch's parse of the object
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            self.elided_templates.add(key)
        else:
            self.elided_templates.discard(key)
        self.put(key, obj)
        return key

    def put(self, key: JobKey, obj: dict[str, Any]) -> None:
        """Our copy of a job, from its watch event or our own status write."""
        old = self.jobs.get(key)
        self.jobs[key] = obj
        if finished(obj):
            self._parsed.pop(key, None)
        phase = _phase(obj)
        for view, member in (
            (self._unfinished, phase not in FINISHED),
            (self._holding, phase in HOLDS_GPUS),
            (self._running, phase == TrainingJobPhase.RUNNING),
        ):
            if member:
                view.setdefault(key, None)
            else:
                view.pop(key, None)
        before, after = _placed_nodes(old), _placed_nodes(obj)
        for node in before - after:
            self._unplace(key, node)
        for node in after - before:
            self._placed_on.setdefault(node, set()).add(key)

    def written(
        self, obj: dict[str, Any], status: TrainingJobStatus, version: str | None, wire: dict[str, Any] | None = None
    ) -> None:
        """STATUS (WIRE, its wire form, where the writer has it) is on the server, at VERSION: our copy holds
        it, so the next pass does not act on a stale one, and the watch events of earlier writes, still on
        their way, are older."""
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        made = PlacementMade.of(status)
        if made is None:
            self._placements_made.pop((namespace, name), None)
        else:
            self._placements_made[(namespace, name)] = made
        metadata = {**obj["metadata"], "resourceVersion": version} if version else obj["metadata"]
        status_wire = wire if wire is not None else status.to_wire()
        self.put((namespace, name), {**obj, "metadata": metadata, "status": status_wire})

    def placement_made(self, key: JobKey) -> PlacementMade | None:
        """The placement this process last wrote for KEY."""
        return self._placements_made.get(key)

    def forget(self, key: JobKey) -> None:
        """KEY is gone: nothing of it is kept."""
        self._placements_made.pop(key, None)
        self.elided_templates.discard(key)
        self._parsed.pop(key, None)
        for view in (self._unfinished, self._holding, self._running):
            view.pop(key, None)
        for node in _placed_nodes(self.jobs.pop(key, None)):
            self._unplace(key, node)

    def _unplace(self, key: JobKey, node: str) -> None:
        jobs = self._placed_on.get(node, set())
        jobs.discard(key)
        if not jobs:
            self._placed_on.pop(node, None)

    # -- the typed records ------------------------------------------------------------

    def read(self, obj: dict[str, Any]) -> TrainingJob | None:
        """OBJ as a model; the models are shared, so callers copy before they change one.

        None for an object the model refuses (`refusal` says why).
        """
        parsed = self.parse_once(obj)
        return parsed if isinstance(parsed, TrainingJob) else None

    def refusal(self, obj: dict[str, Any]) -> ValidationError | None:
        """Why the model refuses OBJ; None when it reads it."""
        parsed = self.parse_once(obj)
        return parsed if isinstance(parsed, ValidationError) else None

    def parse_once(self, obj: dict[str, Any]) -> TrainingJob | ValidationError:
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

    def models_kept(self) -> set[JobKey]:
        """The jobs whose model is kept between reads."""
        return set(self._parsed)

    def running(self) -> Iterator[tuple[JobKey, dict[str, Any], TrainingJob]]:
        """The readable jobs in phase Running, with their objects; a copy, so writes may follow."""
        for key in list(self._running):
            obj = self.jobs[key]
            job = self.read(obj)
            if job is not None and job.status.phase == TrainingJobPhase.RUNNING:
                yield key, obj, job

    def unfinished(self) -> Iterator[tuple[JobKey, dict[str, Any]]]:
        """The jobs that have not succeeded or failed, outside namespaces being deleted; a copy."""
        for key in list(self._unfinished):
            if not self.in_closing_namespace(key):
                yield key, self.jobs[key]

    def holding(self) -> Iterator[tuple[JobKey, dict[str, Any]]]:
        """The jobs whose status says they hold GPUs (placed, running, stopping), outside namespaces
        being deleted; a copy."""
        for key in list(self._holding):
            if not self.in_closing_namespace(key):
                yield key, self.jobs[key]

    # -- Queues ------------------------------------------------------------------------

    def queue_object(self, name: str) -> dict[str, Any] | None:
        """Queue NAME as stored; the default queue, where nobody wrote one, as the locked one the
        operator creates (it grants nothing), never an open one."""
        return self.state.queue_object(name)

    # -- what follows from the jobs -------------------------------------------------------

    def namespace_closed(self, namespace: str) -> None:
        """NAMESPACE is being deleted: its jobs are left out of scheduling and reconciles for a while
        (`closing_namespaces`)."""
        self.closing.closed(namespace)

    def in_closing_namespace(self, key: JobKey) -> bool:
        return self.closing.closing(key[0])

    def jobs_on_node(self, node: str) -> set[JobKey]:
        """TrainingJobs with a worker on NODE, or NODE in their placement."""
        on_node = {
            p.job_key
            for p in self.inventory.pods_on_node(node)
            if p.job_key is not None and p.labels.get(labels.JOB_KIND) == "TrainingJob"
        }
        return (on_node | self._placed_on.get(node, set())) & self.jobs.keys()

    def _current_gang(self, key: JobKey, job: TrainingJob) -> dict[str | None, PodRecord]:
        """The pods of the job's current gang generation, by rank label."""
        generation = str(job.status.gang_generation)
        return {
            p.labels.get(labels.RANK): p
            for p in self.inventory.pods_of_job(*key)
            if p.labels.get(labels.GANG_GENERATION) == generation
        }

    def parts_held(self, job: TrainingJob) -> tuple[SharePart, ...]:
        """A fraction's gang: the part of a GPU each rank's pod holds, by rank; a rank whose pod is not
        made yet holds the whole GPU `cluster_snapshot` keeps for it (`SharePart` with no device).
        Other gangs: none."""
        share, placement = admitted_shape(job)[1], job.status.placement  # what its pods were made with
        if share is None or share.mig_profile is not None or placement is None:
            return ()
        by_rank = self._current_gang(job_key(job), job)
        parts = []
        for rank, node in enumerate(placement.nodes):
            pod = by_rank.get(str(rank))
            if pod is None:
                parts.append(SharePart(node, "", 0, 0, splits=True))
            elif pod.share is not None and pod.holds_gpus and pod.gpu_node == node:
                parts.append(SharePart(node, pod.share.device, pod.share.milli, pod.share.memory_mib, splits=False))
            else:
                parts.append(SharePart(node, "", 0, 0, splits=False))  # it holds no part of a GPU there
        return tuple(parts)

    def cluster_snapshot(self) -> ClusterSnapshot:
        """The cluster as every controller places into it (`ClusterState.snapshot`)."""
        return self.state.snapshot()

    def uncreated_holds(self) -> UncreatedHolds:
        """What placed gangs hold through their status placement: the ranks whose pods are not created yet.

        Pods that exist hold their GPUs in the inventory (pinned by node selector even while gated);
        ranks whose pods are not created yet hold them through the placement: a whole GPU each (a
        fraction's GPU is chosen as its pod is made), or a MIG instance."""
        reserved: dict[str, int] = {}
        migs: list[tuple[str, str]] = []
        for key, obj in self.holding():
            job = self.read(obj)
            if job is None or job.status.phase not in HOLDS_GPUS or job.status.placement is None:
                continue
            created = self._current_gang(key, job)
            gpus, share = admitted_shape(job)  # what the gang was admitted with, whatever its spec says now
            profile = share.mig_profile if share is not None else None
            for rank, node in enumerate(job.status.placement.nodes):
                if str(rank) in created:
                    continue
                if profile is not None:
                    migs.append((node, profile))
                else:
                    reserved[node] = reserved.get(node, 0) + gpus
        return UncreatedHolds(reserved, migs)


def finished(obj: dict[str, Any]) -> bool:
    """The stored status says the job succeeded or failed: read off the object, with no model made."""
    return _phase(obj) in FINISHED


def _phase(obj: dict[str, Any]) -> str | None:
    """The phase OBJ's stored status says, read defensively: status is whatever was stored."""
    status = obj.get("status")
    phase = status.get("phase") if isinstance(status, dict) else None
    return phase if isinstance(phase, str) else None


def start_now_requested(job: TrainingJob) -> bool:
    """The user set the start-now annotation: the job skips its carbon deferral."""
    return str((job.metadata.get("annotations") or {}).get(labels.START_NOW, "")).lower() == "true"


def job_key(job: TrainingJob) -> JobKey:
    return job.metadata["namespace"], job.metadata["name"]


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


def wake_at(queue: WorkQueue[JobKey], job: TrainingJob, when: datetime, now: datetime) -> None:
    """Reconcile JOB again at WHEN; an earlier wake-up already pending for it stands."""
    queue.add_after(job_key(job), max(1.0, (when - now).total_seconds()))
