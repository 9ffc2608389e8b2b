"""A gang scheduler with Karpenter: the peer a platform team would run today instead of aisched.

Kueue (or Volcano) in front of the kube-scheduler, Karpenter behind it, as their documentation
describes them:

- Admission (Kueue's ClusterQueue, `queueingStrategy: BestEffortFIFO`, its default): workloads
  are admitted in arrival order while the GPUs of all admitted workloads stay within the nominal
  quota (the NodePool limit, as for every growing arm); a workload that does not fit lets later,
  smaller ones through. Nothing admitted is preempted (one queue, one priority), and no duration
  is read: Kueue has none.
- Binding all or nothing (Volcano's gang plugin, `minAvailable` = the gang's pods; the
  kube-scheduler's coscheduling plugin; Kueue's `waitForPodsReady` ends up the same way): a gang's
  pods are bound only when every one of them fits at once, so no pod holds GPUs while its siblings
  wait. Each pod goes to the fitting node with the fewest free GPUs (NodeResourcesFit
  `MostAllocated`, the packing score a GPU cluster is configured with), ties by name.
- Karpenter as in aisched.sim.fleet.karpenter (batching, first-fit-decreasing NodeClaims, spot
  first in a zone drawn among those with spot, the NodePool limit, empty nodes consolidated),
  except what the pending gang changes: Karpenter's scheduling simulation counts room on Ready
  nodes before it asks for new ones, and a Ready node that a pending pod is nominated for is not
  a consolidation candidate (a gang's first nodes stay while its last ones boot).

Not modelled: Kueue's Topology Aware Scheduling (nothing here ties a gang to one zone, as
nothing ties Karpenter's NodeClaims to one; the fleet benchmark's zone factor is 1 by default),
ProvisioningRequest admission checks, and Kueue's preemption (one queue of equal priorities has
nothing to preempt for).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aisched.sim.fleet.catalog import Offering
from aisched.sim.fleet.fleet import Fleet
from aisched.sim.fleet.karpenter import KarpenterLoop
from aisched.sim.jobs import SimJob
from aisched.sim.speed import SpeedModel


class GangKarpenterLoop(KarpenterLoop):
    name = "gang_karpenter"

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
        super().__init__(
            jobs,
            fleet,
            offerings,
            limit_gpus=limit_gpus,
            seed=seed,
            deadlines=deadlines,
            restart_overhead_s=restart_overhead_s,
            speed=speed,
        )
        self.queued: dict[str, SimJob] = {}
        """Submitted, not admitted yet, first in first."""
        self.admitted_gpus = 0

    def submit(self, job: SimJob, now: float) -> None:
        self.queued[job.key] = job

    def finished(self, job: SimJob, now: float) -> None:
        super().finished(job, now)
        self.admitted_gpus -= job.gpus

    def interrupted(self, gone: set[str], now: float) -> None:
        """A running gang that lost a node is restarted whole; it stays admitted."""
        for key, names in list(self.bound.items()):
            if not gone.intersection(names):
                continue
            job = self.by_key[key]
            self.stop_run(job, now)
            for name in names:
                self.fleet.release(name, job.gpus_per_replica, now)
            self.bound[key] = []
            self.waiting = {key: job, **self.waiting}

    def cycle(self, now: float) -> float:
        self._admit()
        self._bind(now)
        return self._provision(now)

    def nominated(self, now: float) -> set[str]:
        """Ready nodes pending pods of admitted gangs would fit on: Karpenter leaves them alone."""
        sizes = [job.gpus_per_replica for job in self.waiting.values()]
        if not sizes:
            return set()
        smallest = min(sizes)
        return {n.name for n in self.fleet.ready(now) if n.gpus - n.used >= smallest}

    def _admit(self) -> None:
        for key, job in list(self.queued.items()):
            if self.admitted_gpus + job.gpus <= self.limit:
                del self.queued[key]
                self.admitted_gpus += job.gpus
                self.waiting[key] = job
                self.bound[key] = []

    def _bind(self, now: float) -> None:
        free = {n.name: n.gpus - n.used for n in self.fleet.ready(now)}
        for key, job in list(self.waiting.items()):
            nodes = _gang_fit(job, free)
            if nodes is None:
                continue
            for name in nodes:
                free[name] -= job.gpus_per_replica
                self.fleet.allocate(name, job.gpus_per_replica)
            self.bound[key] = nodes
            del self.waiting[key]
            self.start_run(job, nodes, now)

    def _unprovisioned(self, now: float) -> list[int]:
        """Pods of pending gangs that neither a Ready node's free GPUs nor a booting node would hold."""
        room = [n.gpus - n.used for n in self.fleet.ready(now)] + [n.gpus for n in self.fleet.booting(now)]
        left = []
        for job in self.waiting.values():
            for _ in range(job.replicas):
                slot = next((i for i, r in enumerate(room) if r >= job.gpus_per_replica), None)
                if slot is None:
                    left.append(job.gpus_per_replica)
                else:
                    room[slot] -= job.gpus_per_replica
        return left


def _gang_fit(job: SimJob, free: Mapping[str, int]) -> list[str] | None:
    """One node per pod, each the fitting node with the fewest free GPUs (MostAllocated); None: not all fit."""
    room, nodes = dict(free), []
    for _ in range(job.replicas):
        name = min((n for n, f in room.items() if f >= job.gpus_per_replica), key=lambda n: (room[n], n), default=None)
        if name is None:
            return None
        room[name] -= job.gpus_per_replica
        nodes.append(name)
    return nodes
