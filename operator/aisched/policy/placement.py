"""Gang placement: all replicas or none, in the smallest topology domain that holds them.

`place_gang` tries the Node level, then each level of the snapshot's topology from
the tightest (NVLink domain, rack, zone on the local cluster) and finally the whole
cluster, stopping at the required level when there is one. At the first
level where some domain has room it takes the domain with the fewest free GPUs
left afterwards (best fit, so big holes stay whole for big gangs), and inside it
fills the nodes with the fewest free GPUs first. A gang stays on one GPU
product. When nothing fits, `Unplaceable` says why in words a person can act on.

Cost: each candidate domain is checked with one sum over a handful of pools,
from counters `ClusterSnapshot` keeps up to date, so a decision takes
O(domains x pools) plus the nodes of the chosen domain, not O(nodes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aisched.api.common import CapacityType, SpotPolicy
from aisched.api.training_job import Placement as PlacementStatus
from aisched.policy.cluster import ClusterSnapshot, Domain
from aisched.policy.nodes import Pool
from aisched.policy.shared_room import SharePart, ShareShape
from aisched.policy.taints import Toleration
from aisched.policy.topology import DomainId, Level, Topology, level_rank

if TYPE_CHECKING:
    from aisched.policy.replica_placement import ReplicaSpread

# Reasons, CamelCase, for conditions. The first three never go away on their own:
# the job asks for something the cluster does not have.
NO_MATCHING_NODES = "NoMatchingNodes"
REPLICA_TOO_LARGE = "ReplicaTooLarge"
TOPOLOGY_TOO_SMALL = "TopologyTooSmall"
INSUFFICIENT_GPUS = "InsufficientGPUs"


def capacity_types_for(policy: SpotPolicy) -> tuple[CapacityType, ...]:
    """Capacity types a spot policy allows, most preferred first."""
    return {
        SpotPolicy.NEVER: (CapacityType.ON_DEMAND,),
        SpotPolicy.ONLY: (CapacityType.SPOT,),
        SpotPolicy.PREFER: (CapacityType.SPOT, CapacityType.ON_DEMAND),
    }[SpotPolicy(policy)]


@dataclass(frozen=True, slots=True)
class GangRequest:
    """What one gang needs: `replicas` x `gpus_per_replica`, each replica's GPUs on one node."""

    replicas: int
    gpus_per_replica: int
    gpu_types: frozenset[str] | None = None
    """GPU products allowed (None: any). Whatever is allowed, one gang stays on one product."""
    required_level: Level | None = None
    preferred_level: Level | None = None
    """Informational: the search always tries the tightest level first."""
    tolerations: tuple[Toleration, ...] = ()
    capacity_types: tuple[CapacityType, ...] = (CapacityType.ON_DEMAND,)
    """Allowed capacity types, most preferred first; the first is tried alone before the others join."""
    excluded_nodes: frozenset[str] = frozenset()
    within: DomainId | None = None
    """Only this domain (growing an elastic gang next to where it runs)."""
    share: ShareShape | None = None
    """Each replica asks part of one GPU (a fraction, or a MIG instance): `policy.share_placement` places it."""
    spread: ReplicaSpread | None = None
    """A service's new replicas, not a gang: spread beside its running ones (`policy.serving.place_replica_set`)."""

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.gpus_per_replica < 1:
            raise ValueError("a gang needs at least one replica of at least one GPU")
        if self.share is not None and self.gpus_per_replica != 1:
            raise ValueError("a share is a part of one GPU: one GPU per replica")
        if not self.capacity_types:
            raise ValueError("a gang needs at least one allowed capacity type")

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each replica goes, by rank, and the domain that holds them all."""

    nodes: tuple[str, ...]
    gpus_per_replica: int
    domain: DomainId
    gpu_type: str | None = None
    capacity_type: CapacityType | None = None
    """None when the gang spans capacity types."""
    parts: tuple[SharePart, ...] = ()
    """A fraction's replicas, by rank: the GPU each gets and what it takes of it."""
    mig_profile: str | None = None
    """Each replica holds one MIG instance of this profile on its node (no whole GPU)."""

    @classmethod
    def of_nodes(cls, nodes: Sequence[str], gpus_per_replica: int, snapshot: ClusterSnapshot) -> Placement:
        """The placement of a gang already running on `nodes` (by rank), as the snapshot sees it."""
        known = [name for name in nodes if name in snapshot]
        products = {snapshot.node(name).gpu_product for name in known}
        capacity = {snapshot.node(name).capacity_type for name in known}
        return cls(
            nodes=tuple(nodes),
            gpus_per_replica=gpus_per_replica,
            domain=snapshot.tightest_domain(known),
            gpu_type=next(iter(products)) if len(products) == 1 else None,
            capacity_type=next(iter(capacity)) if len(capacity) == 1 else None,
        )

    @property
    def level(self) -> Level | None:
        """The level of the domain holding the gang; None when it spans zones."""
        return self.domain.level

    @property
    def replicas(self) -> int:
        return len(self.nodes)

    @property
    def total_gpus(self) -> int:
        return len(self.nodes) * self.gpus_per_replica

    def gpus_by_node(self) -> dict[str, int]:
        """Whole GPUs it takes: a fraction's only where it splits a GPU that was wholly free; a MIG gang's none."""
        gpus: dict[str, int] = defaultdict(int)
        if self.mig_profile is not None:
            return {}
        if self.parts:
            for part in self.parts:
                gpus[part.node] += part.splits
            return {node: count for node, count in gpus.items() if count}
        for name in self.nodes:
            gpus[name] += self.gpus_per_replica
        return dict(gpus)

    def keeping(self, ranks: Sequence[int], snapshot: ClusterSnapshot) -> Placement:
        """The placement of RANKS of it only (a shrunk gang), their parts of GPUs and MIG profile kept."""
        kept = Placement.of_nodes([self.nodes[rank] for rank in ranks], self.gpus_per_replica, snapshot)
        parts = tuple(self.parts[rank] for rank in ranks) if self.parts else ()
        return Placement(
            kept.nodes, kept.gpus_per_replica, kept.domain, kept.gpu_type, kept.capacity_type, parts, self.mig_profile
        )

    def to_status(self) -> PlacementStatus:
        """The `status.placement` of the TrainingJob."""
        return PlacementStatus(
            level=self.domain.level.name if self.domain.level is not None else None,
            domain=self.domain.label if self.domain.level is not None else None,
            nodes=list(self.nodes),
            capacity_type=self.capacity_type,
            gpu_type=self.gpu_type,
        )


@dataclass(frozen=True, slots=True)
class Unplaceable:
    reason: str
    message: str

    @property
    def transient(self) -> bool:
        """True when GPUs in use are what is missing, so it may fit later (or after preemption)."""
        return self.reason == INSUFFICIENT_GPUS


def place_gang(request: GangRequest, snapshot: ClusterSnapshot) -> Placement | Unplaceable:
    """Place the whole gang or say why not. Deterministic; reads the snapshot, never changes it."""
    if request.spread is not None:
        from aisched.policy.replica_placement import (
            place_replica_set,  # a service's spread builds on this module's types
        )

        return place_replica_set(request, snapshot)
    if request.share is not None:
        from aisched.policy.share_placement import place_parts  # it builds on this module's search

        return place_parts(request, snapshot)
    placement = _first_placement(request, snapshot)
    if placement is not None:
        return placement
    return _Search(snapshot, request, request.capacity_types).explain()


def gang_fits(request: GangRequest, snapshot: ClusterSnapshot) -> bool:
    """Whether `place_gang` would place it, without the scan of every node that says why not."""
    if request.share is not None:
        return isinstance(place_gang(request, snapshot), Placement)
    return _first_placement(request, snapshot) is not None


def products_by_rank(placement: Placement, snapshot: ClusterSnapshot) -> list[str | None]:
    """The GPU product of each replica's node, by rank (a MIG node's too)."""
    products: list[str | None] = []
    for name in placement.nodes:
        node = snapshot.node(name) if name in snapshot else snapshot.shared.mig_nodes.get(name)
        products.append(node.gpu_product if node is not None else None)
    return products


def hold(snapshot: ClusterSnapshot, placement: Placement) -> None:
    """Count PLACEMENT as taken in SNAPSHOT: its whole GPUs, its parts of GPUs, its MIG instances."""
    snapshot.allocate(placement.gpus_by_node())
    for part in placement.parts:
        snapshot.shared.take_part(part)
    if placement.mig_profile is not None:
        for node in placement.nodes:
            snapshot.shared.take_mig(node, placement.mig_profile)


def release(snapshot: ClusterSnapshot, placement: Placement, ranks: Sequence[int] | None = None) -> None:
    """Count what PLACEMENT's replicas (only RANKS, where given) hold as free in SNAPSHOT: a gang
    stopped or shrunk, for real or in a trial.

    The inverse of `hold`, and for a running gang what it really frees: a fraction's GPU comes
    back as a whole GPU only once no share holds any of it, a MIG replica gives back its instance
    (no whole GPU), and a part whose GPU is not known yet (its pod is not made: `SharePart.device`
    empty) gives back the whole GPU held for it meanwhile."""
    whole: dict[str, int] = defaultdict(int)
    for rank in range(placement.replicas) if ranks is None else ranks:
        node = placement.nodes[rank]
        if placement.mig_profile is not None:
            snapshot.shared.give_mig(node, placement.mig_profile)
        elif placement.parts:
            part = placement.parts[rank]
            if part.device:
                whole[node] += snapshot.shared.give_part(part)
            else:
                whole[node] += part.splits
        else:
            whole[node] += placement.gpus_per_replica
    snapshot.release(whole)


def release_all(snapshot: ClusterSnapshot, placements: Iterable[Placement]) -> None:
    """`release` of each of PLACEMENTS; whole-GPU gangs (most of them) in one update per node."""
    whole: dict[str, int] = defaultdict(int)
    for placement in placements:
        if placement.parts or placement.mig_profile is not None:
            release(snapshot, placement)
        else:
            for name in placement.nodes:
                whole[name] += placement.gpus_per_replica
    snapshot.release(whole)


def _first_placement(request: GangRequest, snapshot: ClusterSnapshot) -> Placement | None:
    preferred, *others = request.capacity_types
    passes = [(preferred,), request.capacity_types] if others else [request.capacity_types]
    for capacity_types in passes:
        placement = _Search(snapshot, request, capacity_types).run()
        if placement is not None:
            return placement
    return None


def search_levels(request: GangRequest, topology: Topology) -> tuple[Level | None, ...]:
    """Levels tried, tightest first: up to the required level, or up to the whole cluster (None)."""
    widest = level_rank(request.required_level)
    if request.within is not None:
        widest = min(widest, level_rank(request.within.level))
    levels: tuple[Level | None, ...] = (*topology.levels, None)
    return tuple(level for level in levels if level_rank(level) <= widest)


def tightest_possible_level(request: GangRequest, snapshot: ClusterSnapshot) -> Level | None:
    """The tightest level at which some domain could hold the gang if the cluster were empty."""
    if request.share is not None and request.share.is_mig:
        return request.required_level  # MIG nodes advertise no whole GPU: the domains below do not see them
    search = _Search(snapshot, request, request.capacity_types)
    if not search.groups or request.gpus_per_replica > snapshot.max_gpus_per_node:
        return request.required_level  # nowhere at all: placing it will say why
    for level in search_levels(request, snapshot.topology):
        if search._best_room(level, when_empty=True)[0] >= request.replicas:
            return level
    return request.required_level


class _Search:
    """One placement attempt over the pools of one set of capacity types."""

    def __init__(self, snapshot: ClusterSnapshot, request: GangRequest, capacity_types: Sequence[CapacityType]) -> None:
        self.snapshot = snapshot
        self.request = request
        self.g = request.gpus_per_replica
        self.r = request.replicas
        self.capacity_types = capacity_types
        self.groups = _product_groups(snapshot.pools, request, capacity_types)
        self.excluded = {snapshot.ordinal(name) for name in request.excluded_nodes if name in snapshot}
        self._largest: dict[tuple[int, ...], int] = {}
        self._room_lost, self._free_lost = self._exclusion_losses()

    def _exclusion_losses(self) -> tuple[dict[tuple[DomainId, int], int], dict[tuple[DomainId, int], int]]:
        """What excluded nodes add to each domain's counters, to subtract per request."""
        room: dict[tuple[DomainId, int], int] = defaultdict(int)
        free: dict[tuple[DomainId, int], int] = defaultdict(int)
        if self.g > self.snapshot.max_gpus_per_node:
            return room, free
        for ordinal in self.excluded:
            pool = self.snapshot.pool_of(ordinal)
            if pool < 0:
                continue
            node_free = self.snapshot.free_gpus(self.snapshot.name_of(ordinal))
            for domain in self.snapshot.domains_of(ordinal):
                room[domain.id, pool] += node_free // self.g
                free[domain.id, pool] += node_free
        return room, free

    def room(self, domain: Domain, group: tuple[int, ...]) -> int:
        lost = sum(self._room_lost.get((domain.id, p), 0) for p in group) if self._room_lost else 0
        return domain.room(group, self.g) - lost

    def free(self, domain: Domain, group: tuple[int, ...]) -> int:
        lost = sum(self._free_lost.get((domain.id, p), 0) for p in group) if self._free_lost else 0
        return domain.free(group) - lost

    def run(self) -> Placement | None:
        if not self.groups or self.g > self.snapshot.max_gpus_per_node:
            return None
        # The Node level comes first. Where it finds nothing, a single replica fits no wider domain
        # either, nor does a gang fit a domain of one node (an NVLink domain of one server): thousands
        # of such domains are not searched again for each waiting job.
        for level in search_levels(self.request, self.snapshot.topology):
            if _is_node(level):
                placement = self._on_one_node()
                if placement is not None or self.r == 1:
                    return placement
            elif self.snapshot.most_nodes_in_a_domain(level) > 1:
                placement = self._in_one_domain(level)
                if placement is not None:
                    return placement
        return None

    def _candidate_domains(self, level: Level | None) -> Sequence[Domain]:
        within = self.request.within
        domains = self.snapshot.domains(level)
        if within is None or within.level is None:
            return domains
        if within.level == level:  # making room tries one domain at a time: no scan of its level
            domain = self.snapshot.domain(within)
            return [domain] if domain is not None else []
        return [d for d in domains if within.contains(d.id)]

    def _scope(self) -> Domain | None:
        """The domain whose nodes the Node level may pick from."""
        within = self.request.within
        if within is None or within.level is None or within.level.is_node:
            return next(iter(self.snapshot.domains(None)), None)
        return self.snapshot.domain(within)

    def _on_one_node(self) -> Placement | None:
        need = self.r * self.g
        scope = self._scope()
        if need > self.snapshot.max_gpus_per_node or scope is None:
            return None
        only = self.request.within
        only_ordinal = (
            self.snapshot.ordinal(str(only.label))
            if only is not None and _is_node(only.level) and only.label in self.snapshot
            else None
        )
        for free in range(need, self.snapshot.max_gpus_per_node + 1):
            best: tuple[int, tuple[int, ...]] | None = None
            for group in self.groups:
                for pool in group:
                    bucket = scope.buckets.get(pool)
                    if bucket is None or not bucket.by_free[free]:
                        continue
                    candidates = bucket.by_free[free]
                    if only_ordinal is not None:
                        candidates = candidates & {only_ordinal}
                    elif self.excluded:
                        candidates = candidates - self.excluded
                    if candidates:
                        ordinal = min(candidates)
                        if best is None or ordinal < best[0]:
                            best = (ordinal, group)
            if best is not None:
                name = self.snapshot.name_of(best[0])
                node = self.snapshot.node(name)
                return self._placement(
                    (name,) * self.r,
                    DomainId(self.snapshot.topology.node, node.path(self.snapshot.topology.node) or (name,)),
                    best[1],
                )
        return None

    def _in_one_domain(self, level: Level | None) -> Placement | None:
        need = self.r * self.g
        best: tuple[int, Domain, tuple[int, ...]] | None = None
        for domain in self._candidate_domains(level):
            for group in self.groups:
                if self.room(domain, group) < self.r:
                    continue
                leftover = self.free(domain, group) - need
                if best is None or leftover < best[0]:
                    best = (leftover, domain, group)
        if best is None:
            return None
        _, domain, group = best
        return self._placement(self._fill(domain, group), domain.id, group)

    def _fill(self, domain: Domain, group: tuple[int, ...]) -> tuple[str, ...]:
        """Replicas onto the domain's nodes with the fewest free GPUs first (best fit)."""
        nodes: list[str] = []
        for free in range(self.g, self.snapshot.max_gpus_per_node + 1):
            ordinals: set[int] = set()
            for pool in group:
                bucket = domain.buckets.get(pool)
                if bucket is not None:
                    ordinals |= bucket.by_free[free]
            for ordinal in sorted(ordinals - self.excluded):
                take = min(free // self.g, self.r - len(nodes))
                nodes.extend([self.snapshot.name_of(ordinal)] * take)
                if len(nodes) == self.r:
                    return tuple(nodes)
        raise AssertionError("domain counters promised room the nodes do not have")

    def _placement(self, nodes: tuple[str, ...], domain: DomainId, group: tuple[int, ...]) -> Placement:
        pools = self.snapshot.pools
        used_pools = {self.snapshot.pool_of(self.snapshot.ordinal(name)) for name in set(nodes)}
        capacity = {pools[p].capacity_type for p in used_pools}
        return Placement(
            nodes=nodes,
            gpus_per_replica=self.g,
            domain=domain,
            gpu_type=pools[group[0]].gpu_product,
            capacity_type=next(iter(capacity)) if len(capacity) == 1 else None,
        )

    # -- why not -------------------------------------------------------------------------------

    def explain(self) -> Unplaceable:
        problem = self._no_matching_nodes()
        if problem is not None:
            return Unplaceable(NO_MATCHING_NODES, problem)
        largest_node = max(self._largest_node(group) for group in self.groups)
        if self.g > largest_node:
            return Unplaceable(
                REPLICA_TOO_LARGE,
                f"each replica needs {self.g} GPUs on one node; the largest matching node has {largest_node}",
            )
        levels = search_levels(self.request, self.snapshot.topology)
        level = levels[-1]
        # Nodes missing a topology label sit in no domain of that level, so a tighter level may hold more.
        # The widest levels are asked first: they have the fewest domains, and nearly always the room.
        if not any(self._best_room(each, when_empty=True)[0] >= self.r for each in reversed(levels)):
            best = self._best_room(level, when_empty=True)[0]
            return Unplaceable(
                TOPOLOGY_TOO_SMALL,
                f"needs {self._gang()}{self._scope_words(level)}; "
                f"{self._where(level)} room for {best * self.g} even when empty",
            )
        return Unplaceable(INSUFFICIENT_GPUS, f"needs {self._gang()}{self._scope_words(level)}; {self._now(level)}")

    def _no_matching_nodes(self) -> str | None:
        pools = self.snapshot.pools
        if not pools:
            return "the cluster has no schedulable GPU node"
        wanted = self.request.gpu_types
        by_product = [p for p in pools if wanted is None or p.gpu_product in wanted]
        if not by_product:
            have = ", ".join(sorted({p.gpu_product or "unlabelled" for p in pools}))
            return f"no schedulable node has {_or(sorted(wanted or ()))} GPUs (the cluster has {have})"
        by_capacity = [p for p in by_product if p.capacity_type in self.capacity_types]
        if not by_capacity:
            return (
                f"matching nodes are all {_or(sorted({p.capacity_type for p in by_product}))} capacity; "
                f"the job allows {_or(list(self.capacity_types))} only"
            )
        if not any(p.admits(self.request.tolerations) for p in by_capacity):
            taints = sorted({str(t) for p in by_capacity for t in p.taints})
            return f"every matching node has a taint the job does not tolerate ({', '.join(taints[:3])})"
        if all(self._largest_node(group) == 0 for group in self.groups):
            return "every matching node is excluded (being drained or interrupted)"
        return None

    def _largest_node(self, group: tuple[int, ...]) -> int:
        """Allocatable GPUs of the largest matching node that is not excluded."""
        if group not in self._largest:
            self._largest[group] = max(
                (self.snapshot.node(self.snapshot.name_of(o)).allocatable_gpus for o in self._matching([group])),
                default=0,
            )
        return self._largest[group]

    def _best_room(self, level: Level | None, *, when_empty: bool) -> tuple[int, int]:
        """(replicas, free GPUs) of the domain at `level` with the most room for this gang's replicas."""
        best = (0, 0)
        if _is_node(level):
            largest = max(self._largest_node(group) for group in self.groups)
            if when_empty:
                return largest // self.g, largest
            most_free = max(
                (self.snapshot.free_gpus(self.snapshot.name_of(o)) for o in self._matching(self.groups)),
                default=0,
            )
            return most_free // self.g, most_free
        for domain in self._candidate_domains(level):
            for group in self.groups:
                if when_empty:
                    candidate = (domain.room_when_empty(group, self.g), 0)
                else:
                    candidate = (self.room(domain, group), self.free(domain, group))
                best = max(best, candidate)
        return best

    def _matching(self, groups: Sequence[tuple[int, ...]]) -> set[int]:
        """Ordinals of the nodes in these pool groups that are not excluded."""
        cluster = next(iter(self.snapshot.domains(None)), None)
        ordinals: set[int] = set()
        if cluster is not None:
            for group in groups:
                for pool in group:
                    bucket = cluster.buckets.get(pool)
                    if bucket is not None:
                        ordinals.update(*bucket.by_free)
        return ordinals - self.excluded

    def _gang(self) -> str:
        products = self.request.gpu_types
        product = f" {next(iter(products))}" if products is not None and len(products) == 1 else ""
        if self.r == 1:
            return f"{self.g}{product} GPU" + ("s" if self.g > 1 else "")
        return f"{self.r * self.g} GPUs ({self.r} x {self.g}{product})"

    def _scope_words(self, level: Level | None) -> str:
        if _is_node(level) or self.r == 1:
            return " on one node"
        return f" within one {level}" if level is not None else ""

    def _where(self, level: Level | None) -> str:
        if _is_node(level):
            return "the largest matching node has"
        return f"the largest {level} has" if level is not None else "matching nodes have"

    def _now(self, level: Level | None) -> str:
        if _is_node(level) or self.r == 1:
            _, most_free = self._best_room(self.snapshot.topology.node, when_empty=False)
            return f"the most any matching node has free is {most_free}"
        room, free = self._best_room(level, when_empty=False)
        if room * self.g == free:
            return f"{self._where(level)} {free} free"
        return (
            f"{self._where(level)} room for {room} of the {self.r} replicas "
            f"({free} GPUs free, not all in blocks of {self.g})"
        )


def _product_groups(
    pools: Sequence[Pool], request: GangRequest, capacity_types: Sequence[CapacityType]
) -> list[tuple[int, ...]]:
    """Usable pools, grouped by GPU product: a gang never mixes products."""
    groups: dict[str, list[int]] = defaultdict(list)
    for pool_id, pool in enumerate(pools):
        if request.gpu_types is not None and pool.gpu_product not in request.gpu_types:
            continue
        if pool.capacity_type not in capacity_types or not pool.admits(request.tolerations):
            continue
        groups[pool.gpu_product or ""].append(pool_id)
    return [tuple(groups[product]) for product in sorted(groups)]


def _or(words: Sequence[str]) -> str:
    return " or ".join(str(w) for w in words)


def _is_node(level: Level | None) -> bool:
    return level is not None and level.is_node
