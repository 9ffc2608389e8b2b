"""The operator's picture of the cluster, fed by node and pod watches.

Every node's GPUs, product, topology labels, capacity type, taints and health;
every pod's GPU requests (all pods, not only ours). Watch events keep it
current; a periodic relist (`relist_nodes`/`relist_pods`) repairs whatever a
dropped watch missed, so it converges after restarts and missed events.

A relist never puts back older state than the watch already gave: each object's
resourceVersion is remembered (`versions.py`), a listed copy older than the one
held is dropped, and only objects last seen no later than the list are deleted
when the list leaves them out.

What is kept of each object is what placement and the job lifecycle read, not
the object: a large cluster has a hundred thousand pods, most of them not ours.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from aisched.api import TopologyLevel
from aisched.kube import labels
from aisched.kube.versions import VersionLedger
from aisched.policy.cluster import ClusterSnapshot, Node, NodeLabelKeys, Taint, node_from_labels
from aisched.settings import Settings

PodKey = tuple[str, str]
"""(namespace, name) of a pod."""


@dataclass(frozen=True, slots=True)
class PodRecord:
    namespace: str
    name: str
    node: str | None
    gpus: int
    phase: str
    labels: dict[str, str]
    """Only the operator's own labels (`aisched.io/...`): the others are never read."""
    terminating: bool
    gated: bool
    disruption_target: bool
    exit_code: int | None = None
    termination_message: str | None = None
    """Kept for the operator's own pods only: the workers' checkpoint reports."""
    unschedulable_since: datetime | None = None
    unschedulable_message: str | None = None

    pinned_node: str | None = None  # nodeSelector kubernetes.io/hostname: where it will bind
    resource_version: str = field(default="", compare=False)

    @property
    def gpu_node(self) -> str | None:
        """The node whose GPUs this pod holds, or is about to: bound, or pinned and waiting to bind."""
        return self.node or self.pinned_node

    @property
    def holds_gpus(self) -> bool:
        return self.gpu_node is not None and self.phase not in ("Succeeded", "Failed")

    @property
    def job_key(self) -> tuple[str, str] | None:
        name = self.labels.get(labels.JOB_NAME)
        return (self.namespace, name) if name else None


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the inventory keeps of one Node object."""

    node: Node
    ready: bool
    resource_version: str = field(default="", compare=False)


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _timestamp(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _intern(value: str | None) -> str | None:
    # Node names, namespaces and phases repeat across thousands of pods: one string each.
    return sys.intern(value) if value is not None else None


@dataclass
class Inventory:
    settings: Settings
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[PodKey, PodRecord] = field(default_factory=dict)
    _pods_by_node: dict[str, set[PodKey]] = field(default_factory=lambda: defaultdict(set))
    _pods_by_job: dict[tuple[str, str], set[PodKey]] = field(default_factory=lambda: defaultdict(set))

    _label_keys: NodeLabelKeys = field(init=False)
    _not_ready: set[str] = field(default_factory=set)
    _node_versions: VersionLedger[str] = field(default_factory=VersionLedger)
    _pod_versions: VersionLedger[PodKey] = field(default_factory=VersionLedger)

    def __post_init__(self) -> None:
        topology = self.settings.topology
        self._label_keys = NodeLabelKeys(
            topology={
                TopologyLevel.NVLINK_DOMAIN: topology.nvlink_domain,
                TopologyLevel.RACK: topology.rack,
                TopologyLevel.ZONE: topology.zone,
            },
            gpu_product=self.settings.gpu_product_label,
            spot_labels=self.settings.spot_labels,
            interruption_taints=frozenset(self.settings.interruption_taints),
        )

    # -- nodes --------------------------------------------------------------

    def node_from_object(self, obj: dict[str, Any]) -> NodeRecord:
        metadata, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        node = node_from_labels(
            sys.intern(metadata["name"]),
            labels=metadata.get("labels") or {},
            taints=[Taint.from_dict(t) for t in spec.get("taints") or []],
            allocatable_gpus=_quantity((status.get("allocatable") or {}).get(self.settings.gpu_resource, 0)),
            used_gpus=0,  # filled from the pods when a snapshot is taken
            schedulable=ready and not spec.get("unschedulable"),
            keys=self._label_keys,
        )
        return NodeRecord(node, ready, metadata.get("resourceVersion") or "")

    def upsert_node(self, obj: dict[str, Any]) -> bool:
        """A node's watch event; True when it changed in a way placement sees (not a heartbeat)."""
        return self.put_node(self.node_from_object(obj))

    def put_node(self, record: NodeRecord) -> bool:
        """Keep RECORD unless we hold a newer copy; True when what placement sees changed."""
        name = record.node.name
        if self._node_versions.is_stale(name, record.resource_version):
            return False
        self._node_versions.saw(name, record.resource_version)
        changed = self.nodes.get(name) != record.node or (name in self._not_ready) == record.ready
        self.nodes[name] = record.node
        if record.ready:
            self._not_ready.discard(name)
        else:
            self._not_ready.add(name)
        return changed

    def delete_node(self, name: str, resource_version: str | None = None) -> bool:
        """A node's deletion; False when we held a newer copy (the event is older) or no node."""
        if self._node_versions.is_stale(name, resource_version):
            return False
        self._node_versions.deleted(name, resource_version)
        self._not_ready.discard(name)
        return self.nodes.pop(name, None) is not None

    def relist_nodes(self, records: Iterable[NodeRecord], list_version: str) -> list[str]:
        """Every node as of LIST_VERSION; the names of those that changed or went."""
        self._node_versions.begin_relist(list_version)
        listed, changed = set(), []
        for record in records:
            listed.add(record.node.name)
            if self.put_node(record):
                changed.append(record.node.name)
        for name in self._node_versions.absent(listed, list_version):
            self.delete_node(name, list_version)
            changed.append(name)
        return changed

    def replace_nodes(self, objects: Iterable[dict[str, Any]], list_version: str = "") -> list[str]:
        return self.relist_nodes((self.node_from_object(obj) for obj in objects), list_version)

    def doomed_nodes(self) -> frozenset[str]:
        """Nodes whose workloads must move: an interruption notice, or NotReady."""
        return frozenset(n.name for n in self.nodes.values() if n.interrupted) | frozenset(self._not_ready)

    def snapshot(self, reserved: dict[str, int] | None = None) -> ClusterSnapshot:
        """The cluster for placement: GPUs of every pod bound or pinned to a node, plus `reserved` ones."""
        reserved = reserved or {}
        return ClusterSnapshot(
            replace(node, used_gpus=self.used_gpus(name) + reserved.get(name, 0)) for name, node in self.nodes.items()
        )

    # -- pods ---------------------------------------------------------------

    def pod_from_object(self, obj: dict[str, Any]) -> PodRecord:
        metadata, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        resource = self.settings.gpu_resource

        def requested(container: dict[str, Any]) -> int:
            resources = container.get("resources") or {}
            amount = (resources.get("requests") or {}).get(resource) or (resources.get("limits") or {}).get(resource)
            return _quantity(amount or 0)

        # Init containers run one at a time before the others, as the scheduler counts them.
        gpus = max(
            sum(requested(c) for c in spec.get("containers") or []),
            max((requested(c) for c in spec.get("initContainers") or []), default=0),
        )
        ours = {k: v for k, v in (metadata.get("labels") or {}).items() if k.startswith(labels.PREFIX + "/")}
        exit_code, message = _termination(status)
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        scheduled = conditions.get("PodScheduled", {})
        unschedulable = scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
        return PodRecord(
            namespace=sys.intern(metadata["namespace"]),
            name=metadata["name"],
            node=_intern(spec.get("nodeName")),
            gpus=gpus,
            phase=sys.intern(status.get("phase", "Pending")),
            labels=ours,
            terminating=metadata.get("deletionTimestamp") is not None,
            gated=bool(spec.get("schedulingGates")),
            disruption_target=conditions.get("DisruptionTarget", {}).get("status") == "True",
            exit_code=exit_code,
            termination_message=message if ours else None,
            pinned_node=_intern((spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")),
            unschedulable_since=_timestamp(scheduled.get("lastTransitionTime")) if unschedulable else None,
            unschedulable_message=scheduled.get("message") if unschedulable and ours else None,
            resource_version=metadata.get("resourceVersion") or "",
        )

    def upsert_pod(self, obj: dict[str, Any]) -> PodRecord:
        """A pod's watch event; the record held afterwards (ours, when the event was older)."""
        record = self.pod_from_object(obj)
        self.put_pod(record)
        return self.pods.get((record.namespace, record.name), record)

    def put_pod(self, record: PodRecord) -> bool:
        """Keep RECORD unless we hold a newer copy; True when what we hold changed."""
        key = (record.namespace, record.name)
        if self._pod_versions.is_stale(key, record.resource_version):
            return False
        self._pod_versions.saw(key, record.resource_version)
        old = self._forget_pod(key)
        self.pods[key] = record
        if record.gpu_node:
            self._pods_by_node[record.gpu_node].add(key)
        if record.job_key:
            self._pods_by_job[record.job_key].add(key)
        return old != record

    def delete_pod(self, namespace: str, name: str, resource_version: str | None = None) -> PodRecord | None:
        """A pod's deletion: the record it removed, or None (no such pod, or we hold a newer one)."""
        key = (namespace, name)
        if self._pod_versions.is_stale(key, resource_version):
            return None
        self._pod_versions.deleted(key, resource_version)
        return self._forget_pod(key)

    def relist_pods(self, records: Iterable[PodRecord], list_version: str) -> list[PodRecord]:
        """Every pod as of LIST_VERSION; the records that changed, and those removed (as they were)."""
        self._pod_versions.begin_relist(list_version)
        listed, changed = set(), []
        for record in records:
            listed.add((record.namespace, record.name))
            if self.put_pod(record):
                changed.append(record)
        for namespace, name in self._pod_versions.absent(listed, list_version):
            removed = self.delete_pod(namespace, name, list_version)
            if removed is not None:
                changed.append(removed)
        return changed

    def replace_pods(self, objects: Iterable[dict[str, Any]], list_version: str = "") -> list[PodRecord]:
        return self.relist_pods((self.pod_from_object(obj) for obj in objects), list_version)

    def _forget_pod(self, key: PodKey) -> PodRecord | None:
        old = self.pods.pop(key, None)
        if old is None:
            return None
        if old.gpu_node:
            _discard(self._pods_by_node, old.gpu_node, key)
        if old.job_key:
            _discard(self._pods_by_job, old.job_key, key)
        return old

    def pods_of_job(self, namespace: str, name: str) -> list[PodRecord]:
        return [self.pods[key] for key in sorted(self._pods_by_job.get((namespace, name), ()))]

    def pods_on_node(self, node: str) -> list[PodRecord]:
        """Pods bound or pinned to NODE."""
        return [self.pods[key] for key in self._pods_by_node.get(node, ())]

    def used_gpus(self, node: str) -> int:
        return sum(self.pods[key].gpus for key in self._pods_by_node.get(node, ()) if self.pods[key].holds_gpus)


def _discard(index: dict[Any, set[PodKey]], at: Any, key: PodKey) -> None:
    keys = index.get(at)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[at]  # nodes and jobs come and go: no empty sets left behind


def _termination(status: dict[str, Any]) -> tuple[int | None, str | None]:
    """The exit code (a failing container's first) and message of containers that stopped."""
    exit_code, message = None, None
    for container_status in status.get("containerStatuses") or []:
        terminated = (container_status.get("state") or {}).get("terminated")
        if terminated:
            if exit_code is None or terminated.get("exitCode", 0) != 0:
                exit_code = terminated.get("exitCode")
            message = terminated.get("message") or message
    return exit_code, message
