"""The operator's picture of the cluster, fed by node and pod watches.

Every node's GPUs, product, topology labels, capacity type, taints and health;
every pod's GPU requests (all pods, not only ours). Watch events keep it
current; a periodic relist (`replace_nodes`/`replace_pods`) repairs whatever a
dropped watch missed, so it converges after restarts and missed events.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from aisched.api import TopologyLevel
from aisched.kube import labels
from aisched.kube.quantities import whole_gpus
from aisched.policy.cluster import ClusterSnapshot, Node, NodeLabelKeys, Taint, node_from_labels
from aisched.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PodRecord:
    namespace: str
    name: str
    node: str | None
    gpus: int
    phase: str
    labels: dict[str, str]
    terminating: bool
    gated: bool
    disruption_target: bool
    exit_code: int | None = None
    termination_message: str | None = None
    unschedulable_since: datetime | None = None
    unschedulable_message: str | None = None

    pinned_node: str | None = None  # nodeSelector kubernetes.io/hostname: where it will bind

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


# Readers of the parts of a watched object the inventory uses. A watch hands over whatever
# an object holds; a field of the wrong type reads as absent, so that one odd node or pod
# costs its own accuracy and never the watch handler (and with it every other object).


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _string_map(value: Any) -> dict[str, str]:
    return {str(k): v for k, v in _mapping(value).items() if isinstance(v, str)}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _timestamp(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _taints(value: Any, node: str) -> list[Taint]:
    taints = []
    for taint in _items(value):
        try:
            taints.append(Taint.from_dict(taint))
        except (KeyError, ValueError):
            log.warning("node %s: ignoring taint %r, which is none the scheduler knows", node, taint)
    return taints


@dataclass
class Inventory:
    settings: Settings
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[tuple[str, str], PodRecord] = field(default_factory=dict)
    _pods_by_node: dict[str, set[tuple[str, str]]] = field(default_factory=lambda: defaultdict(set))
    _pods_by_job: dict[tuple[str, str], set[tuple[str, str]]] = field(default_factory=lambda: defaultdict(set))

    _label_keys: NodeLabelKeys = field(init=False)
    _not_ready: set[str] = field(default_factory=set)

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

    def upsert_node(self, obj: dict[str, Any]) -> Node | None:
        """Record a node as a watch or a list shows it; None (and a log line) for one that cannot be read."""
        try:
            node, ready = self._node_from_object(obj)
        except Exception:
            log.exception(
                "cannot read node %r; keeping what was known of it", _mapping(obj.get("metadata")).get("name")
            )
            return None
        self.nodes[node.name] = node
        if ready:
            self._not_ready.discard(node.name)
        else:
            self._not_ready.add(node.name)
        return node

    def _node_from_object(self, obj: dict[str, Any]) -> tuple[Node, bool]:
        metadata, spec, status = obj["metadata"], _mapping(obj.get("spec")), _mapping(obj.get("status"))
        name = metadata["name"]
        conditions = _items(status.get("conditions"))
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        allocatable = _mapping(status.get("allocatable")).get(self.settings.gpu_resource, 0)
        node = node_from_labels(
            name,
            labels=_string_map(metadata.get("labels")),
            taints=_taints(spec.get("taints"), name),
            allocatable_gpus=whole_gpus(allocatable, round_up=False),
            used_gpus=0,  # filled from the pods when a snapshot is taken
            schedulable=ready and not spec.get("unschedulable"),
            keys=self._label_keys,
        )
        return node, ready

    def delete_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self._not_ready.discard(name)

    def replace_nodes(self, objects: list[dict[str, Any]]) -> None:
        self.nodes, self._not_ready = {}, set()
        for obj in objects:
            self.upsert_node(obj)

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
        metadata, spec, status = obj["metadata"], _mapping(obj.get("spec")), _mapping(obj.get("status"))
        resource = self.settings.gpu_resource

        def requested(container: dict[str, Any]) -> int:
            resources = _mapping(container.get("resources"))
            amount = _mapping(resources.get("requests")).get(resource) or _mapping(resources.get("limits")).get(
                resource
            )
            return whole_gpus(amount or 0, round_up=True)

        # Init containers run one at a time before the others, as the scheduler counts them.
        gpus = max(
            sum(requested(c) for c in _items(spec.get("containers"))),
            max((requested(c) for c in _items(spec.get("initContainers"))), default=0),
        )
        exit_code, message = None, None
        for container_status in _items(status.get("containerStatuses")):
            terminated = _mapping(_mapping(container_status.get("state")).get("terminated"))
            if terminated:
                code = _int_or_none(terminated.get("exitCode"))
                if exit_code is None or (code is not None and code != 0):
                    exit_code = code
                message = _text(terminated.get("message")) or message
        conditions = {c.get("type"): c for c in _items(status.get("conditions"))}
        scheduled = conditions.get("PodScheduled", {})
        unschedulable = scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
        return PodRecord(
            namespace=metadata["namespace"],
            name=metadata["name"],
            node=_text(spec.get("nodeName")),
            gpus=gpus,
            phase=_text(status.get("phase")) or "Pending",
            labels=_string_map(metadata.get("labels")),
            terminating=metadata.get("deletionTimestamp") is not None,
            gated=bool(spec.get("schedulingGates")),
            disruption_target=_mapping(conditions.get("DisruptionTarget")).get("status") == "True",
            exit_code=exit_code,
            termination_message=message,
            pinned_node=_text(_mapping(spec.get("nodeSelector")).get("kubernetes.io/hostname")),
            unschedulable_since=_timestamp(scheduled.get("lastTransitionTime")) if unschedulable else None,
            unschedulable_message=_text(scheduled.get("message")) if unschedulable else None,
        )

    def upsert_pod(self, obj: dict[str, Any]) -> PodRecord | None:
        """Record a pod as a watch or a list shows it; None (and a log line) for one that cannot be read."""
        try:
            record = self.pod_from_object(obj)
        except Exception:
            metadata = _mapping(obj.get("metadata"))
            log.exception(
                "cannot read pod %r/%r; keeping what was known of it", metadata.get("namespace"), metadata.get("name")
            )
            return None
        self._forget_pod((record.namespace, record.name))
        key = (record.namespace, record.name)
        self.pods[key] = record
        if record.gpu_node:
            self._pods_by_node[record.gpu_node].add(key)
        if record.job_key:
            self._pods_by_job[record.job_key].add(key)
        return record

    def delete_pod(self, namespace: str, name: str) -> None:
        self._forget_pod((namespace, name))

    def replace_pods(self, objects: list[dict[str, Any]]) -> None:
        self.pods, self._pods_by_node, self._pods_by_job = {}, defaultdict(set), defaultdict(set)
        for obj in objects:
            self.upsert_pod(obj)

    def _forget_pod(self, key: tuple[str, str]) -> None:
        old = self.pods.pop(key, None)
        if old is None:
            return
        if old.gpu_node:
            self._pods_by_node[old.gpu_node].discard(key)
        if old.job_key:
            self._pods_by_job[old.job_key].discard(key)

    def pods_of_job(self, namespace: str, name: str) -> list[PodRecord]:
        return [self.pods[key] for key in sorted(self._pods_by_job.get((namespace, name), ()))]

    def used_gpus(self, node: str) -> int:
        return sum(self.pods[key].gpus for key in self._pods_by_node.get(node, ()) if self.pods[key].holds_gpus)
