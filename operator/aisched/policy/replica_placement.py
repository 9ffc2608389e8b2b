"""A service's new replicas placed by the scheduler itself, once: spread as the serving policy spreads them. Pure.

A service's ask enters `schedule` as a replica set (`JobRequest.replica_set`) carrying its spread
(`ReplicaSpread`: the replicas it keeps, the count it aims for, what each replica asks). At its
turn, `placement.place_gang` hands it here: the new replicas go where `policy.serving` would start
them (zones and nodes with the fewest of the service, the on-demand floor, best fit), on the nodes
the scheduler allows at that turn (products, capacity types, a reservation, GPUs this cycle freed).
The scheduler holds what they take like any admission's, and the
service is answered with those very replicas (`granted_plan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aisched.api.common import CapacityType
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import INSUFFICIENT_GPUS, GangRequest, Placement, Unplaceable
from aisched.policy.serving import (
    NewReplica,
    PlanReason,
    ServingPlan,
    ServingReplica,
    ServingRequest,
    allowed_capacity,
    gpu_node,
    on_demand_floor,
    place_new_replicas,
)
from aisched.policy.topology import DomainId


@dataclass(frozen=True)
class ReplicaSpread:
    """How a service's new replicas are placed, when the scheduler places them (`GangRequest.spread`): spread
    beside its KEPT replicas over zones and nodes, with the on-demand floor of DESIRED, as `plan_serving` does."""

    kept: tuple[ServingReplica, ...]
    desired: int
    request: ServingRequest


def place_replica_set(request: GangRequest, snapshot: ClusterSnapshot) -> Placement | Unplaceable:
    """`request.replicas` new replicas of a service, spread as its `ReplicaSpread` says, on nodes REQUEST allows
    (its products, capacity types, exclusions); or why not. Reads SNAPSHOT, never changes it.

    Replicas are not a gang: no domain holds them together, so the request's levels do not bound them, and
    a service that names no GPU type spreads over zones whatever product each has (its queue is charged
    each replica on its own node's product: `CycleState.admit`)."""
    spread = request.spread
    assert spread is not None
    kept_off = request.excluded_nodes | _disallowed(request, snapshot)
    floor = on_demand_floor(spread.request, spread.desired)
    starts, _, _ = place_new_replicas(spread.kept, request.replicas, floor, spread.request, snapshot, kept_off=kept_off)
    if len(starts) < request.replicas:
        return Unplaceable(
            INSUFFICIENT_GPUS,
            f"{len(starts)} of {request.replicas} replica(s) of {spread.request.gpus_per_replica} "
            f"{spread.request.gpu_type or 'GPU'}(s) fit on no {allowed_capacity(spread.request)} node now",
        )
    return _as_placement(starts, request, spread.request, snapshot)


def _disallowed(request: GangRequest, snapshot: ClusterSnapshot) -> frozenset[str]:
    """GPU nodes REQUEST may not use: another product than it allows, or a capacity type it does not take."""
    off = set()
    for name in _gpu_node_names(snapshot):
        node = gpu_node(snapshot, name)
        assert node is not None
        if (
            request.gpu_types is not None and node.gpu_product not in request.gpu_types
        ) or node.capacity_type not in request.capacity_types:
            off.add(name)
    return frozenset(off)


def _gpu_node_names(snapshot: ClusterSnapshot) -> list[str]:
    return [*(n.name for n in snapshot.nodes()), *snapshot.shared.mig_nodes]


def _as_placement(
    starts: Sequence[NewReplica], gang: GangRequest, request: ServingRequest, snapshot: ClusterSnapshot
) -> Placement:
    nodes = tuple(s.node for s in starts)
    known = [n for n in dict.fromkeys(nodes) if n in snapshot]
    chosen = [node for n in dict.fromkeys(nodes) if (node := gpu_node(snapshot, n)) is not None]
    products = {n.gpu_product for n in chosen}
    capacity = {n.capacity_type for n in chosen}
    share = request.share
    return Placement(
        nodes=nodes,
        gpus_per_replica=gang.gpus_per_replica,
        domain=snapshot.tightest_domain(known) if known else DomainId(None, ()),
        gpu_type=next(iter(products)) if len(products) == 1 else None,
        capacity_type=next(iter(capacity)) if len(capacity) == 1 else None,
        parts=tuple(s.part for s in starts if s.part is not None) if share is not None and not share.is_mig else (),
        mig_profile=share.mig_profile if share is not None and share.is_mig else None,
    )


def replicas_placed(placement: Placement, snapshot: ClusterSnapshot) -> list[NewReplica]:
    """PLACEMENT (a replica set's, from `place_replica_set`) as the new replicas it starts, by rank."""
    starts = []
    for rank, name in enumerate(placement.nodes):
        node = gpu_node(snapshot, name)
        part = placement.parts[rank] if placement.parts else None
        capacity = node.capacity_type if node is not None else CapacityType.ON_DEMAND
        starts.append(NewReplica(name, node.zone if node is not None else None, capacity, part=part))
    return starts


def granted_plan(spread: ReplicaSpread, starts: Sequence[NewReplica], wanted: int) -> ServingPlan:
    """The plan a service is answered with when the cycle starts STARTS of the WANTED new replicas."""
    unplaced = wanted - len(starts)
    if unplaced:
        message = f"{len(starts)} of {wanted} new replica(s) start now; the rest wait for room"
        return ServingPlan(tuple(starts), (), unplaced, PlanReason.INSUFFICIENT_CAPACITY, message)
    floor = on_demand_floor(spread.request, spread.desired)
    running = [*(r.capacity_type for r in spread.kept), *(s.capacity_type for s in starts)]
    on_demand = sum(c == CapacityType.ON_DEMAND for c in running)
    if on_demand < floor and len(running) >= floor:
        message = f"{floor - on_demand} of the {floor} on-demand replica(s) run on spot: no on-demand node has room"
        return ServingPlan(tuple(starts), (), 0, PlanReason.ON_DEMAND_FLOOR_UNMET, message)
    if replacing := [s.replaces for s in starts if s.replaces is not None]:
        message = f"{len(replacing)} new replica(s) stand in for those on interrupted nodes"
        return ServingPlan(tuple(starts), (), 0, PlanReason.REPLACING_INTERRUPTED, message)
    message = f"{len(spread.kept)} -> {spread.desired} replicas"
    return ServingPlan(tuple(starts), (), 0, PlanReason.SCALING, message)
