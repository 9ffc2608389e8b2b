"""Kueue as a peer: a BestEffortFIFO ClusterQueue with Topology Aware Scheduling.

Follows the Kueue documentation (kueue.sigs.k8s.io: "Cluster Queue" queueing strategies,
"Topology Aware Scheduling", "Preemption"), v0.10-era behaviour.

Modelled:
- One ClusterQueue whose nominal quota is the whole cluster, queueing strategy BestEffortFIFO:
  workloads are tried by priority then creation time; one that cannot be admitted does not block
  the ones behind it.
- Admission is all-or-nothing for the workload's pods (a Job with `parallelism` = its pods).
- Topology Aware Scheduling with the podset annotation `podset-preferred-topology` at the rack
  level (topology levels zone > rack > hostname): the pods go into one rack if one holds them,
  else one zone, else the cluster. Among domains that hold them the one with the least free
  capacity is chosen (the BestFit profile); inside it, nodes with the most room are taken first
  and the last pods go to the smallest node that still holds them.
- Preemption: `withinClusterQueue: LowerPriority`. The simulated jobs share one priority, so
  Kueue never preempts here, as it would not on such a cluster.

Not modelled: cohorts, borrowing and fair sharing (one ClusterQueue), requeue backoff of
inadmissible workloads (they are retried every cycle), NVLink-level topology, partial admission.
"""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.sim.jobs import CycleOutcome, SimJob, Start
from aisched.sim.peers.domains import nodes_by, pods_fitting

LEVELS = ("rack", "zone", "cluster")


class KueuePolicy:
    name = "kueue"

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.pending: dict[str, SimJob] = {}
        self.placements: dict[str, Placement] = {}
        self.domains = {level: nodes_by(snapshot, level) for level in LEVELS}

    def submit(self, job: SimJob, now: float) -> None:
        self.pending[job.key] = job

    def finish(self, job: SimJob, now: float) -> None:
        self.snapshot.release(self.placements.pop(job.key).gpus_by_node())

    def cycle(self, now: float) -> CycleOutcome:
        outcome = CycleOutcome()
        free = self.snapshot.total_gpus - self.snapshot.used_total
        refused: dict[int, int] = {}
        """Fewest pods of a size that found no room: as many or more will not either, until a release."""
        for key, job in list(self.pending.items()):  # arrival order is creation order; one priority
            if free == 0:
                break
            if job.gpus > free or job.replicas >= refused.get(job.gpus_per_replica, 1 << 30):
                continue
            nodes = self.topology_assignment(job)
            if nodes is None:
                refused[job.gpus_per_replica] = job.replicas
                continue
            placement = Placement.of_nodes(nodes, job.gpus_per_replica, self.snapshot)
            self.snapshot.allocate(placement.gpus_by_node())
            self.placements[key] = placement
            free -= job.gpus
            del self.pending[key]
            outcome.started.append(Start(job, nodes))
        return outcome

    def topology_assignment(self, job: SimJob) -> tuple[str, ...] | None:
        """The lowest level with a domain that holds every pod; there, BestFit: the fullest such domain."""
        for level in LEVELS:
            fitting = [
                (pods_fitting(self.snapshot, nodes, job.gpus_per_replica), name, nodes)
                for name, nodes in self.domains[level].items()
            ]
            fitting = [f for f in fitting if f[0] >= job.replicas]
            if fitting:
                _, _, nodes = min(fitting, key=lambda f: (f[0], f[1]))
                return self._within(nodes, job)
        return None

    def _within(self, nodes: list[str], job: SimJob) -> tuple[str, ...]:
        g, left = job.gpus_per_replica, job.replicas
        room = sorted(((self.snapshot.free_gpus(n) // g, n) for n in nodes), key=lambda r: (-r[0], r[1]))
        chosen: list[str] = []
        for index, (pods, name) in enumerate(room):
            if pods <= 0 or left == 0:
                break
            rest = room[index:]
            holding = [r for r in rest if r[0] >= left]
            if holding:  # the last pods go to the smallest node that still holds them
                _, last = min(holding, key=lambda r: (r[0], r[1]))
                return (*chosen, *[last] * left)
            take = min(pods, left)
            chosen.extend([name] * take)
            left -= take
        return tuple(chosen)
