"""aisched's scheduler on a fleet: static, or asking for nodes for whole gangs when a gang cannot be placed.

`GangLoop` runs the operator's own cycle, `aisched.policy.decision.decide` (through
aisched.sim.policies.AischedPolicy), on the Ready nodes of the fleet, every gang confined to one
zone. With a `GangProvisioner` it does what the operator's scheduling cycle does with Karpenter
(aisched.controller.cycle, aisched.controller.training.cycle_kind, aisched.controller.provisioning),
with the same policy functions, on the default Queue a platform team would write for a growing fleet
(`GangProvisioner.queues`: the NodePool's GPUs, time-slicing off):

- before the cycle, each pending gang's capacity type comes from `aisched.policy.spot.choose_capacity`
  (spot first; on-demand when the deadline needs it; waiting while no zone has spot and the slack
  allows), and the gang enters the cycle on the types `aisched.policy.spot.capacity_types_of`
  gives that choice, as the operator's does: spot alone for spot and for waiting for spot,
  on-demand alone for on-demand. The work left is the job's estimate (`SimJob.estimate`, the
  operator's `expectedDurationSeconds`, not credited with work done, as
  aisched.controller.training.capacity reads it), never the trace's true duration. A gang given
  spot is placed on spot nodes only (an idle on-demand node is not used while spot boots; an
  earlier version of this arm allowed that, and Pollux's average JCT was 1.091x the static peak
  fleet's with it against 1.107x without, measured with true durations).
- after it, `aisched.policy.provisioning.plan_provisioning` decides which nodes to ask for and
  which booting ones to withdraw, from the cycle's result, the fleet's nodes as NodeClaims (each
  remembers the gang it was asked for), the offerings the market has now (a zone without spot
  offers none, as Karpenter marks an offering unavailable), each spot zone's interruption rate so
  far, and the NodePool limit's headroom. The fleet launches and withdraws what it says.

What the simulator still knows or does otherwise than the operator, and what stands in the way:

- "spot available" is what the market offers now, zone by zone, and a zone without spot offers
  no spot nodes to the provisioning plan. The operator's `CapacityChooser` with provisioning on
  asks `NodeProvisioner.offers`, over its static instance-types file: spot is "available"
  whenever a spot offering is configured, in an outage too, and its plan asks for spot
  NodeClaims there. The operator reads no signal of a zone's spot being out (Karpenter's
  unavailable offerings, NodeClaims that fail to launch), and this fleet has no NodeClaim that
  fails to launch; until one of the two exists, the simulated operator knows the market.
- The decision period given to `choose_capacity` is the time to the market's next sample, when a
  gang waiting for spot is looked at again here (cycles run on events, not every resync); the
  operator's is its resync period. The restart overhead is the boot time plus the loop's restart
  cost: the operator's `restart_overhead_seconds`, set as a user with a growing fleet would.
- Gangs the cycle did not reach (it admits a bounded number) have the next cycle a second later
  (`DEFERRED_CYCLE_S`), not at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from aisched.api.common import CapacityType, SpotPolicy
from aisched.api.queue import DEFAULT_QUEUE, Queue, QueueSpec, TimeSlicingSpec
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.provisioning import Claim, FleetOutlook, PoolHeadroom, offers, plan_provisioning
from aisched.policy.provisioning import Offering as PolicyOffering
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import ScheduleResult
from aisched.policy.spot import CapacityChoice, CapacityDecision, SpotJob, capacity_types_of, choose_capacity
from aisched.policy.topology import LOCAL_TOPOLOGY
from aisched.sim.fleet.catalog import Offering
from aisched.sim.fleet.fleet import HOUR, Fleet, SpotMarket
from aisched.sim.fleet.replay import Loop
from aisched.sim.jobs import SimJob, at
from aisched.sim.policies import AischedPolicy, attained_after_run
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
        self.policy = _ZonePolicy(ClusterSnapshot([]), provisioner.queues() if provisioner is not None else ())
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
            attained = attained_after_run(request, now)
            self.policy.pending[key] = replace(
                request, placement=None, started=None, attained_gpu_seconds=attained, set_back=True
            )
            self.stop_run(self.by_key[key], now)
        self.ready_names = None  # the snapshot still counts the stopped gangs: rebuild it

    def cycle(self, now: float) -> float:
        self._sync(now)
        if self.provisioner is not None:
            self.provisioner.decide_capacity(self, now)
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
        if self.provisioner is not None and self.policy.last_result is not None:
            wake = min(wake, self.provisioner.plan(self, self.policy.last_result, now))
        return wake


@dataclass
class GangProvisioner:
    offerings: Sequence[Offering]
    """What a gang's nodes can be, cheapest first (aisched.sim.fleet.catalog.for_product)."""
    quota_gpus: int
    """The NodePool limit: GPUs of nodes launched and not gone."""
    spot_policy: SpotPolicy = SpotPolicy.PREFER
    decisions: dict[str, CapacityDecision] = field(default_factory=dict)
    asked_for: dict[str, str] = field(default_factory=dict)
    """Node -> the gang it was asked for (a NodeClaim's annotation)."""
    waiting_for_spot: set[str] = field(default_factory=set)

    @staticmethod
    def estimate_of(job: SimJob) -> float:
        return float(job.estimate or 0.0)

    def queues(self) -> tuple[QueueQuota, ...]:
        """The default Queue a platform team writes for a fleet that grows, read as the operator reads
        Queues (`QueueQuota.from_queue`): every GPU the NodePool limit allows, and no time-slicing: a
        waiting gang gets new nodes rather than another gang's (whose preemption costs a restart and,
        soon after, nodes of its own)."""
        spec = QueueSpec(nominal_gpus=self.quota_gpus, time_slicing=TimeSlicingSpec(enabled=False))
        return (QueueQuota.from_queue(Queue(metadata={"name": DEFAULT_QUEUE}, spec=spec)),)

    def _available(self, market: SpotMarket, now: float) -> list[PolicyOffering]:
        return sorted(
            PolicyOffering(
                o.per_hour,
                o.instance_type.name,
                o.zone,
                o.capacity_type,
                o.instance_type.gpus,
                o.instance_type.gpu_product,
            )
            for o in self.offerings
            if o.capacity_type == CapacityType.ON_DEMAND or market.available(o.zone, now)
        )

    def decide_capacity(self, loop: GangLoop, now: float) -> None:
        """Each pending gang's capacity type, as the operator decides it before its cycle."""
        spot = offers(self._available(loop.fleet.market, now), CapacityType.SPOT, None)
        self.waiting_for_spot = set()
        for key, request in list(loop.policy.pending.items()):
            deadline = loop.deadlines.get(key)
            # What the operator's CapacityChooser knows: the user's expectedDurationSeconds (the
            # simulation's estimate, None: 0), not credited with work done, never the trace's truth.
            estimate = self.estimate_of(loop.by_key[key])
            decision = choose_capacity(
                self.spot_policy,
                SpotJob(estimate, loop.overhead + loop.fleet.delay),
                now=at(now),
                deadline=at(deadline) if deadline is not None else None,
                spot_available=spot,
                # The next decision may be as late as the market's next sample (the wake-up of a gang
                # waiting for spot), as the operator's may be a resync away.
                decision_period_s=loop.fleet.market.next_sample(now) - now,
                previous=self.decisions.get(key),
            )
            self.decisions[key] = decision
            if decision.choice == CapacityChoice.WAIT:
                self.waiting_for_spot.add(key)
            loop.policy.pending[key] = replace(request, capacity_types=capacity_types_of(decision))

    def plan(self, loop: GangLoop, result: ScheduleResult, now: float) -> float:
        """Ask for and withdraw nodes; returns when to look again for gangs left waiting (inf: no need)."""
        fleet, market = loop.fleet, loop.fleet.market
        claims = [
            Claim(
                node.name,
                self.asked_for.get(node.name, ""),
                node.offering.instance_type.name,
                node.zone,
                node.offering.capacity_type,
                node.gpus,
                held=node.used > 0,
                registered=node.ready_at <= now,
            )
            for node in fleet.alive.values()
        ]
        offerings = self._available(market, now)
        rates = {
            (o.gpu_product, o.zone): market.interruption_rate(o.zone, now) / HOUR
            for o in offerings
            if o.capacity_type == CapacityType.SPOT
        }
        plan = plan_provisioning(
            result,
            # Every request of the cycle, as the operator hands them: a gang waiting for spot is among them,
            # and gets no nodes, for it waits only while no zone offers spot (`decide_capacity`).
            [*loop.policy.running.values(), *loop.policy.pending.values()],
            offerings,
            claims,
            now=at(now),
            boot=timedelta(seconds=fleet.delay),
            topology=LOCAL_TOPOLOGY,
            outlook=FleetOutlook(
                headroom=PoolHeadroom.shared(self.quota_gpus - fleet.gpus()),
                spot_interruptions={k: v for k, v in rates.items() if math.isfinite(v)},
                interruption_loss=timedelta(seconds=fleet.delay + loop.overhead),
            ),
        )
        by_name = {(o.instance_type.name, o.zone, o.capacity_type): o for o in self.offerings}
        for request in plan.create:
            wanted = request.offering
            for _ in range(request.count):
                node = fleet.launch(by_name[wanted.instance_type, wanted.zone, wanted.capacity_type], now)
                self.asked_for[node.name] = request.gang
        for name in plan.withdraw:
            fleet.withdraw(name, now)
            del self.asked_for[name]
        wake = market.next_sample(now) if self.waiting_for_spot else math.inf
        soon = at(now + fleet.delay)
        if any(w.expected_start is not None and w.expected_start <= soon for w in result.waiting):
            wake = min(wake, now + fleet.delay)  # in case the estimate was short
        return wake
