"""The cluster as placement sees it: GPU nodes, their topology domains, and indexes that keep placement fast.

A `ClusterSnapshot` is built from plain `Node` records (the operator's inventory
builds them from Node and Pod watches, the simulator from a cluster description)
and updated incrementally as GPUs are allocated and released. Placement asks it
questions per topology domain ("how many 8-GPU replicas fit in rack r3 on spot
H100 nodes?") that it answers from counters instead of scanning nodes.

The levels are the snapshot's `Topology` (aisched.policy.topology): data, not names
fixed here. Nodes, taints and levels live in their own modules (nodes, taints,
topology); this one keeps the per-domain counters.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from aisched.policy.nodes import Node, NodeLabelKeys, Pool, local_node, node_from_labels
from aisched.policy.shared_room import SharedRoom
from aisched.policy.taints import Taint, TaintEffect, Toleration, TolerationOperator
from aisched.policy.topology import LOCAL_TOPOLOGY, DomainId, Level, Topology, level_rank

# The nodes, taints and topology names placement code has long imported from here.
__all__ = [
    "Bucket",
    "ClusterSnapshot",
    "Domain",
    "DomainId",
    "Level",
    "Node",
    "NodeLabelKeys",
    "Pool",
    "Taint",
    "TaintEffect",
    "Toleration",
    "TolerationOperator",
    "Topology",
    "level_rank",
    "local_node",
    "node_from_labels",
]

_NO_NODES: frozenset[int] = frozenset()


class Bucket:
    """The nodes of one pool inside one domain, grouped by how many GPUs each has free.

    `room[g]` is how many replicas of g GPUs fit (each replica on one node): the
    sum over nodes of free // g. It is kept up to date on every change, so
    whether a gang fits in a domain is one addition per pool.

    A copied snapshot's domains share their buckets with the original's, each marked `shared`: whichever
    snapshot changes one first copies it for itself (a cycle's copy of a thousand nodes changes a few).
    """

    __slots__ = ("by_free", "room", "room_when_empty", "shared")

    def __init__(self, max_gpus: int) -> None:
        # A cluster has a bucket per pool in every domain down to each NVLink domain, most of
        # whose free-GPU counts hold no node: those share one empty set until a node comes.
        self.by_free: list[AbstractSet[int]] = [_NO_NODES] * (max_gpus + 1)
        self.room = [0] * (max_gpus + 1)
        self.room_when_empty = [0] * (max_gpus + 1)
        self.shared = False

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
        bucket.shared = False
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
        """The same domain for another snapshot: its buckets shared until either side changes one."""
        for bucket in self.buckets.values():
            bucket.shared = True
        return Domain(self.id, dict(self.buckets))

    def bucket_to_change(self, pool: int) -> Bucket:
        """POOL's bucket, this domain's own (copied first if another snapshot's domain shares it)."""
        bucket = self.buckets[pool]
        if bucket.shared:
            bucket = self.buckets[pool] = bucket.copy()
        return bucket


class ClusterSnapshot:
    """The GPU nodes of a cluster with per-domain indexes, updated incrementally.

    Nodes without allocatable GPUs are left out. Unusable nodes (cordoned, not
    ready, about to be interrupted) are kept for their GPU counts but are in no
    index, so nothing is placed on them.

    `trial()` opens a scope whose allocations and releases are undone when it
    closes: the scheduler tries preemptions and reservations on the live
    snapshot and leaves it as it found it.
    """

    def __init__(self, nodes: Iterable[Node], topology: Topology = LOCAL_TOPOLOGY) -> None:
        self.topology = topology
        gpu_nodes = sorted((_fitted(n, topology) for n in nodes if n.allocatable_gpus > 0), key=lambda n: n.name)
        self._nodes: list[Node] = gpu_nodes
        self._ordinal: dict[str, int] = {n.name: i for i, n in enumerate(gpu_nodes)}
        if len(self._ordinal) != len(gpu_nodes):
            raise ValueError("node names must be unique")
        self._used: list[int] = [n.used_gpus for n in gpu_nodes]
        self.max_gpus_per_node: int = max((n.allocatable_gpus for n in gpu_nodes if n.usable), default=0)
        self._pool_ids: dict[Pool, int] = {}
        self._pool_of: list[int] = []
        self._domains_of: list[tuple[Domain, ...]] = []
        self._domains: dict[Level | None, dict[tuple[str | None, ...], Domain]] = {
            level: {} for level in (*topology.grouping, None)
        }
        self.layout = object()
        """Who the nodes are and where (their labels, pools, usability): the same object in every copy, a new
        one when the snapshot is built afresh. What is derived from the layout alone may be kept by it."""
        self._journal: list[tuple[int, int]] = []
        self._trials = 0
        self.shared = SharedRoom()
        """GPUs in parts (shares, MIG instances): the owner of the snapshot fills it in (`Inventory.snapshot`)."""
        for ordinal, node in enumerate(gpu_nodes):
            self._index(ordinal, node)
        # The usable nodes of a level's largest domain: where it is one, the Node level says it all.
        members: dict[int, int] = defaultdict(int)
        for domains in self._domains_of:
            for domain in domains:
                members[id(domain)] += 1
        self._most_nodes: dict[Level | None, int] = {
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
        for level in (*self.topology.grouping, None):
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

    def node_use(self) -> Iterator[tuple[Node, int]]:
        """Every GPU node by name as indexed (its `used_gpus` as it was then) with its GPUs used now: `nodes()`
        without a copy of each, for a scan that reads them once."""
        return zip(self._nodes, self._used, strict=True)

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

    def domains(self, level: Level | None) -> tuple[Domain, ...]:
        """Domains of a grouping level in path order; level None gives the whole cluster (when it has nodes)."""
        return self._sorted_domains[level]

    def most_nodes_in_a_domain(self, level: Level | None) -> int:
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
        for level in self.topology.levels:
            path = nodes[0].path(level)
            if path is not None and all(n.path(level) == path for n in nodes[1:]):
                return DomainId(level, path)
        return DomainId(None, ())

    def names_in(self, domain_id: DomainId) -> tuple[str, ...]:
        """Every node of a domain, by name (a scan: for occasional use, not per placement)."""
        depth = len(domain_id.path)
        node_level = self.topology.node
        return tuple(n.name for n in self._nodes if (n.path(node_level) or ())[:depth] == domain_id.path)

    def labelled_levels(self) -> tuple[Level, ...]:
        """Grouping levels at least one usable node carries a label of, tightest first."""
        return tuple(level for level in self.topology.grouping if self._domains[level])

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
        mark, shared_mark = len(self._journal), self.shared.mark()
        self._trials += 1
        self.shared.trials += 1
        try:
            yield self
        finally:
            self._trials -= 1
            self.shared.trials -= 1
            while len(self._journal) > mark:
                ordinal, delta = self._journal.pop()
                self._apply(ordinal, -delta)
            self.shared.undo_to(shared_mark)

    def copy(self) -> ClusterSnapshot:
        """An independent snapshot in the same state: the indexes copied, not rebuilt (a tenth of the time)."""
        if self._trials:
            raise RuntimeError("copy a snapshot outside its trials: their undo journal is not copied")
        clone = object.__new__(ClusterSnapshot)
        clone.topology, clone._nodes, clone._ordinal = self.topology, self._nodes, self._ordinal  # never changed
        clone.layout = self.layout
        clone._pool_ids, clone._pool_of = self._pool_ids, self._pool_of
        clone.max_gpus_per_node, clone._most_nodes = self.max_gpus_per_node, self._most_nodes
        clone._used = list(self._used)
        clone._journal, clone._trials = [], 0
        clone.shared = self.shared.copy()
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
            domain.bucket_to_change(pool).move(ordinal, old_free, new_free)


def _path_sort_key(path: tuple[str | None, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((part is None, part or "") for part in path)


def _fitted(node: Node, topology: Topology) -> Node:
    """NODE with a domain label (or None) for each grouping level of the topology."""
    missing = len(topology.grouping) - len(node.domains)
    if missing < 0:
        raise ValueError(
            f"node {node.name} has {len(node.domains)} domain labels; the topology {len(topology.grouping)}"
        )
    return replace(node, domains=(*node.domains, *(None,) * missing)) if missing else node
