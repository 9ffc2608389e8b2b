"""The operator's picture of the cluster, fed by node, pod and ResourceClaim watches.

Every node's GPUs, product, topology labels, capacity type, taints and health;
every pod's GPU requests (all pods, not only ours), and the GPUs its DRA claims
are allocated (`claim_records.py`: as the API server says, never as the pod
names them). Watch events keep it current; a periodic relist (`relist_nodes`/`relist_pods`) repairs whatever a
dropped watch missed, so it converges after restarts and missed events.

A relist never puts back older state than the watch already gave: each object's
resourceVersion is remembered (`versions.py`), a listed copy older than the one
held is dropped, and only objects last seen no later than the list are deleted
when the list leaves them out.

What is kept of each object is what placement and the job lifecycle read, not
the object: a large cluster has a hundred thousand pods, most of them not ours.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from aisched.kube.claim_records import ClaimBook, ClaimKey, ClaimRecord, read_claim, with_claims
from aisched.kube.mig_nodes import NodeMig
from aisched.kube.records import NodeRecord, PodKey, PodRecord, read_node, read_pod
from aisched.kube.versions import VersionLedger
from aisched.policy.cluster import ClusterSnapshot, Node, NodeLabelKeys
from aisched.policy.shared_room import MILLI, SharedRoom
from aisched.policy.sharing.mig_configs import STATE_SUCCESS
from aisched.settings import Settings

__all__ = ["Inventory", "NodeRecord", "PodKey", "PodRecord"]

log = logging.getLogger(__name__)


@dataclass
class Inventory:
    settings: Settings
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[PodKey, PodRecord] = field(default_factory=dict)
    _pods_by_node: dict[str, set[PodKey]] = field(default_factory=lambda: defaultdict(set))
    _pods_by_job: dict[tuple[str, str], set[PodKey]] = field(default_factory=lambda: defaultdict(set))

    _label_keys: NodeLabelKeys = field(init=False)
    # Nodes not Ready, with since when (their Ready condition's last transition; None: unknown).
    _not_ready: dict[str, datetime | None] = field(default_factory=dict)
    # GPUs held on each node by the pods bound or pinned to it, kept as pods come and go.
    _used: dict[str, int] = field(default_factory=dict)
    # The cluster as placement sees it, kept up to date as pods change and rebuilt (lazily) only
    # when a node changes in a way placement sees: each cycle gets a copy, not a rebuild.
    _base: ClusterSnapshot | None = None
    # Nodes with an interruption notice, worked out again only when a node changes: every
    # reconcile asks, and a scan of 5,000 nodes each time was most of a reconcile's cost.
    _interrupted: frozenset[str] | None = None
    node_generation: int = 0
    """Counts the changes to nodes that placement sees: what was worked out of the nodes before
    holds while it stays the same."""
    _node_versions: VersionLedger[str] = field(default_factory=VersionLedger)
    _pod_versions: VersionLedger[PodKey] = field(default_factory=VersionLedger)
    _gpu_memory: dict[str, int] = field(default_factory=dict)
    """MiB of each of a node's GPUs (label nvidia.com/gpu.memory), for the shares of its GPUs."""
    _mig: dict[str, NodeMig] = field(default_factory=dict)
    """Nodes with MIG (a MIG manager's config label, or instances advertised): what they say of it."""
    _sharing: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per node, per GPU device: how many pods hold it through a claim, whole or a share (a GPU any holds is used)."""
    _claims: ClaimBook = field(default_factory=ClaimBook)

    def __post_init__(self) -> None:
        self._label_keys = NodeLabelKeys(
            topology=self.settings.topology.resolved(),
            gpu_product=self.settings.gpu_product_label,
            spot_labels=self.settings.spot_labels,
            interruption_taints=frozenset(self.settings.interruption_taints),
        )

    # -- nodes --------------------------------------------------------------

    def node_from_object(self, obj: dict[str, Any]) -> NodeRecord | None:
        """OBJ as the inventory keeps it; None (and a log line) for a node that cannot be read."""
        try:
            return read_node(obj, self._label_keys, self.settings.gpu_resource)
        except Exception:
            log.exception("cannot read node %r; keeping what was known of it", _name_of(obj))
            return None

    def upsert_node(self, obj: dict[str, Any]) -> bool:
        """A node's watch event; True when it changed in a way placement sees (not a heartbeat)."""
        record = self.node_from_object(obj)
        return record is not None and self.put_node(record)

    def put_node(self, record: NodeRecord) -> bool:
        """Keep RECORD unless we hold a newer copy; True when what placement sees changed."""
        name = record.node.name
        if self._node_versions.is_stale(name, record.resource_version):
            return False
        self._node_versions.saw(name, record.resource_version)
        changed = self.nodes.get(name) != record.node or (name in self._not_ready) == record.ready
        if changed:
            self._nodes_changed()
        self.nodes[name] = record.node
        self._gpu_memory[name] = record.gpu_memory_mib
        if record.mig is None:
            self._mig.pop(name, None)
        else:
            self._mig[name] = record.mig
        if record.ready:
            self._not_ready.pop(name, None)
        else:
            self._not_ready[name] = record.not_ready_since
        return changed

    def delete_node(self, name: str, resource_version: str | None = None) -> bool:
        """A node's deletion; False when we held a newer copy (the event is older) or no node."""
        if self._node_versions.is_stale(name, resource_version):
            return False
        self._node_versions.deleted(name, resource_version)
        self._not_ready.pop(name, None)
        self._gpu_memory.pop(name, None)
        self._mig.pop(name, None)
        self._nodes_changed()
        return self.nodes.pop(name, None) is not None

    def _nodes_changed(self) -> None:
        self._base = None
        self._interrupted = None
        self.node_generation += 1

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
        records = (self.node_from_object(obj) for obj in objects)
        return self.relist_nodes((r for r in records if r is not None), list_version)

    def reachable(self, node: str) -> bool:
        """NODE exists and its kubelet reports Ready: it can still confirm what happens to its pods."""
        return node in self.nodes and node not in self._not_ready

    def doomed_nodes(self, now: datetime) -> frozenset[str]:
        """Nodes whose workloads must move: an interruption notice, or NotReady past the grace.

        A kubelet restarting or a heartbeat missed is NotReady for a moment: as the node lifecycle
        controller waits before it evicts, a node counts as lost only once it has been NotReady
        for `node_not_ready_grace_seconds` (at once when nobody says since when).
        """
        if self._interrupted is None:
            self._interrupted = frozenset(n.name for n in self.nodes.values() if n.interrupted)
        grace = timedelta(seconds=self.settings.node_not_ready_grace_seconds)
        lost = {name for name, since in self._not_ready.items() if since is None or now - since >= grace}
        return self._interrupted | lost if lost else self._interrupted

    def not_ready_grace_ends(self, nodes: Iterable[str]) -> datetime | None:
        """The earliest time one of NODES, NotReady within its grace, would count as lost."""
        grace = timedelta(seconds=self.settings.node_not_ready_grace_seconds)
        ends = [since + grace for name in nodes if (since := self._not_ready.get(name)) is not None]
        return min(ends, default=None)

    def snapshot(self, reserved: dict[str, int] | None = None) -> ClusterSnapshot:
        """The cluster for placement, the caller's to change: GPUs of every pod bound or pinned to a
        node count as used, plus the `reserved` ones."""
        if self._base is None:
            self._base = ClusterSnapshot(
                (replace(node, used_gpus=self._used.get(name, 0)) for name, node in self.nodes.items()),
                self._label_keys.topology,
            )
        snapshot = self._base.copy()
        snapshot.allocate({name: gpus for name, gpus in (reserved or {}).items() if name in snapshot})
        snapshot.shared = self.shared_room()
        return snapshot

    def shared_room(self) -> SharedRoom:
        """What is left of the GPUs shares hold in part, and the free MIG instances, for placement.

        A fraction's part is read off its pod (the operator's annotation); a MIG node's free instances
        are what its device plugin advertises less what its pods ask, and none while the MIG manager
        has not applied its config or it takes no pods (cordoned, not ready, interrupted)."""
        parts: dict[str, dict[str, tuple[int, int]]] = {}
        for name in self._sharing:
            memory = self._gpu_memory.get(name, 0)
            devices: dict[str, tuple[int, int]] = {}
            for pod in self.pods_on_node(name):
                if pod.share is not None and pod.holds_gpus:
                    milli, left = devices.get(pod.share.device, (MILLI, memory))
                    devices[pod.share.device] = (milli - pod.share.milli, left - pod.share.memory_mib)
            if devices:  # a node whose claims hold whole GPUs only has no parts to share
                parts[name] = devices
        mig_nodes, mig_free = [], {}
        for name, mig in self._mig.items():
            node = self.nodes.get(name)
            applied = mig.config is None or mig.state == STATE_SUCCESS
            if node is None or not applied or not self.reachable(name) or not node.schedulable or node.interrupted:
                continue
            free = dict(mig.allocatable)
            for pod in self.pods_on_node(name):
                if pod.holds_gpus:
                    for profile in pod.mig_profiles:
                        free[profile] = free.get(profile, 0) - 1
            mig_nodes.append(node)
            mig_free[name] = {profile: count for profile, count in free.items() if count > 0}
        return SharedRoom(parts, self._gpu_memory, mig_nodes, mig_free)

    # -- pods ---------------------------------------------------------------

    def pod_from_object(self, obj: dict[str, Any]) -> PodRecord | None:
        """OBJ as the inventory keeps it; None (and a log line) for a pod that cannot be read."""
        try:
            return read_pod(obj, self.settings.gpu_resource)
        except Exception:
            log.exception("cannot read pod %r; keeping what was known of it", _name_of(obj))
            return None

    def upsert_pod(self, obj: dict[str, Any]) -> PodRecord | None:
        """A pod's watch event; the record held afterwards (ours, when the event was older)."""
        record = self.pod_from_object(obj)
        if record is None:
            return None
        self.put_pod(record)
        return self.pods.get((record.namespace, record.name), record)

    def put_pod(self, record: PodRecord) -> bool:
        """Keep RECORD unless we hold a newer copy; True when what we hold changed."""
        key = (record.namespace, record.name)
        if self._pod_versions.is_stale(key, record.resource_version):
            return False
        self._pod_versions.saw(key, record.resource_version)
        old = self._forget_pod(key)
        record = with_claims(record, self._claims.claims)
        self._keep_pod(record)
        return old != record

    def _keep_pod(self, record: PodRecord) -> None:
        key = (record.namespace, record.name)
        self.pods[key] = record
        if record.gpu_node:
            self._pods_by_node[record.gpu_node].add(key)
            self._hold(record, +1)
        if record.job_key:
            self._pods_by_job[record.job_key].add(key)
        self._claims.index(record, add=True)

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
            key = (record.namespace, record.name)
            listed.add(key)
            if self.put_pod(record):
                changed.append(self.pods[key])  # as kept: with what its claims hold
        for namespace, name in self._pod_versions.absent(listed, list_version):
            removed = self.delete_pod(namespace, name, list_version)
            if removed is not None:
                changed.append(removed)
        return changed

    def replace_pods(self, objects: Iterable[dict[str, Any]], list_version: str = "") -> list[PodRecord]:
        records = (self.pod_from_object(obj) for obj in objects)
        return self.relist_pods((r for r in records if r is not None), list_version)

    def _forget_pod(self, key: PodKey) -> PodRecord | None:
        old = self.pods.pop(key, None)
        if old is None:
            return None
        if old.gpu_node:
            _discard(self._pods_by_node, old.gpu_node, key)
            self._hold(old, -1)
        if old.job_key:
            _discard(self._pods_by_job, old.job_key, key)
        self._claims.index(old, add=False)
        return old

    # -- DRA claims: what pods hold through them ------------------------------

    def claim_from_object(self, obj: dict[str, Any]) -> ClaimRecord | None:
        """OBJ (a ResourceClaim) as the inventory keeps it; None (and a log line) for one that cannot be read."""
        try:
            return read_claim(obj)
        except Exception:
            log.exception("cannot read ResourceClaim %r; keeping what was known of it", _name_of(obj))
            return None

    def upsert_claim(self, obj: dict[str, Any]) -> list[PodRecord]:
        """A ResourceClaim's watch event; the pods whose holdings it changed, as they are now."""
        record = self.claim_from_object(obj)
        return self.put_claim(record) if record is not None else []

    def put_claim(self, record: ClaimRecord) -> list[PodRecord]:
        key = (record.namespace, record.name)
        return self._claim_changed(key) if self._claims.put(record) else []

    def delete_claim(self, namespace: str, name: str, resource_version: str | None = None) -> list[PodRecord]:
        """A ResourceClaim's deletion: the pods that held its GPUs, as they are now (holding none of them)."""
        key = (namespace, name)
        return self._claim_changed(key) if self._claims.delete(key, resource_version) else []

    def relist_claims(self, records: Iterable[ClaimRecord], list_version: str) -> list[PodRecord]:
        """Every ResourceClaim as of LIST_VERSION; the pods whose holdings changed."""
        self._claims.begin_relist(list_version)
        listed, changed = set(), {}
        for record in records:
            listed.add((record.namespace, record.name))
            changed.update({(p.namespace, p.name): p for p in self.put_claim(record)})
        for namespace, name in self._claims.absent(listed, list_version):
            changed.update({(p.namespace, p.name): p for p in self.delete_claim(namespace, name, list_version)})
        return list(changed.values())

    def claim(self, namespace: str, name: str) -> ClaimRecord | None:
        return self._claims.claims.get((namespace, name))

    def _claim_changed(self, key: ClaimKey) -> list[PodRecord]:
        """Count again what the pods naming claim KEY hold; those whose holdings changed."""
        changed = []
        for pod_key in self._claims.named_by(key):
            old = self.pods.get(pod_key)
            if old is None:
                continue
            new = with_claims(old, self._claims.claims)
            if new != old:
                self._forget_pod(pod_key)
                self._keep_pod(new)
                changed.append(new)
        return changed

    def _hold(self, record: PodRecord, sign: int) -> None:
        """Count RECORD's GPUs on its node (SIGN +1) or stop counting them (-1), in the snapshot kept too."""
        if not record.holds_gpus or record.gpu_node is None:
            return
        node = record.gpu_node
        # A GPU a claim holds, whole or in part, is one GPU in use however many pods hold it.
        delta = sign * record.gpus + sum(self._share_holders(node, device, sign) for device in record.devices)
        if not delta:
            return
        used = self._used.get(node, 0) + delta
        if used:
            self._used[node] = used
        else:
            del self._used[node]  # nodes come and go: no zero left behind
        if self._base is not None and node in self._base:
            self._base.allocate({node: delta})

    def _share_holders(self, node: str, device: str, sign: int) -> int:
        """Count one more (SIGN +1) or one fewer holder of DEVICE's shares; the change in GPUs in use (0 or SIGN)."""
        holders = self._sharing.setdefault(node, {})
        before = holders.get(device, 0)
        after = before + sign
        if after > 0:
            holders[device] = after
        else:
            holders.pop(device, None)
            if not holders:
                del self._sharing[node]
        return sign if (before == 0) != (after <= 0) else 0

    def jobs_with_pods(self) -> list[tuple[str, str]]:
        """Every (namespace, name) some live record of a worker names as its job."""
        return [key for key, pods in self._pods_by_job.items() if pods]

    def pods_of_job(self, namespace: str, name: str) -> list[PodRecord]:
        return [self.pods[key] for key in sorted(self._pods_by_job.get((namespace, name), ()))]

    def pods_on_node(self, node: str) -> list[PodRecord]:
        """Pods bound or pinned to NODE."""
        return [self.pods[key] for key in self._pods_by_node.get(node, ())]

    def mig_nodes(self) -> dict[str, NodeMig]:
        """Every node with MIG, by name (kube/mig_nodes.py)."""
        return self._mig

    def gpu_memory_mib(self, node: str) -> int:
        return self._gpu_memory.get(node, 0)

    def used_gpus(self, node: str) -> int:
        return self._used.get(node, 0)

    def shared_nodes(self) -> list[str]:
        """Nodes where some pod holds a part of a GPU (by a DRA share)."""
        return sorted(n for n in self._sharing if any(p.share and p.holds_gpus for p in self.pods_on_node(n)))

    def smallest_gpu_memory_mib(self) -> int:
        """MiB of the smallest GPU a share could land on, 0 when a GPU node does not say: a memory share is
        charged by it (`policy.sharing.charge`), never less than it will hold."""
        sizes = [self._gpu_memory.get(name, 0) for name, node in self.nodes.items() if node.allocatable_gpus]
        return min(sizes, default=0)


def _discard(index: dict[Any, set[PodKey]], at: Any, key: PodKey) -> None:
    keys = index.get(at)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[at]  # nodes and jobs come and go: no empty sets left behind


def _name_of(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return "?"
    return f"{metadata.get('namespace') or ''}/{metadata.get('name')}".lstrip("/")
