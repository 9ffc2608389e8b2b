"""Nodes for whole gangs: which NodeClaims to ask a node autoscaler (Karpenter) for, and which to withdraw.

After a scheduling cycle, every gang left waiting for capacity (not for its quota, not deferred)
gets nodes for all of its replicas in one zone, at once, of the cheapest instance type whose nodes
hold its replicas, on the capacity type the spot decision gave it (spot first). A gang that
running jobs will make room for sooner than nodes can boot (the scheduler's reservation, from
known durations) gets none; nor one its queue's quota and borrowing could not admit once its
nodes are there. The gangs are taken in the fair order of admission (`queueing.fair_order`), and
each one given nodes is charged to a copy of the cycle's quota ledger before the next is weighed:
queues of one cohort borrow from one pool of idle GPUs, so two of them asking the cohort's idle
GPUs each get nodes for what the cohort can admit of the two together, not twice that. Requests are
recomputed every cycle from what is asked for now, so a request never outlives its need: nodes
asked for a gang that no longer waits are withdrawn while they boot; once up and empty, they are
the node autoscaler's to consolidate.

A gang first takes room on nodes already coming (asked for it, or for other gangs and not all
theirs), whole in one zone; new nodes are asked for only for what is left, and their spare GPUs
take later gangs of the same plan, so small gangs share a node. Among spot offerings, the zone
is the one of least expected cost: price x nodes, times what interruptions there are expected to
waste (`FleetOutlook`, `policy.spot.interruption_cost_factor`), not the price alone. A
node pool's limit (`PoolHeadroom`: its limit less what its NodeClaims have) is never exceeded,
and never by part of a gang. The simulator's fleet (aisched.sim.fleet.gangs) plans with this function
too.

Pure: the offerings, the requests already made and the time are parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from aisched.api.common import CapacityType
from aisched.policy.placement import INSUFFICIENT_GPUS, NO_MATCHING_NODES, REPLICA_TOO_LARGE, TOPOLOGY_TOO_SMALL
from aisched.policy.queueing import MILLI, QueueQuota, QuotaLedger, fair_order
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.results import QueueUsage, ScheduleResult
from aisched.policy.spot import interruption_cost_factor
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
    zones: Mapping[str, str] = field(default_factory=dict)
    """Gang -> the zone of the nodes planned for it (asked for, or coming with room for it)."""


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


@dataclass(slots=True)
class _Coming:
    """A node on its way (a claim made earlier, or one this plan asks for) and the GPUs left on it."""

    claim: str | None
    """The claim's name; None for a node this plan asks for."""
    gang: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    gpu_product: str | None
    room: int

    def suits(self, job: JobRequest, capacity: CapacityType) -> bool:
        return (
            self.capacity_type == capacity
            and job.gpu_type in (None, self.gpu_product)
            and self.room >= job.gpus_per_replica
        )


@dataclass(frozen=True, slots=True)
class PoolHeadroom:
    """GPUs of new nodes each node pool's limits still allow, and the pool each capacity type's
    nodes join. Karpenter checks a NodePool's limits only for the NodeClaims it makes itself, not
    for ours: the plan has to. A capacity type with no pool here, or a pool with no figure, has
    no limit."""

    gpus: Mapping[str, int]
    pools: Mapping[CapacityType, str]

    @classmethod
    def shared(cls, gpus: int) -> PoolHeadroom:
        """One limit over every capacity type (the simulator's fleet)."""
        return cls({"": gpus}, dict.fromkeys(CapacityType, ""))


@dataclass(frozen=True, slots=True)
class FleetOutlook:
    """What the fleet can still grow by, and how likely its spot nodes are to be taken away."""

    headroom: PoolHeadroom | None = None
    """What the node pools' limits still allow. None: no limits."""
    spot_interruptions: Mapping[tuple[str | None, str], float] = field(default_factory=dict)
    """Interruptions per node-second expected of spot nodes by (GPU product, zone), as
    `policy.interruptions` estimates them; a pool not named: none known."""
    interruption_loss: timedelta | None = None
    """What one interruption costs a gang (new nodes, the restart, unsaved work); None: the boot time."""

    def expected_cost(self, offering: Offering, nodes: int, boot: timedelta) -> float:
        """Price of NODES of OFFERING per hour of the gang's work, interruptions included."""
        if offering.capacity_type != CapacityType.SPOT:
            return offering.price * nodes
        rate = self.spot_interruptions.get((offering.gpu_product, offering.zone), 0.0)
        loss = (self.interruption_loss if self.interruption_loss is not None else boot).total_seconds()
        # A gang stops when any of its nodes goes: its rate is the sum of its nodes'.
        return offering.price * nodes * interruption_cost_factor(nodes * rate, loss)


def plan_provisioning(
    result: ScheduleResult,
    jobs: Iterable[JobRequest],
    offerings: Sequence[Offering],
    claims: Collection[Claim],
    *,
    now: datetime,
    boot: timedelta,
    topology: Topology,
    outlook: FleetOutlook = FleetOutlook(),
) -> ProvisioningPlan:
    """What to ask for and withdraw after the cycle that gave RESULT on JOBS (its requests)."""
    by_key = {job.key: job for job in jobs}
    products = {o.instance_type: o.gpu_product for o in offerings}
    planner = _Planner(
        offerings,
        coming=[
            _Coming(c.name, c.gang, c.instance_type, c.zone, c.capacity_type, products.get(c.instance_type), c.gpus)
            for c in sorted(claims, key=lambda c: c.name)
            if not c.held
        ],
        headroom=dict(outlook.headroom.gpus) if outlook.headroom is not None else {},
        pool_of=outlook.headroom.pools if outlook.headroom is not None else {},
        cost=lambda o, n: outlook.expected_cost(o, n, boot),
    )
    ledger = _ledger_after(result.queues)
    # A queue the cycle did not know gets nothing. The others in the order admission takes them, each
    # share re-read after every gang charged: first what each queue's own quota holds, which its cohort
    # guarantees it, then what it would borrow of the cohort's idle GPUs, lent once for all its queues.
    wanting = [job for job in _wanting(result, by_key, now + boot, topology) if job.queue in ledger.quotas]
    for borrowing in (False, True):
        left_over = [job for job in wanting if job.key not in planner.kept]
        for waiting_job in fair_order(left_over, ledger, band=lambda job: -1 if job.set_back else 0):
            room = ledger.room(waiting_job.queue) if borrowing else _own_room(ledger, waiting_job.queue)
            job = _admissible(waiting_job, room)
            if job is not None and planner.plan(job):
                ledger.charge(job.queue, job.charge(job.replicas), job.gpu_type)  # what its admission will charge
    keep_names = {name for names in planner.kept.values() for name in names}
    withdraw = tuple(sorted(c.name for c in claims if not (c.held or c.registered or c.name in keep_names)))
    return ProvisioningPlan(tuple(planner.create), withdraw, planner.kept, planner.zones)


def _own_room(ledger: QuotaLedger, queue: str) -> int | None:
    """What QUEUE may still take of its own quota, borrowing nothing (thousandths); None: no quota."""
    quota = ledger.quotas[queue]
    return None if quota.nominal_gpus is None else max(0, quota.nominal_gpus * MILLI - ledger.used[queue])


def _admissible(job: JobRequest, room: int | None) -> JobRequest | None:
    """JOB at the most replicas ROOM (thousandths) admits: an elastic job the room cannot hold whole at
    the most it can, down to its minimum (the scheduler has already shrunk whatever it shrinks); None
    when its quota could not admit it."""
    per_replica = job.charge(1)
    fits = job.replicas if room is None or per_replica <= 0 else min(job.replicas, room // per_replica)
    return replace(job, replicas=fits) if fits >= (job.min_replicas or job.replicas) and fits > 0 else None


@dataclass
class _Planner:
    """The nodes a plan asks for, gang by gang: what is coming, what the pools still allow."""

    offerings: Sequence[Offering]
    coming: list[_Coming]
    headroom: dict[str, int]
    pool_of: Mapping[CapacityType, str]
    cost: Callable[[Offering, int], float]
    create: list[NodeRequest] = field(default_factory=list)
    kept: dict[str, tuple[str, ...]] = field(default_factory=dict)
    zones: dict[str, str] = field(default_factory=dict)

    def plan(self, job: JobRequest) -> bool:
        """Nodes for all of JOB's replicas, on nodes coming or new; False when none can be asked for."""
        choice = _place(job, self.offerings, self.coming, self.cost)
        if choice is None:
            return False
        offering, used, unplaced = choice
        missing = math.ceil(unplaced / (offering.gpus // job.gpus_per_replica)) if unplaced else 0
        pool = self.pool_of.get(offering.capacity_type)
        if missing and pool in self.headroom:
            if missing * offering.gpus > self.headroom[pool]:
                return False  # the pool's limits would stop part of the gang: ask for none of it
            self.headroom[pool] -= missing * offering.gpus
        _take(job, used)
        self.kept[job.key] = tuple(sorted({c.claim for c in used if c.claim is not None}))
        self.zones[job.key] = used[0].zone if used else offering.zone
        if missing > 0:
            self.create.append(NodeRequest(job.key, offering, missing))
            new = [_new(job.key, offering) for _ in range(missing)]
            _take(replace(job, replicas=unplaced), new)
            self.coming += new  # their spare GPUs may take later gangs of this plan
        return True


def _ledger_after(queues: Mapping[str, QueueUsage]) -> QuotaLedger:
    """The quota ledger as the cycle left it: each queue's quota charged with what it uses.

    A usage that names no quota is a queue standing alone with its room (`room_gpus`) left."""
    quotas = {
        name: usage.quota
        or QueueQuota(name, None if usage.room_gpus is None else -(-usage.used_milli // MILLI) + usage.room_gpus)
        for name, usage in queues.items()
    }
    # Unlimited queues' shares are weighed against the cluster; GPUs in use are what the cycle saw of it.
    ledger = QuotaLedger(quotas, sum(usage.used_gpus for usage in queues.values()))
    for name, usage in queues.items():
        ledger.charge(name, usage.used_milli, None)
    return ledger


def _wanting(
    result: ScheduleResult, by_key: Mapping[str, JobRequest], booted: datetime, topology: Topology
) -> list[JobRequest]:
    """The gangs left waiting that new nodes would cure: highest priority first, then first come
    (`fair_order` then weighs the queues' shares between them)."""
    wanting = []
    for waiting in result.waiting:
        job = by_key.get(waiting.key)
        if job is None or job.placement is not None or waiting.reason not in WANTS_NODES:
            continue
        if not provisionable(job.required_level, topology):
            continue
        if waiting.expected_start is not None and waiting.expected_start <= booted:
            continue  # running jobs make room before nodes could: waiting is sooner
        wanting.append(job)
    return sorted(wanting, key=lambda j: (-j.priority, not j.set_back, j.created, j.key))


def _place(
    job: JobRequest,
    offerings: Sequence[Offering],
    coming: Sequence[_Coming],
    cost: Callable[[Offering, int], float],
) -> tuple[Offering, list[_Coming], int] | None:
    """JOB's offering, the coming nodes it takes and the replicas left for new nodes of the offering;
    None: nothing can be asked for it."""
    capacity = job.capacity_types[0] if job.capacity_types else CapacityType.ON_DEMAND
    suitable = [
        o
        for o in offerings
        if o.capacity_type == capacity and job.gpu_type in (None, o.gpu_product) and o.gpus >= job.gpus_per_replica
    ]
    if not suitable:
        return None
    choice = _on_coming(job, capacity, suitable, coming)
    if choice is not None:
        return choice
    best = min(suitable, key=lambda o: (cost(o, _nodes(job, o)), o.zone, o.instance_type))
    return best, [], job.replicas


def _nodes(job: JobRequest, offering: Offering) -> int:
    return math.ceil(job.replicas / (offering.gpus // job.gpus_per_replica))


def _new(gang: str, o: Offering) -> _Coming:
    return _Coming(None, gang, o.instance_type, o.zone, o.capacity_type, o.gpu_product, o.gpus)


def _take(job: JobRequest, nodes: Sequence[_Coming]) -> None:
    """Replica by replica onto NODES, in order: the room they leave for later gangs."""
    placed = 0
    for node in nodes:
        while placed < job.replicas and node.room >= job.gpus_per_replica:
            node.room -= job.gpus_per_replica
            placed += 1


def _fit(job: JobRequest, capacity: CapacityType, nodes: Sequence[_Coming]) -> tuple[list[_Coming], int]:
    """The coming NODES some of JOB's replicas would take, and how many replicas they leave over."""
    used: list[_Coming] = []
    left = job.replicas
    for node in nodes:
        if left and node.suits(job, capacity):
            used.append(node)
            left -= min(left, node.room // job.gpus_per_replica)
    return used, left


def _on_coming(
    job: JobRequest, capacity: CapacityType, suitable: Sequence[Offering], coming: Sequence[_Coming]
) -> tuple[Offering, list[_Coming], int] | None:
    """Where JOB goes on nodes already coming: the offering of any more nodes it needs, the coming
    nodes it takes, and the replicas left for new nodes. None: nothing coming suits it.

    Nodes asked for it earlier stay where they are (their zone, type and capacity type), as long as
    they suit its capacity type now, topped up with more of the same; else a zone whose coming
    nodes (asked for other gangs, with room left) hold the whole gang takes it, and no node is
    asked for. A gang is never split between coming nodes of one zone and new ones of another.
    """
    for own in (c for c in coming if c.gang == job.key and c.claim is not None):
        same = [
            o
            for o in suitable
            if (o.instance_type, o.zone, o.capacity_type) == (own.instance_type, own.zone, own.capacity_type)
        ]
        if same:
            in_zone = [c for c in coming if c.zone == own.zone]
            # Its own nodes first, then other gangs' room in the zone.
            in_zone.sort(key=lambda c: c.gang != job.key)
            used, left = _fit(job, capacity, in_zone)
            return same[0], used, left
    for zone in sorted({c.zone for c in coming}):
        used, left = _fit(job, capacity, [c for c in coming if c.zone == zone])
        if used and not left:
            return suitable[0], used, 0
    return None
