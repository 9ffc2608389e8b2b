"""Volcano as a peer: the allocate action with the gang, binpack and proportion/DRF plugins.

Follows the Volcano documentation (volcano.sh: "Scheduler" actions and plugins; gang, binpack,
drf, proportion) and the default `volcano-scheduler.conf` actions "enqueue, allocate, backfill".

Modelled:
- One queue (proportion gives it the whole cluster). Job order inside it by DRF: the lowest
  dominant share of what the job holds first, which for pending jobs is nothing, so ties fall to
  priority and then creation time: arrival order here.
- Allocate: each job in order places its pods one at a time on the node that scores best.
  binpack (GPU weight) scores the node that would be fullest after the pod highest, which packs
  pods onto partly used nodes; predicates keep pods where their GPUs fit.
- Gang: a job whose pods cannot all be placed in this session keeps none of them (its
  statement is discarded) and the next job is tried; nobody waits behind it.
- No preemption: preempt and reclaim act on priorities and queues, and all jobs share both.

Not modelled: the network-topology-aware plugin (Volcano 1.11+, HyperNodes), so placement knows
nodes only; nodeorder's least-requested score (it pulls the other way from binpack; clusters
running AI jobs usually weight binpack up); enqueue's overcommit gate; backfill of best-effort
pods (none here); session period (a cycle runs at every event).
"""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.sim.jobs import CycleOutcome, SimJob, Start


class VolcanoPolicy:
    name = "volcano"

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.pending: dict[str, SimJob] = {}
        self.placements: dict[str, Placement] = {}
        self.nodes = [n.name for n in snapshot.nodes() if n.usable]
        self.allocatable = {n.name: n.allocatable_gpus for n in snapshot.nodes()}

    def submit(self, job: SimJob, now: float) -> None:
        self.pending[job.key] = job

    def finish(self, job: SimJob, now: float) -> None:
        self.snapshot.release(self.placements.pop(job.key).gpus_by_node())

    def cycle(self, now: float) -> CycleOutcome:
        outcome = CycleOutcome()
        refused: dict[int, int] = {}
        for key, job in list(self.pending.items()):
            if self.snapshot.used_total == self.snapshot.total_gpus:
                break
            if job.replicas >= refused.get(job.gpus_per_replica, 1 << 30):
                continue
            nodes = self._allocate(job)
            if nodes is None:
                refused[job.gpus_per_replica] = job.replicas
                continue
            self.placements[key] = Placement.of_nodes(nodes, job.gpus_per_replica, self.snapshot)
            del self.pending[key]
            outcome.started.append(Start(job, nodes))
        return outcome

    def _allocate(self, job: SimJob) -> tuple[str, ...] | None:
        """Pods one by one on the best binpack score; all of them or none (the gang's statement)."""
        g = job.gpus_per_replica
        chosen: list[str] = []
        for _ in range(job.replicas):
            best = max(
                (n for n in self.nodes if self.snapshot.free_gpus(n) >= g),
                key=lambda n: (1 - (self.snapshot.free_gpus(n) - g) / self.allocatable[n], n),
                default=None,
            )
            if best is None:
                for name in chosen:
                    self.snapshot.release({name: g})
                return None
            self.snapshot.allocate({best: g})
            chosen.append(best)
        return tuple(chosen)
