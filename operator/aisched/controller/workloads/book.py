"""Every workload of the other kinds, as the watches show it: its typed record and its pods.

Each object is read into a `Workload` (or a `Refusal`) once per watch event, and only that and its
identity are kept: the spec's templates are not. A plain pod group has no object: it is read from
its pods whenever one of them changes. A RayCluster a RayJob made is no workload of its own: its
pods are the RayJob's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aisched.controller.workloads.pods import WorkloadPod, WorkloadRef, read_workload_pod
from aisched.policy.workloads.kinds import read_workload
from aisched.policy.workloads.metadata import read_admitted
from aisched.policy.workloads.model import PLACEMENT_ANNOTATION, Refusal, Workload, WorkloadKind
from aisched.policy.workloads.pod_group import read_pod_group


@dataclass
class WorkloadEntry:
    ref: WorkloadRef
    read: Workload | Refusal | None = None
    """None: an object with no queue label (left alone), or a pod group with no pod left."""
    uid: str = ""
    recorded: bool = False
    """Its object carries the operator's placement record, whatever its labels say now."""
    pods: dict[str, WorkloadPod] = field(default_factory=dict)
    group_pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    """A pod group's pods, slimmed to what `read_pod_group` reads."""
    seen: bool = False
    """Its object was seen (a pod group: at least one pod)."""
    version: str = ""
    """The resourceVersion of the object `read` was read from: an admission decided on it is written only
    if the object is still that one (a spec edited since, its GPUs raised, is read and decided again)."""

    revision: int = 0
    """Counts every change the watches showed (its object, any pod): what a cycle derived from the entry
    at one revision holds until the next."""
    charged_queue: str | None = None
    """The queue it was last charged to: its pods still draining stay charged there, whatever its object
    says now (relabelled, refused, deleted)."""
    recorded_queue: str | None = None
    """The queue its object's placement record names (only the operator writes it): where it is charged
    when this process never charged it, as after a restart that finds it relabelled or refused."""

    def queue_to_charge(self, may_charge: Callable[[str], bool]) -> str | None:
        """Where this process charged it; else where its record says; else, its object gone before this
        process saw it (deleted before a restart), where the operator's label on its pods says, of the
        queues MAY_CHARGE says its namespace may use (the label is the operator's only where the chart's
        policy is in force)."""
        if self.charged_queue is not None:
            return self.charged_queue
        if self.recorded_queue is not None:
            return self.recorded_queue
        labelled = {p.charged_queue for p in self.pods.values() if p.charged_queue is not None}
        return min((queue for queue in labelled if may_charge(queue)), default=None)

    @property
    def kind(self) -> WorkloadKind:
        return self.ref[0]

    @property
    def live_pods(self) -> list[WorkloadPod]:
        return [p for p in self.pods.values() if p.live]


@dataclass
class WorkloadBook:
    kinds: frozenset[WorkloadKind] = frozenset(WorkloadKind)
    """The kinds scheduled: a pod of any other kind is no one's here."""
    entries: dict[WorkloadRef, WorkloadEntry] = field(default_factory=dict)
    _made_by: dict[WorkloadRef, WorkloadRef] = field(default_factory=dict)
    """RayClusters a RayJob made, to the RayJob."""

    def object_seen(self, kind: WorkloadKind, obj: Mapping[str, Any]) -> WorkloadEntry | None:
        """OBJ changed: read again. None when it is no workload here (a RayJob's RayCluster)."""
        metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        assert isinstance(metadata, Mapping)
        ref: WorkloadRef = (kind, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if (made_by := _ray_job_owner(metadata)) is not None:
            # A RayJob's own RayCluster (its pods are the RayJob's) or its submitter Job: the RayJob is
            # what is held and placed, and KubeRay copies its labels onto both.
            if kind is WorkloadKind.RAY_CLUSTER:
                owner: WorkloadRef = (WorkloadKind.RAY_JOB, ref[1], made_by)
                self._made_by[ref] = owner
                early = self.entries.pop(ref, None)  # pods the watch showed before their cluster
                if early is not None:
                    adopted = self.entries.setdefault(owner, WorkloadEntry(owner))
                    adopted.pods.update(early.pods)
                    adopted.revision += 1
            return None
        read = read_workload(kind, obj)
        annotations = metadata.get("annotations")
        text = annotations.get(PLACEMENT_ANNOTATION) if isinstance(annotations, Mapping) else None
        recorded = text is not None
        if read is None and not recorded and ref not in self.entries:
            return None  # no queue's, and never was: the cluster's other Jobs and Deployments are kept nowhere
        entry = self.entries.setdefault(ref, WorkloadEntry(ref))
        entry.read, entry.recorded, entry.seen = read, recorded, True
        record = read_admitted(text) if isinstance(text, str) else None
        entry.recorded_queue = record.queue if record is not None else None
        entry.revision += 1
        entry.uid = str(metadata.get("uid") or "")
        version = metadata.get("resourceVersion")
        entry.version = version if isinstance(version, str) else ""
        return entry

    def object_gone(self, kind: WorkloadKind, namespace: str, name: str) -> WorkloadEntry | None:
        ref: WorkloadRef = (kind, namespace, name)
        self._made_by.pop(ref, None)
        entry = self.entries.get(ref)
        if entry is not None:
            entry.read, entry.seen, entry.recorded = None, False, False
            entry.revision += 1
            if not entry.pods:
                del self.entries[ref]
        return entry

    def pod_seen(self, obj: Mapping[str, Any]) -> WorkloadEntry | None:
        pod = read_workload_pod(obj)
        ref = self._made_by.get(pod.workload, pod.workload) if pod is not None else None
        if pod is None or ref is None or ref[0] not in self.kinds:
            return None
        entry = self.entries.setdefault(ref, WorkloadEntry(ref))
        entry.pods[pod.name] = pod
        entry.revision += 1
        if ref[0] is WorkloadKind.POD_GROUP:
            entry.group_pods[pod.name] = _slim_pod(obj)
            self._read_group(entry)
        return entry

    def pod_of(self, workload: WorkloadRef, name: str) -> WorkloadPod | None:
        """Pod NAME of WORKLOAD (the ref its pod names) as last seen; None when none is held."""
        entry = self.entries.get(self._made_by.get(workload, workload))
        return entry.pods.get(name) if entry is not None else None

    def pod_gone(self, namespace: str, name: str, obj: Mapping[str, Any]) -> WorkloadEntry | None:
        pod = read_workload_pod(obj)
        return None if pod is None else self.pod_of_gone(self._made_by.get(pod.workload, pod.workload), name)

    def pod_of_gone(self, ref: WorkloadRef, name: str) -> WorkloadEntry | None:
        """The pod NAME of workload REF is gone (a DELETED event, or a relist that no longer lists it)."""
        entry = self.entries.get(ref)
        if entry is None:
            return None
        entry.pods.pop(name, None)
        entry.revision += 1
        if ref[0] is WorkloadKind.POD_GROUP:
            entry.group_pods.pop(name, None)
            self._read_group(entry)
        if not entry.pods and not entry.seen:
            del self.entries[ref]
        return entry

    def pod_owners(self) -> dict[tuple[str, str], WorkloadRef]:
        """Every pod held, by (namespace, name), to the workload it is counted for."""
        return {(ref[1], name): ref for ref, entry in self.entries.items() for name in entry.pods}

    def __iter__(self) -> Iterator[WorkloadEntry]:
        return iter(list(self.entries.values()))

    def get(self, ref: WorkloadRef) -> WorkloadEntry | None:
        return self.entries.get(ref)

    def by_key(self) -> dict[str, WorkloadEntry]:
        """Entries by the scheduler's key (`Workload.key`), for those read into a workload."""
        return {e.read.key: e for e in self.entries.values() if isinstance(e.read, Workload)}

    def _read_group(self, entry: WorkloadEntry) -> None:
        live = [obj for name, obj in entry.group_pods.items() if entry.pods[name].live]
        entry.read = read_pod_group(live) if live else None
        entry.seen = bool(entry.group_pods)


def _ray_job_owner(metadata: Mapping[str, Any]) -> str | None:
    owners = metadata.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, Mapping) and owner.get("kind") == "RayJob" and owner.get("controller"):
            name = owner.get("name")
            return name if isinstance(name, str) and name else None
    return None


def _slim_pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(metadata, Mapping) and isinstance(spec, Mapping)
    keep_meta = ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp")
    keep_spec = ("containers", "initContainers", "tolerations", "nodeSelector", "resourceClaims")
    return {
        "metadata": {k: metadata[k] for k in keep_meta if k in metadata},
        "spec": {k: spec[k] for k in keep_spec if k in spec},
    }
