"""Nodes for whole gangs: which NodeClaims to ask a node autoscaler (Karpenter) for, and which to withdraw.

After a scheduling cycle, every gang left waiting for capacity (not for its quota, not deferred)
gets nodes for all of its replicas in one zone, at once, of the cheapest instance type whose nodes
hold its replicas, on the capacity type the spot decision gave it (spot first). A gang that
running jobs will make room for sooner than nodes can boot (the scheduler's reservation, from
known durations) gets none; nor one its queue's quota and borrowing could not admit once its
nodes are there: the GPUs of the gangs already given nodes are counted first. Requests are
recomputed every cycle from what is asked for now, so a request never outlives its need: nodes
asked for a gang that no longer waits are withdrawn while they boot; once up and empty, they are
the node autoscaler's to consolidate.

Pure: the offerings, the requests already made and the time are parameters.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from aisched.api.common import CapacityType
from aisched.policy.placement import INSUFFICIENT_GPUS, NO_MATCHING_NODES, REPLICA_TOO_LARGE, TOPOLOGY_TOO_SMALL
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.results import ScheduleResult
from aisched.policy.topology import Level, Topology

# Why a gang may wait that new nodes would cure. Not: its quota (QuotaExceeded), a queue that does
# not exist, GPUs reserved for a job ahead of it in line.
WANTS_NODES = frozenset({NO_MATCHING_NODES, INSUFFICIENT_GPUS, TOPOLOGY_TOO_SMALL, REPLICA_TOO_LARGE})
# Instance-type file keys (Karpenter's KWOK provider format, kwok/cloudprovider/instance_types.json).
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"


def provisionable(level: Level | None, topology: Topology) -> bool:
    """New nodes carry a zone and a hostname, and no rack, block or NVLink-domain label a cloud
    would promise for them: only a gang that requires no level, the node, or the zone is asked for."""
    return level is None or level.is_node or topology.node_label(level) == ZONE_LABEL


KARPENTER_CAPACITY = {"spot": CapacityType.SPOT, "on-demand": CapacityType.ON_DEMAND}


@dataclass(frozen=True, slots=True, order=True)
class Offering:
    """One instance type on one capacity type in one zone, at its price per node-hour."""

    price: float
    instance_type: str
    zone: str
    capacity_type: CapacityType
    gpus: int
    gpu_product: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    """A node asked for earlier (a NodeClaim we made), as the cluster has it now."""

    name: str
    gang: str
    """namespace/name of the TrainingJob it was asked for."""
    instance_type: str
    zone: str
    capacity_type: CapacityType
    gpus: int
    held: bool
    """GPUs are held on its node, or a gang's placement names it: never withdrawn."""
    registered: bool = False
    """Its node is up. Such a claim is never withdrawn either: the scheduler may be placing a gang
    on its node in this very cycle. Once the node is empty, Karpenter's consolidation takes it,
    which taints the node (karpenter.sh/disrupted) first, so nothing new lands there meanwhile,
    and gives up on a node a pod was bound to."""


@dataclass(frozen=True, slots=True)
class NodeRequest:
    """COUNT new nodes of OFFERING for GANG."""

    gang: str
    offering: Offering
    count: int


@dataclass(frozen=True, slots=True)
class ProvisioningPlan:
    create: tuple[NodeRequest, ...] = ()
    withdraw: tuple[str, ...] = ()
    """Names of claims no waiting gang needs and nothing holds."""
    kept: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Gang -> the claims it keeps (for the log and the tests)."""


def offerings_from_instance_types(
    data: Sequence[Mapping[str, Any]], gpu_resource: str, product_label: str
) -> list[Offering]:
    """The offerings of an instance-types file, cheapest first; types without GPUs are left out.

    Raises ValueError on a malformed file (the operator's own configuration, read at start-up).
    """
    offerings: list[Offering] = []
    for item in data:
        name = str(item["name"])
        gpus = int(str((item.get("resources") or {}).get(gpu_resource, "0")))
        if gpus <= 0:
            continue
        for offering in item.get("offerings") or ():
            values = {r["key"]: r["values"] for r in offering.get("Requirements") or () if r.get("operator") == "In"}
            product = values.get(product_label, [None])[0]
            for capacity in values.get(CAPACITY_TYPE_LABEL, []):
                for zone in values.get(ZONE_LABEL, []):
                    if capacity not in KARPENTER_CAPACITY:
                        raise ValueError(f"instance type {name}: unknown capacity type {capacity!r}")
                    price = float(offering["Price"])
                    offerings.append(Offering(price, name, zone, KARPENTER_CAPACITY[capacity], gpus, product))
    return sorted(offerings)


def offers(offerings: Iterable[Offering], capacity_type: CapacityType, gpu_type: str | None) -> bool:
    """Whether new nodes of this capacity type (and GPU product, if named) can be asked for."""
    return any(o.capacity_type == capacity_type and gpu_type in (None, o.gpu_product) for o in offerings)


def plan_provisioning(
    result: ScheduleResult,
    jobs: Iterable[JobRequest],
    offerings: Sequence[Offering],
    claims: Collection[Claim],
    *,
    now: datetime,
    boot: timedelta,
    topology: Topology,
) -> ProvisioningPlan:
    """What to ask for and withdraw after the cycle that gave RESULT on JOBS (its requests)."""
    by_key = {job.key: job for job in jobs}
    room = {name: usage.room_gpus for name, usage in result.queues.items()}
    of_gang: dict[str, list[Claim]] = {}
    for claim in claims:
        of_gang.setdefault(claim.gang, []).append(claim)
    wanting = []
    for waiting in result.waiting:
        job = by_key.get(waiting.key)
        if job is None or job.placement is not None or waiting.reason not in WANTS_NODES:
            continue
        if not provisionable(job.required_level, topology):
            continue
        if waiting.expected_start is not None and waiting.expected_start <= now + boot:
            continue  # running jobs make room before nodes could: waiting is sooner
        wanting.append(job)
    # Highest priority first, then first come: they take the quota's room in that order.
    wanting.sort(key=lambda j: (-j.priority, not j.set_back, j.created, j.key))
    create: list[NodeRequest] = []
    kept: dict[str, tuple[str, ...]] = {}
    for waiting_job in wanting:
        if waiting_job.queue not in room:
            continue  # a queue the cycle did not know
        left = room[waiting_job.queue]
        # An elastic job the room cannot hold whole gets nodes for the most replicas it can (at
        # least its minimum); the scheduler has already shrunk whatever it shrinks before this.
        whole = waiting_job.replicas
        fits = whole if left is None else min(whole, left // waiting_job.gpus_per_replica)
        if fits < (waiting_job.min_replicas or whole):
            continue  # its quota and borrowing could not admit it: no nodes for it
        job = replace(waiting_job, replicas=fits)
        gpus = job.replicas * job.gpus_per_replica
        own = [c for c in of_gang.get(job.key, ()) if not c.held]
        choice = _choose(job, offerings, own)
        if choice is None:
            continue
        offering, keep = choice
        per_node = offering.gpus // job.gpus_per_replica
        missing = math.ceil(job.replicas / per_node) - len(keep)
        if left is not None:
            room[job.queue] = left - gpus
        kept[job.key] = tuple(c.name for c in keep)
        if missing > 0:
            create.append(NodeRequest(job.key, offering, missing))
    keep_names = {name for names in kept.values() for name in names}
    withdraw = tuple(sorted(c.name for c in claims if not (c.held or c.registered or c.name in keep_names)))
    return ProvisioningPlan(tuple(create), withdraw, kept)


def _choose(
    job: JobRequest, offerings: Sequence[Offering], own: Sequence[Claim]
) -> tuple[Offering, list[Claim]] | None:
    """The offering for JOB's nodes and the claims of its own it keeps.

    Claims already made stay where they are (their zone, type and capacity type), as long as they
    suit its capacity type now; else the gang's nodes cost least: price per node x nodes it needs.
    """
    capacity = job.capacity_types[0] if job.capacity_types else CapacityType.ON_DEMAND
    suitable = [
        o
        for o in offerings
        if o.capacity_type == capacity and job.gpu_type in (None, o.gpu_product) and o.gpus >= job.gpus_per_replica
    ]
    if not suitable:
        return None

    def nodes(o: Offering) -> int:
        return math.ceil(job.replicas / (o.gpus // job.gpus_per_replica))

    for claim in own:  # where its nodes are already coming
        same = [
            o
            for o in suitable
            if (o.instance_type, o.zone, o.capacity_type) == (claim.instance_type, claim.zone, claim.capacity_type)
        ]
        if same:
            keep = [
                c
                for c in own
                if (c.instance_type, c.zone, c.capacity_type) == (claim.instance_type, claim.zone, claim.capacity_type)
            ]
            return same[0], keep[: nodes(same[0])]
    best = min(suitable, key=lambda o: (o.price * nodes(o), o.zone, o.instance_type))
    return best, []
