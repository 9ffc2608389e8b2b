"""Where an InferenceService's replicas run: capacity mix, spread, and spot replacement. Pure.

Each replica is one pod whose GPUs all sit on one node. Given the replicas that
exist and the count wanted, :func:`plan_serving` says which replicas to start
(node and capacity type each) and which to retire:

- Capacity mix: ``min(minOnDemandReplicas, desired)`` replicas stay on
  on-demand capacity. The rest go to spot when the policy is Prefer or Only;
  Prefer falls back to on-demand when no spot node has room, Only does not.
  The floor itself falls back to spot only when on-demand is full, because a
  replica on spot serves traffic and a missing one does not; the plan says so.
- Spread: each new replica goes to the zone with the fewest replicas of the
  service, then the node with the fewest, then the fullest node that still
  fits (best fit leaves whole nodes free for training gangs). A replica that
  asks part of a GPU (`gpuShare`) fits a node where what shares left of a GPU
  holds it, the node whose fragmentation it grows least going first (the GPU
  `controller/sharing.py` then gives it, `policy.share_placement.share_choice`);
  one that asks a MIG instance goes only to a node with a free one.
- Spot interruption: a replica on a node that announced its end is replaced
  at once, and retired only when enough healthy replicas are ready to carry the
  service without it (make before break), or at once if it is not ready.
- Scale down retires, in order: replicas that are not ready, on-demand ones
  above the floor (the dearer capacity), then the most crowded zone and node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from aisched.api.common import CapacityType, SpotPolicy
from aisched.api.inference_service import InferenceServiceSpec
from aisched.policy.cluster import ClusterSnapshot, Node, Toleration
from aisched.policy.share_placement import share_choice, share_room
from aisched.policy.shared_room import SharePart, ShareShape


class PlanReason(StrEnum):
    UP_TO_DATE = "UpToDate"
    SCALING = "Scaling"
    REPLACING_INTERRUPTED = "ReplacingInterrupted"
    ON_DEMAND_FLOOR_UNMET = "OnDemandFloorUnmet"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    QUOTA_EXCEEDED = "QuotaExceeded"
    """Its queue's quota (`spec.queue`) holds no more replicas (`policy.decision`)."""
    RECLAIMED = "ReplicasReclaimed"
    """A lending queue took back the GPUs its queue borrowed; the replicas it lacks wait for room."""


WAITING = (PlanReason.INSUFFICIENT_CAPACITY, PlanReason.QUOTA_EXCEEDED, PlanReason.RECLAIMED)
"""Why new replicas may not start: no room for them, no quota, or their quota lent was taken back."""


@dataclass(frozen=True)
class ServingReplica:
    """A replica that exists: its pod's name, the node it is pinned to, and whether it serves."""

    name: str
    node: str
    capacity_type: CapacityType
    ready: bool


@dataclass(frozen=True)
class ServingRequest:
    gpus_per_replica: int
    gpu_type: str | None = None
    spot_policy: SpotPolicy = SpotPolicy.NEVER
    min_on_demand_replicas: int = 1
    tolerations: tuple[Toleration, ...] = ()
    share: ShareShape | None = None
    """Each replica asks part of one GPU: a fraction, or a MIG instance."""

    @classmethod
    def from_spec(cls, spec: InferenceServiceSpec, tolerations: Sequence[Toleration] = ()) -> ServingRequest:
        return cls(
            gpus_per_replica=spec.gpus_per_replica,
            gpu_type=spec.gpu_type,
            spot_policy=SpotPolicy(spec.spot.policy),
            min_on_demand_replicas=spec.spot.min_on_demand_replicas,
            tolerations=tuple(tolerations),
            share=ShareShape.of(spec.gpu_share),
        )


@dataclass(frozen=True)
class NewReplica:
    node: str
    zone: str | None
    capacity_type: CapacityType
    replaces: str | None = None
    """The interrupted replica this one stands in for, for events and status."""
    part: SharePart | None = None
    """A fraction's part of a GPU as planned, which it holds (promised) until its pod is seen."""


@dataclass(frozen=True)
class ServingPlan:
    start: tuple[NewReplica, ...] = ()
    retire: tuple[str, ...] = ()
    unplaced: int = 0
    """Replicas wanted that fit nowhere now."""
    reason: PlanReason = PlanReason.UP_TO_DATE
    message: str = ""


def doomed_interrupted(snapshot: ClusterSnapshot, doomed: frozenset[str]) -> ClusterSnapshot:
    """SNAPSHOT (taken for one pass, its own) with the DOOMED nodes, those that must be left, counting as
    interrupted: replicas there are replaced, and no new one goes there."""
    nodes = (replace(n, interrupted=n.interrupted or n.name in doomed) for n in snapshot.nodes())
    marked = ClusterSnapshot(nodes, snapshot.topology)
    marked.shared = snapshot.shared  # its parts of GPUs and MIG nodes too
    for name, node in list(marked.shared.mig_nodes.items()):
        marked.shared.mig_nodes[name] = replace(node, interrupted=node.interrupted or name in doomed)
    return marked


@dataclass(frozen=True)
class ServingChanges:
    """What a service changes to reach its desired count, before any new replica is placed: the replicas
    that go, and how many new ones it wants (those on interrupted nodes replaced included)."""

    kept: tuple[ServingReplica, ...]
    """Its healthy replicas that stay."""
    doomed: tuple[ServingReplica, ...]
    """Its replicas on interrupted (or gone) nodes."""
    surplus: tuple[str, ...]
    """Healthy replicas over the desired count, retired now."""
    retired_doomed: tuple[str, ...]
    """Replicas on interrupted nodes that the ready healthy ones no longer need as cover."""
    floor: int
    """How many of the desired replicas are to run on-demand."""
    desired: int

    @property
    def retire(self) -> tuple[str, ...]:
        return self.surplus + self.retired_doomed

    @property
    def wanted(self) -> int:
        return max(0, self.desired - len(self.kept))

    def reason_and_message(self) -> tuple[PlanReason, str]:
        """Why it changes, with every new replica it wants placed (the placement adds its own notes)."""
        notes = self.doomed_notes()
        if self.doomed:
            return PlanReason.REPLACING_INTERRUPTED, "; ".join(notes)
        if self.wanted or self.surplus:
            return PlanReason.SCALING, f"{len(self.kept) + len(self.surplus)} -> {self.desired} replicas"
        return PlanReason.UP_TO_DATE, f"{self.desired} replica(s) running as planned"

    def doomed_notes(self) -> list[str]:
        if not self.doomed:
            return []
        return [
            f"{len(self.doomed)} replica(s) on interrupted nodes; {len(self.retired_doomed)} retired now, "
            "the rest once their replacements are ready"
        ]


def serving_changes(
    replicas: Sequence[ServingReplica], desired: int, request: ServingRequest, snapshot: ClusterSnapshot
) -> ServingChanges:
    """What to retire, and how many new replicas to ask for, so that ``desired`` healthy replicas run."""
    doomed = [r for r in replicas if _is_doomed(r, snapshot)]
    healthy = [r for r in replicas if not _is_doomed(r, snapshot)]
    floor = on_demand_floor(request, desired)
    surplus = _choose_surplus(healthy, len(healthy) - desired, floor, snapshot)
    kept = [r for r in healthy if r.name not in surplus]
    return ServingChanges(
        kept=tuple(kept),
        doomed=tuple(doomed),
        surplus=tuple(sorted(surplus)),
        retired_doomed=tuple(_doomed_to_retire(doomed, desired, kept)),
        floor=floor,
        desired=desired,
    )


def plan_serving(
    replicas: Sequence[ServingReplica],
    desired: int,
    request: ServingRequest,
    snapshot: ClusterSnapshot,
    *,
    kept_off: frozenset[str] = frozenset(),
) -> ServingPlan:
    """What to start and retire so that ``desired`` healthy replicas run, spread and mixed as asked;
    new replicas keep off KEPT_OFF (nodes held for a gang that outranks them).

    The operator runs its two halves apart: a service's pass asks `serving_changes` what goes and how
    many new replicas it wants, and the scheduling cycle places those (`place_replica_set`), once."""
    changes = serving_changes(replicas, desired, request, snapshot)
    starts, unplaced, floor_unmet = place_new_replicas(
        changes.kept, changes.wanted, changes.floor, request, snapshot, kept_off=kept_off
    )
    starts = tag_replacements(starts, [r.name for r in changes.doomed])

    notes = changes.doomed_notes()
    if unplaced:
        notes.append(
            f"{unplaced} replica(s) of {request.gpus_per_replica} "
            f"{request.gpu_type or 'GPU'}(s) fit on no {allowed_capacity(request)} node"
        )
    if floor_unmet:
        floor = changes.floor
        notes.append(f"{floor_unmet} of the {floor} on-demand replica(s) run on spot: no on-demand node has room")
    if unplaced:
        reason = PlanReason.INSUFFICIENT_CAPACITY
    elif floor_unmet:
        reason = PlanReason.ON_DEMAND_FLOOR_UNMET
    else:
        reason, message = changes.reason_and_message()
        notes = [message]
    return ServingPlan(tuple(starts), changes.retire, unplaced, reason, "; ".join(notes))


def _is_doomed(replica: ServingReplica, snapshot: ClusterSnapshot) -> bool:
    node = gpu_node(snapshot, replica.node)
    return node is None or node.interrupted


def gpu_node(snapshot: ClusterSnapshot, name: str) -> Node | None:
    """The GPU node NAME, one with whole GPUs or a MIG-partitioned one (which advertises none)."""
    return snapshot.node(name) if name in snapshot else snapshot.shared.mig_nodes.get(name)


def on_demand_floor(request: ServingRequest, desired: int) -> int:
    if request.spot_policy == SpotPolicy.NEVER:
        return desired
    return min(request.min_on_demand_replicas, desired)


def allowed_capacity(request: ServingRequest) -> str:
    return {SpotPolicy.NEVER: "on-demand", SpotPolicy.PREFER: "spot or on-demand", SpotPolicy.ONLY: "spot"}[
        SpotPolicy(request.spot_policy)
    ]


def _choose_surplus(healthy: Sequence[ServingReplica], count: int, floor: int, snapshot: ClusterSnapshot) -> set[str]:
    remaining = list(healthy)
    chosen: set[str] = set()
    for _ in range(max(count, 0)):
        victim = min(remaining, key=_retirement_order(remaining, floor, snapshot))
        remaining.remove(victim)
        chosen.add(victim.name)
    return chosen


def _retirement_order(
    remaining: Sequence[ServingReplica], floor: int, snapshot: ClusterSnapshot
) -> Callable[[ServingReplica], tuple[bool, bool, bool, int, int, str]]:
    on_demand = sum(r.capacity_type == CapacityType.ON_DEMAND for r in remaining)
    zones = Counter(_zone(snapshot, r.node) for r in remaining)
    nodes = Counter(r.node for r in remaining)

    def key(r: ServingReplica) -> tuple[bool, bool, bool, int, int, str]:
        is_on_demand = r.capacity_type == CapacityType.ON_DEMAND
        # Keys ascend: False sorts first, negated counts put crowded zones and nodes first.
        return (
            is_on_demand and on_demand <= floor,
            r.ready,
            not is_on_demand,
            -zones[_zone(snapshot, r.node)],
            -nodes[r.node],
            r.name,
        )

    return key


def place_new_replicas(
    kept: Sequence[ServingReplica],
    count: int,
    floor: int,
    request: ServingRequest,
    snapshot: ClusterSnapshot,
    *,
    kept_off: frozenset[str],
) -> tuple[list[NewReplica], int, int]:
    """New replicas for ``count`` slots; also how many found no room and how many floor slots went spot.

    The parts of GPUs planned are taken in a trial of SNAPSHOT, so that the next replica sees them, and
    given back before it returns."""
    with snapshot.trial():
        return _place_new_in(kept, count, floor, request, snapshot, kept_off=kept_off)


def _place_new_in(
    kept: Sequence[ServingReplica],
    count: int,
    floor: int,
    request: ServingRequest,
    snapshot: ClusterSnapshot,
    *,
    kept_off: frozenset[str],
) -> tuple[list[NewReplica], int, int]:
    room = _Room(snapshot, request, kept_off)
    zones = Counter(_zone(snapshot, r.node) for r in kept)
    per_node = Counter(r.node for r in kept)
    on_demand = sum(r.capacity_type == CapacityType.ON_DEMAND for r in kept)
    starts: list[NewReplica] = []
    unplaced = floor_unmet = 0
    for _ in range(max(count, 0)):
        # Floor slots that had to go to spot still fill the floor's slots, or one full
        # on-demand pool would turn every new replica into a floor replica.
        wants_on_demand = on_demand + floor_unmet < floor or request.spot_policy == SpotPolicy.NEVER
        preferred = CapacityType.ON_DEMAND if wants_on_demand else CapacityType.SPOT
        node = _best_node(room, zones, per_node, request, capacity=preferred)
        if node is None and _may_fall_back(request, wants_on_demand):
            node = _best_node(room, zones, per_node, request, capacity=_other(preferred))
            if wants_on_demand and node is not None:
                floor_unmet += 1
        if node is None:
            unplaced += 1
            continue
        part = room.take(node.name)
        zones[node.zone] += 1
        per_node[node.name] += 1
        on_demand += node.capacity_type == CapacityType.ON_DEMAND
        starts.append(NewReplica(node.name, node.zone, node.capacity_type, part=part))
    return starts, unplaced, floor_unmet


class _Room:
    """Replicas of the request each node still holds, as replicas are planned: whole GPUs, fractions, MIG instances."""

    def __init__(self, snapshot: ClusterSnapshot, request: ServingRequest, kept_off: frozenset[str]) -> None:
        self.snapshot, self.share = snapshot, request.share
        self.need = 1 if self.share is not None else request.gpus_per_replica
        """What one replica takes of `left`: GPUs for whole ones, one replica's room for parts."""
        if self.share is not None and self.share.is_mig:
            self.nodes = [n for n in snapshot.shared.mig_nodes.values() if n.name not in kept_off]
            self.left = {
                n.name: snapshot.shared.mig_free.get(n.name, {}).get(str(self.share.mig_profile), 0) for n in self.nodes
            }
            return
        self.nodes = [n for n in snapshot.nodes() if n.usable and n.name not in kept_off]
        if self.share is not None:
            self.left = {n.name: share_room(snapshot, n.name, self.share) for n in self.nodes}
        else:
            self.left = {n.name: snapshot.free_gpus(n.name) for n in self.nodes}
        self._fresh_growth: dict[tuple[str | None, int], float | None] = {}

    @property
    def fraction(self) -> bool:
        return self.share is not None and not self.share.is_mig

    def growth(self, node: Node) -> float:
        """How much a replica grows NODE's fragmentation (fractions only): the same on any wholly free GPU
        of a product and size, so worked out once for nodes no share holds a part of yet."""
        assert self.share is not None
        if node.name in self.snapshot.shared.parts:
            choice = share_choice(self.snapshot, node.name, self.share)
            return choice[0] if choice is not None else float("inf")
        key = (node.gpu_product, self.snapshot.shared.memory_of(node.name))
        if key not in self._fresh_growth:
            choice = share_choice(self.snapshot, node.name, self.share)
            self._fresh_growth[key] = choice[0] if choice is not None else None
        growth = self._fresh_growth[key]
        return float("inf") if growth is None else growth

    def take(self, name: str) -> SharePart | None:
        """One replica's room on node NAME is taken; a fraction's part of a GPU there, which it takes."""
        self.left[name] -= self.need
        if not (self.fraction and self.share is not None):
            return None
        choice = share_choice(self.snapshot, name, self.share)
        if choice is None:
            return None
        part = choice[1]
        self.snapshot.shared.take_part(part)
        if part.splits:
            self.snapshot.allocate({name: 1})
        return part


def _may_fall_back(request: ServingRequest, wants_on_demand: bool) -> bool:
    if request.spot_policy == SpotPolicy.NEVER:
        return False
    # Only spot: the floor may still use on-demand, the rest may not.
    return wants_on_demand or request.spot_policy == SpotPolicy.PREFER


def _other(capacity: CapacityType) -> CapacityType:
    return CapacityType.SPOT if capacity == CapacityType.ON_DEMAND else CapacityType.ON_DEMAND


def _best_node(
    room: _Room,
    zones: Counter[str | None],
    per_node: Counter[str],
    request: ServingRequest,
    *,
    capacity: CapacityType,
) -> Node | None:
    candidates = [
        node
        for node in room.nodes
        if node.schedulable
        and not node.interrupted
        and node.capacity_type == capacity
        and room.left[node.name] >= room.need
        and (request.gpu_type is None or node.gpu_product == request.gpu_type)
        and _tolerated(node, request.tolerations)
    ]
    if not candidates:
        return None
    spread = min((zones[n.zone], per_node[n.name]) for n in candidates)
    candidates = [n for n in candidates if (zones[n.zone], per_node[n.name]) == spread]
    if room.fraction:
        return min(candidates, key=lambda n: (room.growth(n), room.left[n.name], n.name))
    return min(candidates, key=lambda n: (room.left[n.name], n.name))


def _tolerated(node: Node, tolerations: Sequence[Toleration]) -> bool:
    return all(any(t.tolerates(taint) for t in tolerations) for taint in node.taints if taint.repels)


def tag_replacements(starts: list[NewReplica], doomed: Sequence[str]) -> list[NewReplica]:
    """STARTS, each standing in for one of the DOOMED replicas (by name) while any is left."""
    names = sorted(doomed)
    return [replace(s, replaces=names[i] if i < len(names) else None) for i, s in enumerate(starts)]


def _doomed_to_retire(doomed: Sequence[ServingReplica], desired: int, kept: Sequence[ServingReplica]) -> list[str]:
    """Doomed replicas that the ready healthy ones no longer need as cover."""
    ready_healthy = sum(r.ready for r in kept)
    still_needed = max(0, desired - ready_healthy)
    cover = sorted((r for r in doomed if r.ready), key=lambda r: r.name)[:still_needed]
    covering = {r.name for r in cover}
    return sorted(r.name for r in doomed if r.name not in covering)


def _zone(snapshot: ClusterSnapshot, name: str) -> str | None:
    node = gpu_node(snapshot, name)
    return node.zone if node is not None else None
