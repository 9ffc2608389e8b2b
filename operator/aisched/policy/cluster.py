"""The cluster as placement sees it: GPU nodes, their topology domains, and indexes that keep placement fast.

A `ClusterSnapshot` is built from plain `Node` records (the operator's inventory
builds them from Node and Pod watches, the simulator from a cluster description)
and updated incrementally as GPUs are allocated and released. Placement asks it
questions per topology domain ("how many 8-GPU replicas fit in rack r3 on spot
H100 nodes?") that it answers from counters instead of scanning nodes.

Domains are identified by their *path* of label values from the zone down, so two
racks that share a label value in different zones stay apart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from aisched.api.common import CapacityType, TopologyLevel

GROUPING_LEVELS: tuple[TopologyLevel, ...] = (
    TopologyLevel.NVLINK_DOMAIN,
    TopologyLevel.RACK,
    TopologyLevel.ZONE,
)
"""Levels whose domains group several nodes; the Node level is each node on its own."""

_PATH_DEPTH = {TopologyLevel.ZONE: 1, TopologyLevel.RACK: 2, TopologyLevel.NVLINK_DOMAIN: 3}


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(StrEnum):
    EQUAL = "Equal"
    EXISTS = "Exists"


@dataclass(frozen=True, slots=True, order=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    @classmethod
    def from_dict(cls, taint: Mapping[str, Any]) -> Taint:
        """From a Node's `spec.taints[]` entry."""
        return cls(
            key=str(taint["key"]),
            value=str(taint.get("value") or ""),
            effect=TaintEffect(taint.get("effect") or TaintEffect.NO_SCHEDULE),
        )

    @property
    def repels(self) -> bool:
        """PreferNoSchedule is a wish of the node's owner, not a rule; the others keep pods off."""
        return self.effect != TaintEffect.PREFER_NO_SCHEDULE

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration, matched as the kube-scheduler matches it."""

    key: str = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: str = ""
    effect: TaintEffect | None = None

    @classmethod
    def from_dict(cls, toleration: Mapping[str, Any]) -> Toleration:
        """From a pod spec's `tolerations[]` entry."""
        effect = toleration.get("effect")
        return cls(
            key=str(toleration.get("key") or ""),
            operator=TolerationOperator(toleration.get("operator") or TolerationOperator.EQUAL),
            value=str(toleration.get("value") or ""),
            effect=TaintEffect(effect) if effect else None,
        )

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if not self.key:  # an empty key with Exists tolerates every taint
            return self.operator == TolerationOperator.EXISTS
        if self.key != taint.key:
            return False
        return self.operator == TolerationOperator.EXISTS or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Node:
    """One GPU node: what it has, where it sits, and who may use it.

    `used_gpus` counts the GPU requests of *every* pod bound to the node, ours and
    others', so placement never counts on GPUs something else holds.
    """

    name: str
    allocatable_gpus: int
    used_gpus: int = 0
    gpu_product: str | None = None
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    nvlink_domain: str | None = None
    rack: str | None = None
    zone: str | None = None
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True
    """Ready and not cordoned."""
    interrupted: bool = False
    """Carries an interruption taint: the node is about to go away, so nothing new goes there."""

    @property
    def usable(self) -> bool:
        return self.schedulable and not self.interrupted and self.allocatable_gpus > 0

    def label(self, level: TopologyLevel) -> str | None:
        """The node's domain label at `level` (its own name at the Node level)."""
        return {
            TopologyLevel.NODE: self.name,
            TopologyLevel.NVLINK_DOMAIN: self.nvlink_domain,
            TopologyLevel.RACK: self.rack,
            TopologyLevel.ZONE: self.zone,
        }[TopologyLevel(level)]

    def path(self, level: TopologyLevel) -> tuple[str | None, ...] | None:
        """The domain's identity at `level`: labels from the zone down; None when the node has no label there."""
        if self.label(level) is None:
            return None
        full = (self.zone, self.rack, self.nvlink_domain, self.name)
        depth = _PATH_DEPTH.get(TopologyLevel(level), 4)
        return full[:depth]


@dataclass(frozen=True, slots=True)
class NodeLabelKeys:
    """Which node labels and taints mean what; the operator fills it from its settings."""

    topology: Mapping[TopologyLevel, str]
    gpu_product: str
    spot_labels: Mapping[str, str]
    interruption_taints: frozenset[str]


def node_from_labels(
    name: str,
    *,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    allocatable_gpus: int,
    used_gpus: int,
    schedulable: bool,
    keys: NodeLabelKeys,
) -> Node:
    """A `Node` from what a Node object and its pods say, read with the configured label keys."""
    spot = any(labels.get(key) == value for key, value in keys.spot_labels.items())
    return Node(
        name=name,
        allocatable_gpus=allocatable_gpus,
        used_gpus=used_gpus,
        gpu_product=labels.get(keys.gpu_product),
        capacity_type=CapacityType.SPOT if spot else CapacityType.ON_DEMAND,
        nvlink_domain=_topology_label(labels, keys, TopologyLevel.NVLINK_DOMAIN),
        rack=_topology_label(labels, keys, TopologyLevel.RACK),
        zone=_topology_label(labels, keys, TopologyLevel.ZONE),
        taints=tuple(taints),
        schedulable=schedulable,
        interrupted=any(taint.key in keys.interruption_taints for taint in taints),
    )


def _topology_label(labels: Mapping[str, str], keys: NodeLabelKeys, level: TopologyLevel) -> str | None:
    key = keys.topology.get(level)
    return labels.get(key) if key else None


@dataclass(frozen=True, slots=True)
class Pool:
    """Nodes that any request either may or may not use: same product, capacity type and repelling taints."""

    gpu_product: str | None
    capacity_type: CapacityType
    taints: tuple[Taint, ...]

    def admits(self, tolerations: Sequence[Toleration]) -> bool:
        return all(any(t.tolerates(taint) for t in tolerations) for taint in self.taints)


@dataclass(frozen=True, slots=True)
class DomainId:
    """A topology domain: its level (None for the whole cluster) and its path of labels from the zone down."""

    level: TopologyLevel | None
    path: tuple[str | None, ...]

    @property
    def label(self) -> str:
        if self.level is None:
            return "cluster"
        return str(self.path[-1])

    def contains(self, other: DomainId) -> bool:
        return other.path[: len(self.path)] == self.path and _rank(other.level) <= _rank(self.level)


def _rank(level: TopologyLevel | None) -> int:
    return 4 if level is None else LEVEL_ORDER.index(TopologyLevel(level))


LEVEL_ORDER: tuple[TopologyLevel, ...] = (TopologyLevel.NODE, *GROUPING_LEVELS)


def level_rank(level: TopologyLevel | None) -> int:
    """0 for Node up to 3 for Zone, 4 for the whole cluster: smaller is tighter."""
    return _rank(level)


_NO_NODES: frozenset[int] = frozenset()


class Bucket:
    """The nodes of one pool inside one domain, grouped by how many GPUs each has free.

    `room[g]` is how many replicas of g GPUs fit (each replica on one node): the
    sum over nodes of free // g. It is kept up to date on every change, so
    whether a gang fits in a domain is one addition per pool.
    """

    __slots__ = ("by_free", "room", "room_when_empty")

    def __init__(self, max_gpus: int) -> None:
        # A cluster has a bucket per pool in every domain down to each NVLink domain, most of
        # whose free-GPU counts hold no node: those share one empty set until a node comes.
        self.by_free: list[AbstractSet[int]] = [_NO_NODES] * (max_gpus + 1)
        self.room = [0] * (max_gpus + 1)
        self.room_when_empty = [0] * (max_gpus + 1)

    def add(self, ordinal: int, free: int, allocatable: int) -> None:
        self._nodes_with(free).add(ordinal)
        for g in range(1, len(self.room)):
            self.room[g] += free // g
            self.room_when_empty[g] += allocatable // g

    def move(self, ordinal: int, old_free: int, new_free: int) -> None:
        self._nodes_with(old_free).discard(ordinal)
        self._nodes_with(new_free).add(ordinal)
        for g in range(1, len(self.room)):
            self.room[g] += new_free // g - old_free // g

    @property
    def free(self) -> int:
        return self.room[1] if len(self.room) > 1 else 0

    def _nodes_with(self, free: int) -> set[int]:
        nodes = self.by_free[free]
        if not isinstance(nodes, set):
            nodes = self.by_free[free] = set()
        return nodes

    def copy(self) -> Bucket:
        bucket = object.__new__(Bucket)
        bucket.by_free = [set(nodes) if nodes else _NO_NODES for nodes in self.by_free]
        bucket.room, bucket.room_when_empty = list(self.room), self.room_when_empty  # the latter never changes
        return bucket


@dataclass(slots=True)
class Domain:
    id: DomainId
    buckets: dict[int, Bucket] = field(default_factory=dict)

    def room(self, pools: Iterable[int], gpus_per_replica: int) -> int:
        return sum(self.buckets[p].room[gpus_per_replica] for p in pools if p in self.buckets)

    def room_when_empty(self, pools: Iterable[int], gpus_per_replica: int) -> int:
        return sum(self.buckets[p].room_when_empty[gpus_per_replica] for p in pools if p in self.buckets)

    def free(self, pools: Iterable[int]) -> int:
        return sum(self.buckets[p].free for p in pools if p in self.buckets)

    def copy(self) -> Domain:
        return Domain(self.id, {pool: bucket.copy() for pool, bucket in self.buckets.items()})


class ClusterSnapshot:
    """The GPU nodes of a cluster with per-domain indexes, updated incrementally.

    Nodes without allocatable GPUs are left out. Unusable nodes (cordoned, not
    ready, about to be interrupted) are kept for their GPU counts but are in no
    index, so nothing is placed on them.

    `trial()` opens a scope whose allocations and releases are undone when it
    closes: the scheduler tries preemptions and reservations on the live
    snapshot and leaves it as it found it.
    """

    def __init__(self, nodes: Iterable[Node]) -> None:
        gpu_nodes = sorted((n for n in nodes if n.allocatable_gpus > 0), key=lambda n: n.name)
        self._nodes: list[Node] = gpu_nodes
        self._ordinal: dict[str, int] = {n.name: i for i, n in enumerate(gpu_nodes)}
        if len(self._ordinal) != len(gpu_nodes):
            raise ValueError("node names must be unique")
        self._used: list[int] = [n.used_gpus for n in gpu_nodes]
        self.max_gpus_per_node: int = max((n.allocatable_gpus for n in gpu_nodes if n.usable), default=0)
        self._pool_ids: dict[Pool, int] = {}
        self._pool_of: list[int] = []
        self._domains_of: list[tuple[Domain, ...]] = []
        self._domains: dict[TopologyLevel | None, dict[tuple[str | None, ...], Domain]] = {
            level: {} for level in (*GROUPING_LEVELS, None)
        }
        self._journal: list[tuple[int, int]] = []
        self._trials = 0
        for ordinal, node in enumerate(gpu_nodes):
            self._index(ordinal, node)
        # The usable nodes of a level's largest domain: where it is one, the Node level says it all.
        members: dict[int, int] = defaultdict(int)
        for domains in self._domains_of:
            for domain in domains:
                members[id(domain)] += 1
        self._most_nodes: dict[TopologyLevel | None, int] = {
            level: max((members[id(d)] for d in by_path.values()), default=0)
            for level, by_path in self._domains.items()
        }
        self._sorted_domains = {
            level: tuple(by_path[path] for path in sorted(by_path, key=_path_sort_key))
            for level, by_path in self._domains.items()
        }

    def _index(self, ordinal: int, node: Node) -> None:
        if not node.usable:
            self._pool_of.append(-1)
            self._domains_of.append(())
            return
        pool = Pool(node.gpu_product, node.capacity_type, tuple(sorted(t for t in node.taints if t.repels)))
        pool_id = self._pool_ids.setdefault(pool, len(self._pool_ids))
        self._pool_of.append(pool_id)
        domains = []
        for level in (*GROUPING_LEVELS, None):
            path = () if level is None else node.path(level)
            if path is None:
                continue
            domain = self._domains[level].get(path)
            if domain is None:
                domain = self._domains[level][path] = Domain(DomainId(level, path))
            bucket = domain.buckets.get(pool_id)
            if bucket is None:
                bucket = domain.buckets[pool_id] = Bucket(self.max_gpus_per_node)
            bucket.add(ordinal, self._free(ordinal), node.allocatable_gpus)
            domains.append(domain)
        self._domains_of.append(tuple(domains))

    # -- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._ordinal

    @property
    def pools(self) -> tuple[Pool, ...]:
        return tuple(self._pool_ids)

    def node(self, name: str) -> Node:
        return self._nodes[self._ordinal[name]]

    def nodes(self) -> tuple[Node, ...]:
        """Every GPU node by name, with its current GPU use."""
        return tuple(replace(n, used_gpus=used) for n, used in zip(self._nodes, self._used, strict=True))

    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self._nodes)

    def free_gpus(self, name: str) -> int:
        return self._free(self._ordinal[name])

    def used_gpus(self, name: str) -> int:
        return self._used[self._ordinal[name]]

    @property
    def total_gpus(self) -> int:
        return sum(n.allocatable_gpus for n in self._nodes)

    @property
    def used_total(self) -> int:
        return sum(min(u, n.allocatable_gpus) for n, u in zip(self._nodes, self._used, strict=True))

    def ordinal(self, name: str) -> int:
        """The node's place in name order: indexes hold ordinals, so ties break the same way every run."""
        return self._ordinal[name]

    def name_of(self, ordinal: int) -> str:
        return self._nodes[ordinal].name

    def pool_of(self, ordinal: int) -> int:
        """The node's pool id, or -1 when nothing may be placed on it."""
        return self._pool_of[ordinal]

    def domains(self, level: TopologyLevel | None) -> tuple[Domain, ...]:
        """Domains of a grouping level in path order; level None gives the whole cluster (when it has nodes)."""
        return self._sorted_domains[level]

    def most_nodes_in_a_domain(self, level: TopologyLevel | None) -> int:
        """How many usable nodes the largest domain of LEVEL holds."""
        return self._most_nodes[level]

    def domain(self, domain_id: DomainId) -> Domain | None:
        """The indexed domain (None for the Node level and for domains without usable nodes)."""
        return self._domains.get(domain_id.level, {}).get(domain_id.path)

    def domains_of(self, ordinal: int) -> tuple[Domain, ...]:
        """The grouping domains a usable node belongs to, tightest first, the cluster last."""
        return self._domains_of[ordinal]

    def tightest_domain(self, names: Iterable[str]) -> DomainId:
        """The smallest domain holding every named node (the cluster when they span zones)."""
        nodes = [self.node(name) for name in names]
        if not nodes:
            return DomainId(None, ())
        for level in LEVEL_ORDER:
            path = nodes[0].path(level)
            if path is not None and all(n.path(level) == path for n in nodes[1:]):
                return DomainId(level, path)
        return DomainId(None, ())

    def names_in(self, domain_id: DomainId) -> tuple[str, ...]:
        """Every node of a domain, by name (a scan: for occasional use, not per placement)."""
        depth = len(domain_id.path)
        return tuple(n.name for n in self._nodes if (n.path(TopologyLevel.NODE) or ())[:depth] == domain_id.path)

    # -- changing ------------------------------------------------------------------------------

    def allocate(self, gpus_by_node: Mapping[str, int]) -> None:
        """Count GPUs as used (a placement was made, a pod was bound)."""
        for name, gpus in gpus_by_node.items():
            self._change(self._ordinal[name], gpus)

    def release(self, gpus_by_node: Mapping[str, int]) -> None:
        """Count GPUs as free again; nodes no longer in the snapshot are skipped."""
        for name, gpus in gpus_by_node.items():
            ordinal = self._ordinal.get(name)
            if ordinal is not None:
                self._change(ordinal, -gpus)

    @contextmanager
    def trial(self) -> Iterator[ClusterSnapshot]:
        """A scope whose allocations and releases are undone on exit (nestable)."""
        mark = len(self._journal)
        self._trials += 1
        try:
            yield self
        finally:
            self._trials -= 1
            while len(self._journal) > mark:
                ordinal, delta = self._journal.pop()
                self._apply(ordinal, -delta)

    def copy(self) -> ClusterSnapshot:
        """An independent snapshot in the same state: the indexes copied, not rebuilt (a tenth of the time)."""
        if self._trials:
            raise RuntimeError("copy a snapshot outside its trials: their undo journal is not copied")
        clone = object.__new__(ClusterSnapshot)
        clone._nodes, clone._ordinal = self._nodes, self._ordinal  # never changed after construction
        clone._pool_ids, clone._pool_of = self._pool_ids, self._pool_of
        clone.max_gpus_per_node, clone._most_nodes = self.max_gpus_per_node, self._most_nodes
        clone._used = list(self._used)
        clone._journal, clone._trials = [], 0
        copies = {id(d): d.copy() for by_path in self._domains.values() for d in by_path.values()}
        clone._domains = {
            level: {path: copies[id(d)] for path, d in by_path.items()} for level, by_path in self._domains.items()
        }
        clone._domains_of = [tuple(copies[id(d)] for d in domains) for domains in self._domains_of]
        clone._sorted_domains = {
            level: tuple(copies[id(d)] for d in domains) for level, domains in self._sorted_domains.items()
        }
        return clone

    def _free(self, ordinal: int) -> int:
        # Clamped both ways: a trial may release more than the pods counted hold (a running gang
        # whose finished worker no longer holds its GPU), and a node is never freer than empty.
        allocatable = self._nodes[ordinal].allocatable_gpus
        return min(allocatable, max(0, allocatable - self._used[ordinal]))

    def _change(self, ordinal: int, delta: int) -> None:
        if self._trials:
            self._journal.append((ordinal, delta))
        self._apply(ordinal, delta)

    def _apply(self, ordinal: int, delta: int) -> None:
        old_free = self._free(ordinal)
        self._used[ordinal] += delta
        new_free = self._free(ordinal)
        pool = self._pool_of[ordinal]
        if new_free == old_free or pool < 0:
            return
        for domain in self._domains_of[ordinal]:
            domain.buckets[pool].move(ordinal, old_free, new_free)


def _path_sort_key(path: tuple[str | None, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((part is None, part or "") for part in path)
