"""Karpenter alone: the default kube-scheduler binds each pod on its own, Karpenter provisions for pending pods.

What is modelled, from Karpenter's documented behaviour (karpenter.sh docs, v1):

- Batching: pending pods are gathered until no new one has come for `BATCH_IDLE_DURATION`
  (1 s) or `BATCH_MAX_DURATION` (10 s) has passed since the first, then provisioned at once.
- Pods already headed for a booting node (nominated) are not provisioned again; the rest are
  bin-packed, largest first, onto new NodeClaims of the cheapest instance type that can take them
  (the pods ask for one GPU product, so one type). Each NodeClaim is launched on its own: spot
  when some zone has it (a NodePool allowing both prefers spot), in a zone EC2's
  price-capacity-optimized allocation picks, drawn here at random among the zones that have spot
  (equal prices: nothing in the traces says which pool EC2 would favour); on-demand otherwise.
  Nothing ties the NodeClaims of one gang to one zone.
- The NodePool's `limits` (GPUs) stop launches beyond the quota.
- Consolidation takes away nodes that have been empty for `consolidateAfter`. Underutilized
  nodes are not consolidated: training pods carry `karpenter.sh/do-not-disrupt`, as Karpenter's
  docs advise for jobs, so only empty nodes go (the same for every arm).

The kube-scheduler binds pods first in, first served, each to the Ready node with the most free
GPUs (NodeResourcesFit LeastAllocated, the default); a gang runs once all its pods are bound,
and its bound pods hold their GPUs meanwhile. When a node of a running gang is taken away the
job's controller restarts the whole gang (as a JobSet does): all its pods are recreated and
bound again one by one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

from aisched.api.common import CapacityType
from aisched.sim.fleet.catalog import Offering
from aisched.sim.fleet.fleet import Fleet
from aisched.sim.fleet.replay import Loop
from aisched.sim.jobs import SimJob
from aisched.sim.speed import SpeedModel

BATCH_IDLE_DURATION_S = 1.0
BATCH_MAX_DURATION_S = 10.0


class KarpenterLoop(Loop):
    name = "karpenter_alone"

    def __init__(
        self,
        jobs: Sequence[SimJob],
        fleet: Fleet,
        offerings: Sequence[Offering],
        *,
        limit_gpus: int,
        seed: int = 0,
        deadlines: Mapping[str, float] | None = None,
        restart_overhead_s: float = 60.0,
        speed: SpeedModel | None = None,
    ) -> None:
        super().__init__(jobs, fleet, deadlines=deadlines, restart_overhead_s=restart_overhead_s, speed=speed)
        self.offerings, self.limit = offerings, limit_gpus
        self.rng = random.Random(f"karpenter-{seed}")
        self.waiting: dict[str, SimJob] = {}
        """Jobs with pods not all bound, first in first."""
        self.bound: dict[str, list[str]] = {}
        self.batch_start: float | None = None
        self.batch_last = 0.0
        self.batch_pods = 0

    def submit(self, job: SimJob, now: float) -> None:
        self.waiting[job.key] = job
        self.bound[job.key] = []

    def finished(self, job: SimJob, now: float) -> None:
        for name in self.bound.pop(job.key):
            self.fleet.release(name, job.gpus_per_replica, now)

    def interrupted(self, gone: set[str], now: float) -> None:
        for key, names in list(self.bound.items()):
            if not gone.intersection(names):
                continue
            job = self.by_key[key]
            if self.running(key):  # the gang restarts: every pod recreated
                self.stop_run(job, now)
                for name in names:
                    self.fleet.release(name, job.gpus_per_replica, now)
                self.bound[key] = []
                self.waiting = {key: job, **self.waiting}  # recreated pods: ahead, as their job is older
            else:  # the pods on the lost nodes are recreated; the others stay bound
                self.bound[key] = [n for n in names if n not in gone]

    def cycle(self, now: float) -> float:
        self._bind(now)
        held = 0
        for key, job in self.waiting.items():
            if self.bound[key]:
                self.partial_keys.add(key)
                held += len(self.bound[key]) * job.gpus_per_replica
        self.partial_gpus = held
        return self._provision(now)

    def _bind(self, now: float) -> None:
        free = {n.name: n.gpus - n.used for n in self.fleet.ready(now)}
        for key, job in list(self.waiting.items()):
            bound = self.bound[key]
            while len(bound) < job.replicas:
                name = max(
                    (n for n, f in free.items() if f >= job.gpus_per_replica),
                    key=lambda n: (free[n], n),
                    default=None,
                )
                if name is None:
                    break
                free[name] -= job.gpus_per_replica
                self.fleet.allocate(name, job.gpus_per_replica)
                bound.append(name)
            if len(bound) == job.replicas:
                del self.waiting[key]
                self.start_run(job, bound, now)

    def _unprovisioned(self, now: float) -> list[int]:
        """GPUs of each pending pod no booting node is headed for (first fit onto their room)."""
        room = [n.gpus for n in self.fleet.booting(now)]
        left = []
        for key, job in self.waiting.items():
            for _ in range(job.replicas - len(self.bound[key])):
                slot = next((i for i, r in enumerate(room) if r >= job.gpus_per_replica), None)
                if slot is None:
                    left.append(job.gpus_per_replica)
                else:
                    room[slot] -= job.gpus_per_replica
        return left

    def _provision(self, now: float) -> float:
        pods = self._unprovisioned(now)
        if not pods:
            self.batch_start, self.batch_pods = None, 0
            return math.inf
        if self.batch_start is None:
            self.batch_start, self.batch_last = now, now
        elif len(pods) > self.batch_pods:
            self.batch_last = now
        self.batch_pods = len(pods)
        closes = min(self.batch_start + BATCH_MAX_DURATION_S, self.batch_last + BATCH_IDLE_DURATION_S)
        if now < closes:
            return closes
        self.batch_start, self.batch_pods = None, 0
        for _claim in _bin_pack(sorted(pods, reverse=True), self.offerings[0].instance_type.gpus):
            offering = self._offering(now)
            if offering is None or self.fleet.gpus() + offering.instance_type.gpus > self.limit:
                break
            self.fleet.launch(offering, now)
        # Pods left without a node (the limit) are tried again at the next batch: when something changes.
        return math.inf

    def _offering(self, now: float) -> Offering | None:
        spot = [o for o in self.offerings if o.capacity_type == CapacityType.SPOT]
        available = [o for o in spot if self.fleet.market.available(o.zone, now)]
        if available:
            cheapest = min(o.per_hour for o in available)
            return self.rng.choice([o for o in available if o.per_hour == cheapest])
        on_demand = [o for o in self.offerings if o.capacity_type == CapacityType.ON_DEMAND]
        if not on_demand:
            return None
        cheapest = min(o.per_hour for o in on_demand)
        return self.rng.choice([o for o in on_demand if o.per_hour == cheapest])


def _bin_pack(pods: Sequence[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing of pod GPU requests into nodes of `capacity` GPUs."""
    nodes: list[list[int]] = []
    room: list[int] = []
    for pod in pods:
        slot = next((i for i, r in enumerate(room) if r >= pod), None)
        if slot is None:
            nodes.append([pod])
            room.append(capacity - pod)
        else:
            nodes[slot].append(pod)
            room[slot] -= pod
    return nodes
