"""aisched's scheduler on a fleet: static, or asking for nodes for whole gangs when a gang cannot be placed.

`GangLoop` runs the operator's own `schedule` (through aisched.sim.policies.AischedPolicy) on the
Ready nodes of the fleet, every gang confined to one zone. With a `GangProvisioner`, after each
cycle every gang still pending is given capacity as a whole: first room on nodes already booting
(the gang's pods all in one zone), else new nodes for all of it in one zone, on spot or
on-demand as `aisched.policy.spot.choose_capacity` says (spot first; on-demand when the deadline
needs it; waiting while spot is out and the slack allows). It never asks beyond the quota, never
for a gang that running jobs of known duration will make room for before nodes could boot, and
booting nodes no gang needs any more are withdrawn. Requests are recomputed every cycle, as a
reconciler would, so a request never outlives the need for it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from aisched.api.common import CapacityType, SpotPolicy
from aisched.api.queue import DEFAULT_QUEUE
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import JobRequest
from aisched.policy.spot import CapacityChoice, CapacityDecision, SpotJob, choose_capacity
from aisched.policy.topology import LOCAL_TOPOLOGY
from aisched.sim.fleet.catalog import Offering
from aisched.sim.fleet.fleet import Fleet, FleetNode
from aisched.sim.fleet.replay import Loop
from aisched.sim.jobs import EPOCH, SimJob, at
from aisched.sim.policies import AischedPolicy, _attained_after_run
from aisched.sim.speed import SpeedModel

DEFERRED_CYCLE_S = 1.0
"""The scheduler left gangs for the next cycle (it admits a bounded number per cycle): the
operator runs that cycle at once; a second later here."""


ZONE = LOCAL_TOPOLOGY.level("Zone")


class _ZonePolicy(AischedPolicy):
    """AischedPolicy with every gang confined to one zone: nodes of a gang talk over the fabric."""

    def submit(self, job: SimJob, now: float) -> None:
        super().submit(job, now)
        self.pending[job.key] = replace(self.pending[job.key], required_level=ZONE)


class GangLoop(Loop):
    def __init__(
        self,
        name: str,
        jobs: Sequence[SimJob],
        fleet: Fleet,
        *,
        provisioner: GangProvisioner | None = None,
        deadlines: Mapping[str, float] | None = None,
        restart_overhead_s: float = 60.0,
        speed: SpeedModel | None = None,
    ) -> None:
        super().__init__(jobs, fleet, deadlines=deadlines, restart_overhead_s=restart_overhead_s, speed=speed)
        self.name, self.provisioner = name, provisioner
        self.policy = _ZonePolicy(ClusterSnapshot([]))
        self.ready_names: frozenset[str] | None = None

    def _sync(self, now: float) -> None:
        """The scheduler sees the Ready nodes; rebuilt only when they change."""
        ready = self.fleet.ready(now)
        names = frozenset(n.name for n in ready)
        if names != self.ready_names:
            self.policy.snapshot = ClusterSnapshot([n.as_policy_node() for n in ready])
            self.ready_names = names

    def _release(self, gpus_by_node: Mapping[str, int], now: float) -> None:
        for name, gpus in gpus_by_node.items():
            self.fleet.release(name, gpus, now)

    def submit(self, job: SimJob, now: float) -> None:
        self.policy.submit(job, now)

    def finished(self, job: SimJob, now: float) -> None:
        placement = self.policy.running[job.key].placement
        assert placement is not None
        self.policy.finish(job, now)
        self._release(placement.gpus_by_node(), now)

    def interrupted(self, gone: set[str], now: float) -> None:
        """Gangs on nodes taken away stop to their checkpoint and queue again ahead of newcomers, whole."""
        for key, request in list(self.policy.running.items()):
            assert request.placement is not None
            if not gone.intersection(request.placement.nodes):
                continue
            self._release(request.placement.gpus_by_node(), now)
            del self.policy.running[key]
            attained = _attained_after_run(request, now)
            self.policy.pending[key] = replace(
                request, placement=None, started=None, attained_gpu_seconds=attained, set_back=True
            )
            self.stop_run(self.by_key[key], now)
        self.ready_names = None  # the snapshot still counts the stopped gangs: rebuild it

    def cycle(self, now: float) -> float:
        self._sync(now)
        if self.provisioner is not None:
            self.policy.queues = self.provisioner.queues(self)
        before = {k: r.placement.gpus_by_node() for k, r in self.policy.running.items() if r.placement}
        outcome = self.policy.cycle(now)
        for job in outcome.stopped:
            self._release(before[job.key], now)
            self.stop_run(job, now)
        for resized in outcome.resized:
            self._release(before[resized.job.key], now)
            self.stop_run(resized.job, now)
        for started in [*outcome.resized, *outcome.started]:
            for name in started.nodes:
                self.fleet.allocate(name, started.job.gpus_per_replica)
            self.start_run(started.job, started.nodes, now)
        wake = math.inf if outcome.wake_at is None else max(outcome.wake_at, now + DEFERRED_CYCLE_S)
        if self.provisioner is not None:
            wake = min(wake, self.provisioner.plan(self, now))
        return wake


@dataclass
class GangProvisioner:
    offerings: Sequence[Offering]
    """What a gang's nodes can be, cheapest first (aisched.sim.fleet.catalog.for_product)."""
    quota_gpus: int
    spot_policy: SpotPolicy = SpotPolicy.PREFER
    decisions: dict[str, CapacityDecision] = field(default_factory=dict)
    assigned: dict[str, list[str]] = field(default_factory=dict)
    """Booting node -> the gangs whose pods it was asked for, as of the last cycle."""

    def queues(self, loop: GangLoop) -> tuple[QueueQuota, ...]:
        """The queue as the scheduler sees it: while the fleet can still grow to hold every waiting
        gang within the quota, no time-slicing: a waiting gang gets new nodes rather than another
        gang's (whose preemption costs a restart and, soon after, nodes of its own)."""
        waiting = sum(_gpus(r) for r in loop.policy.pending.values())
        if loop.fleet.gpus() + waiting <= self.quota_gpus:
            return (QueueQuota(DEFAULT_QUEUE, nominal_gpus=None, min_run_seconds=None),)
        return ()

    def plan(self, loop: GangLoop, now: float) -> float:
        """Ask for and withdraw nodes; returns when to look again for gangs left waiting (inf: no need)."""
        fleet, policy = loop.fleet, loop.policy
        wake = math.inf
        room = {n.name: n.gpus for n in fleet.booting(now)}
        self.assigned = defaultdict(list)
        left = self.quota_gpus - fleet.gpus()
        soon = self._soon_free(loop, now + fleet.delay)
        free = self._free_by_zone(fleet.ready(now))
        for request in sorted(policy.pending.values(), key=lambda r: (not r.set_back, r.created, r.key)):
            if self._fit_booting(request, fleet, room):
                continue
            if any(soon[z] and soon[z] + free[z] >= _gpus(request) for z in soon):
                wake = min(wake, now + fleet.delay)  # in case the estimate was short
                continue  # running jobs end before nodes could boot: waiting is sooner
            offering = self._choose(loop, request, now)
            if offering is None:  # waiting for spot: look again when the market may have changed
                wake = min(wake, fleet.market.next_sample(now))
                continue
            per_node = offering.instance_type.gpus // request.gpus_per_replica
            if per_node == 0:
                continue
            count = math.ceil(request.replicas / per_node)
            if count * offering.instance_type.gpus > left:
                continue  # never beyond the quota
            left -= count * offering.instance_type.gpus
            for _ in range(count):
                node = fleet.launch(offering, now)
                room[node.name] = node.gpus
            self._fit_booting(request, fleet, room)
        for node in fleet.booting(now):
            if not self.assigned.get(node.name):
                fleet.withdraw(node.name, now)
        return wake

    def _fit_booting(self, request: JobRequest, fleet: Fleet, room: dict[str, int]) -> bool:
        """All the gang's pods on booting nodes of one zone, or none of them."""
        by_zone: dict[str, list[str]] = defaultdict(list)
        for name in room:
            node = fleet.alive[name]
            if node.offering.capacity_type in request.capacity_types:
                by_zone[node.zone].append(name)
        for zone in sorted(by_zone):
            pods: list[str] = []
            for name in by_zone[zone]:
                pods += [name] * min(room[name] // request.gpus_per_replica, request.replicas - len(pods))
            if len(pods) == request.replicas:
                for name in pods:
                    room[name] -= request.gpus_per_replica
                    if request.key not in self.assigned[name]:
                        self.assigned[name].append(request.key)
                return True
        return False

    def _choose(self, loop: GangLoop, request: JobRequest, now: float) -> Offering | None:
        """Spot first, in the zone that has lost spot least often; on-demand where the decision says."""
        market = loop.fleet.market
        zones = sorted({o.zone for o in self.offerings})
        spot_zones = [z for z in zones if market.available(z, now)]
        deadline = loop.deadlines.get(request.key)
        decision = choose_capacity(
            self.spot_policy,
            SpotJob(loop.remaining_at(request.key, now), loop.overhead + loop.fleet.delay),
            now=at(now),
            deadline=at(deadline) if deadline is not None else None,
            spot_available=bool(spot_zones),
            previous=self.decisions.get(request.key),
        )
        self.decisions[request.key] = decision
        if decision.pinned_on_demand and CapacityType.SPOT in request.capacity_types:
            # From here on it runs on on-demand only, on nodes it has now as on new ones.
            loop.policy.pending[request.key] = replace(request, capacity_types=(CapacityType.ON_DEMAND,))
        if decision.choice == CapacityChoice.WAIT:
            return None
        if decision.choice == CapacityChoice.SPOT:
            best = min(spot_zones, key=lambda z: (market.interruption_rate(z, now), z))
            wanted = (CapacityType.SPOT, best)
        else:
            wanted = (CapacityType.ON_DEMAND, "")
        for offering in self.offerings:
            if offering.capacity_type == wanted[0] and wanted[1] in ("", offering.zone):
                return offering
        return None

    @staticmethod
    def _soon_free(loop: GangLoop, by: float) -> dict[str, int]:
        """GPUs, by zone, of running gangs whose known durations say they end by `by`."""
        soon: dict[str, int] = defaultdict(int)
        for request in loop.policy.running.values():
            if request.expected_duration is None or request.placement is None or request.started is None:
                continue
            done = request.attained_gpu_seconds / max(1, request.placement.total_gpus)
            started = (request.started - EPOCH).total_seconds()
            if started + request.expected_duration.total_seconds() - done <= by:
                zone = loop.fleet.alive[request.placement.nodes[0]].zone
                soon[zone] += request.placement.total_gpus
        return soon

    @staticmethod
    def _free_by_zone(ready: Sequence[FleetNode]) -> dict[str, int]:
        free: dict[str, int] = defaultdict(int)
        for node in ready:
            free[node.zone] += node.gpus - node.used
        return free


def _gpus(request: JobRequest) -> int:
    return request.replicas * request.gpus_per_replica
