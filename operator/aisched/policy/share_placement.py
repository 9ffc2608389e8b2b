"""Placing a gang whose replicas each ask part of one GPU: a fraction where a GPU has room, a free MIG instance.

Fractions. A node whose GPUs shares hold in part still takes a fraction that fits what is left
of one of them (`SharedRoom.parts`), besides its wholly free GPUs. Levels are searched as for
whole GPUs (`placement._Search`: the Node level, then each topology level, stopping at the
required one), counting each node's room in replicas; among the nodes with room the GPU is chosen
by `policy.sharing.assign.assign_shares`, the very function `controller/sharing.py` runs when it
makes the pods' DRA claims, over the same GPUs and holdings: so the GPU planned here is the one the
claim selects (FGD's measure: the GPU whose node's fragmentation grows least). A single replica
goes to the best GPU of every node with room; a gang on one node to the node that holds it where
the measure grows least (the least room among equals: best fit, as whole gangs); a gang over a
wider domain to the domain with the least room left over, spread over its GPUs by the same measure.
A GPU never takes more than its 1000 thousandths or its memory. A replica that splits a wholly free
GPU counts as one more GPU in use on its node.

MIG. A MIG-partitioned node advertises `nvidia.com/mig-<profile>` instances and no whole GPU;
a MIG gang goes only to such nodes with a free instance of its profile for each replica, in
the tightest domain that has them, the nodes with the fewest free instances first (so whole idle
nodes stay free for a repartition), as `controller/mig.py` then asks for them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from aisched.policy.cluster import Bucket, ClusterSnapshot
from aisched.policy.nodes import Node
from aisched.policy.placement import (
    INSUFFICIENT_GPUS,
    NO_MATCHING_NODES,
    GangRequest,
    Placement,
    Unplaceable,
    _Search,
    search_levels,
)
from aisched.policy.shared_room import MILLI, SharePart, ShareShape
from aisched.policy.sharing.assign import Gpu, HeldShare, ShareAssignment, ShareRequest, assign_shares
from aisched.policy.topology import DomainId, Level

FRESH_CANDIDATES = 4
"""Wholly free nodes offered to the measure beyond those a gang needs: on a wholly free GPU a fraction
grows the measure alike on every node, so more would only cost time."""


def place_parts(request: GangRequest, snapshot: ClusterSnapshot) -> Placement | Unplaceable:
    """Place a gang of parts of GPUs (REQUEST.share) or say why not. Reads the snapshot, never changes it."""
    shape = request.share
    assert shape is not None
    preferred, *others = request.capacity_types
    passes = [(preferred,), request.capacity_types] if others else [request.capacity_types]
    for capacity_types in passes:
        search = _Search(snapshot, request, capacity_types)
        placement = _mig(search, shape) if shape.is_mig else _Fractions(search, shape).run()
        if placement is not None:
            return placement
    return _explain(_Search(snapshot, request, request.capacity_types), shape)


def gpus_of(snapshot: ClusterSnapshot, name: str) -> tuple[list[Gpu], list[HeldShare]]:
    """NAME's GPUs and what is held of them, named as `controller.sharing.GpuShares` names them: the
    devices shares hold by their names, and whole GPUs in use on the highest indexes no share holds."""
    node = snapshot.node(name)
    memory = snapshot.shared.memory_of(name)
    gpus = [Gpu(name, f"gpu-{i}", node.gpu_product or "", memory) for i in range(node.allocatable_gpus)]
    parts = snapshot.shared.parts.get(name, {})
    held = [HeldShare((name, device), MILLI - milli, memory - left) for device, (milli, left) in parts.items()]
    whole = snapshot.used_gpus(name) - len(parts)
    for gpu in reversed(gpus):
        if whole <= 0:
            break
        if gpu.device not in parts:
            held.append(HeldShare(gpu.id, MILLI, memory))
            whole -= 1
    return gpus, held


class _Fractions:
    def __init__(self, search: _Search, shape: ShareShape) -> None:
        self.search, self.shape, self.snapshot = search, shape, search.snapshot
        self.r = search.r

    def run(self) -> Placement | None:
        scope = self.search._scope()
        if not self.search.groups or scope is None:
            return None
        for level in search_levels(self.search.request, self.snapshot.topology):
            if level is not None and level.is_node:
                placement = self._on_one_node(scope.buckets)
                if placement is not None or self.r == 1:
                    return placement
            elif self.snapshot.most_nodes_in_a_domain(level) > 1:
                placement = self._in_one_domain(level)
                if placement is not None:
                    return placement
        return None

    def room(self, ordinal: int) -> int:
        return share_room(self.snapshot, self.snapshot.name_of(ordinal), self.shape)

    def _nodes(self, buckets: dict[int, Bucket] | None, group: tuple[int, ...]) -> list[int]:
        """Ordinals of the group's nodes in BUCKETS (a domain's), not excluded, with room."""
        ordinals: set[int] = set()
        for pool in group:
            bucket = (buckets or {}).get(pool)
            if bucket is not None:
                ordinals.update(*bucket.by_free)
        only = self.search.request.within
        if only is not None and only.level is not None and only.level.is_node:
            ordinals &= {self.snapshot.ordinal(str(only.label))} if only.label in self.snapshot else set()
        return sorted(o for o in ordinals - self.search.excluded if self.room(o) > 0)

    def _on_one_node(self, buckets: dict[int, Bucket]) -> Placement | None:
        if self.r == 1:  # the measure picks among every node with room
            options = [(group, self._candidates(self._nodes(buckets, group))) for group in self.search.groups]
            return self._best([o for o in options if o[1]], None)
        # A gang on one node: each node that holds it is scored alone by the measure; among equals the one
        # with the least room (best fit). Wholly free nodes score alike, so only the fullest few are tried.
        holding: list[tuple[int, int, tuple[int, ...]]] = []
        for group in self.search.groups:
            holding += [(room, o, group) for o in self._nodes(buckets, group) if (room := self.room(o)) >= self.r]
        shared = self.snapshot.shared.parts
        tried = [h for h in holding if self.snapshot.name_of(h[1]) in shared]
        tried += sorted(h for h in holding if self.snapshot.name_of(h[1]) not in shared)[:FRESH_CANDIDATES]
        return self._best([(group, [ordinal]) for _, ordinal, group in sorted(tried)], None)

    def _in_one_domain(self, level: Level | None) -> Placement | None:
        best: tuple[int, int, tuple[int, ...], list[int], DomainId] | None = None
        for index, domain in enumerate(self.search._candidate_domains(level)):
            for group in self.search.groups:
                nodes = self._nodes(domain.buckets, group)
                room = sum(self.room(o) for o in nodes)
                if room >= self.r and (best is None or (room, index) < best[:2]):
                    best = (room, index, group, nodes, domain.id)
        if best is None:
            return None
        return self._best([(best[2], self._candidates(best[3]))], best[4])

    def _candidates(self, ordinals: Sequence[int]) -> list[int]:
        """Nodes whose shared GPUs have room, and enough wholly free nodes for the gang (fewest free GPUs first)."""
        shared = [o for o in ordinals if self.snapshot.name_of(o) in self.snapshot.shared.parts]
        fresh = sorted(
            (o for o in ordinals if self.snapshot.name_of(o) not in self.snapshot.shared.parts),
            key=lambda o: (self.snapshot.free_gpus(self.snapshot.name_of(o)), o),
        )
        chosen, room = list(shared), sum(self.room(o) for o in shared)
        for extra, ordinal in enumerate(fresh):
            if room >= self.r and extra >= FRESH_CANDIDATES:
                break
            chosen.append(ordinal)
            room += self.room(ordinal)
        return sorted(chosen)

    def _best(self, options: Iterable[tuple[tuple[int, ...], list[int]]], domain: DomainId | None) -> Placement | None:
        """The placement the measure likes best among OPTIONS (a pool group and its candidate nodes), in order."""
        best: tuple[float, tuple[int, ...], ShareAssignment] | None = None
        for group, ordinals in options:
            by_memory: dict[int, list[int]] = defaultdict(list)
            for ordinal in ordinals:
                by_memory[self.snapshot.shared.memory_of(self.snapshot.name_of(ordinal))].append(ordinal)
            for memory, same in sorted(by_memory.items()):
                assignment = self._assign(same, memory)
                if assignment is None:
                    continue
                # Ties (within float rounding: a node's other GPUs add and take away the same) go to the
                # option offered first.
                if best is None or assignment.growth < best[0] - 1e-6:
                    best = (assignment.growth, group, assignment)
        if best is None:
            return None
        _, group, assignment = best
        return self._placement(assignment, group, domain)

    def _assign(self, ordinals: Sequence[int], memory: int) -> ShareAssignment | None:
        gpus: list[Gpu] = []
        held: list[HeldShare] = []
        for ordinal in ordinals:
            node_gpus, node_held = gpus_of(self.snapshot, self.snapshot.name_of(ordinal))
            gpus += node_gpus
            held += node_held
        milli = self.shape.milli_on(memory)
        need = self.shape.memory_on(milli, memory)
        requests = [ShareRequest(f"{rank:06d}", milli, need) for rank in range(self.r)]
        assignment = assign_shares(gpus, held, requests)
        return None if assignment.unplaced else assignment

    def _placement(self, assignment: ShareAssignment, group: tuple[int, ...], domain: DomainId | None) -> Placement:
        parts: list[SharePart] = []
        split: set[tuple[str, str]] = set()
        memory_of = self.snapshot.shared.memory_of
        for key in sorted(assignment.placed):
            node, device = assignment.placed[key]
            milli = self.shape.milli_on(memory_of(node))
            splits = device not in self.snapshot.shared.parts.get(node, {}) and (node, device) not in split
            split.add((node, device))
            parts.append(SharePart(node, device, milli, self.shape.memory_on(milli, memory_of(node)), splits))
        nodes = tuple(part.node for part in parts)
        if domain is None:  # the Node level: the one node's own
            level = self.snapshot.topology.node
            domain = DomainId(level, self.snapshot.node(nodes[0]).path(level) or (nodes[0],))
        placement = self.search._placement(nodes, domain, group)
        return Placement(
            nodes=nodes,
            gpus_per_replica=1,
            domain=domain,
            gpu_type=placement.gpu_type,
            capacity_type=placement.capacity_type,
            parts=tuple(parts),
        )


def _mig_candidates(search: _Search, profile: str) -> list[tuple[Node, int]]:
    """MIG nodes the gang may use, with their free PROFILE instances (none without one)."""
    request, snapshot = search.request, search.snapshot
    found = []
    for name in sorted(snapshot.shared.mig_nodes):
        node = snapshot.shared.mig_nodes[name]
        free = snapshot.shared.mig_free.get(name, {}).get(profile, 0)
        if free <= 0 or not node.schedulable or node.interrupted or name in request.excluded_nodes:
            continue
        if request.gpu_types is not None and node.gpu_product not in request.gpu_types:
            continue
        if node.capacity_type not in search.capacity_types:
            continue
        if not all(any(t.tolerates(taint) for t in request.tolerations) for taint in node.taints if taint.repels):
            continue
        within = request.within
        if within is not None and within.level is not None and node.path(within.level) != within.path:
            continue
        found.append((node, free))
    return found


def _mig(search: _Search, shape: ShareShape) -> Placement | None:
    profile = str(shape.mig_profile)
    candidates = _mig_candidates(search, profile)
    topology = search.snapshot.topology
    for level in search_levels(search.request, topology):
        domains: dict[tuple[str | None, ...], list[tuple[Node, int]]] = defaultdict(list)
        for node, free in candidates:
            path = () if level is None else node.path(level)
            if path is not None:
                domains[path].append((node, free))
        best: tuple[int, tuple[str | None, ...]] | None = None
        for path in sorted(domains, key=lambda p: tuple((part is None, part or "") for part in p)):
            room = sum(free for _, free in domains[path])
            if room >= search.r and (best is None or room < best[0]):
                best = (room, path)
        if best is None:
            if level is not None and level.is_node and search.r == 1:
                return None  # a single instance fits no wider domain either
            continue
        nodes: list[str] = []
        for node, free in sorted(domains[best[1]], key=lambda item: (item[1], item[0].name)):
            nodes += [node.name] * min(free, search.r - len(nodes))
        chosen = [search.snapshot.shared.mig_nodes[n] for n in dict.fromkeys(nodes)]
        products = {n.gpu_product for n in chosen}
        capacity = {n.capacity_type for n in chosen}
        return Placement(
            nodes=tuple(nodes),
            gpus_per_replica=1,
            domain=DomainId(level, best[1]),
            gpu_type=next(iter(products)) if len(products) == 1 else None,
            capacity_type=next(iter(capacity)) if len(capacity) == 1 else None,
            mig_profile=profile,
        )
    return None


def _explain(search: _Search, shape: ShareShape) -> Unplaceable:
    r = search.r
    if shape.is_mig:
        free = sum(f for _, f in _mig_candidates(search, str(shape.mig_profile)))
        return Unplaceable(
            INSUFFICIENT_GPUS,
            f"needs {r} x nvidia.com/mig-{shape.mig_profile}; {free} free on the nodes with MIG it may use "
            "(an idle node may be repartitioned for it)",
        )
    problem = search._no_matching_nodes()
    if problem is not None:
        return Unplaceable(NO_MATCHING_NODES, problem)
    fractions = _Fractions(search, shape)
    scope = search._scope()
    most = max(
        (fractions.room(o) for g in search.groups for o in fractions._nodes(scope.buckets if scope else None, g)),
        default=0,
    )
    asked = f"{shape.compute_milli / 10:g}% of a GPU" if shape.compute_milli else "part of a GPU"
    if shape.memory_mib:
        asked += f" with {shape.memory_mib} MiB"
    return Unplaceable(INSUFFICIENT_GPUS, f"needs {r} x {asked}; the most room any matching node has is for {most}")


def share_room(snapshot: ClusterSnapshot, name: str, shape: ShareShape) -> int:
    """Replicas of the fraction SHAPE that fit on node NAME now: on what shares left of its GPUs, and its free ones."""
    memory = snapshot.shared.memory_of(name)
    room = snapshot.free_gpus(name) * shape.fit(MILLI, memory, memory)
    for milli, left in snapshot.shared.parts.get(name, {}).values():
        room += shape.fit(milli, left, memory)
    return room


def share_choice(snapshot: ClusterSnapshot, name: str, shape: ShareShape) -> tuple[float, SharePart] | None:
    """The GPU of node NAME that `controller/sharing.py` would give one replica of SHAPE, and how much it grows
    the node's fragmentation; None when none has room."""
    memory = snapshot.shared.memory_of(name)
    milli = shape.milli_on(memory)
    gpus, held = gpus_of(snapshot, name)
    assignment = assign_shares(gpus, held, [ShareRequest("replica", milli, shape.memory_on(milli, memory))])
    if assignment.unplaced:
        return None
    _, device = assignment.placed["replica"]
    splits = device not in snapshot.shared.parts.get(name, {})
    return assignment.growth, SharePart(name, device, milli, shape.memory_on(milli, memory), splits)
