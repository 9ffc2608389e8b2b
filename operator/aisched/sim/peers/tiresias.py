"""Tiresias as a peer: discretized two-dimensional least-attained-service (2D-LAS) with preemption.

Follows "Tiresias: A GPU Cluster Manager for Distributed Deep Learning" (Gu et al., NSDI 2019),
sections 3-4: no job durations are known; a job's attained service is GPUs x time it has run.

Modelled:
- Discretized 2D-LAS: K priority queues split by attained-service thresholds; a job enters the
  first and is demoted as its service passes each threshold. The paper leaves the thresholds to
  the operator; this peer uses aisched's band edges (`aisched.policy.scheduler.service`: 1, 10,
  100 GPU-hours) so the comparison is about everything else.
- Inside a queue, FIFO by the time the job entered it.
- Demotions are events: the scheduler runs again when a running job's attained service crosses
  its queue's threshold (the next one), as the authors' simulator advances to the earliest of the
  next arrival, end or demotion; a demoted job may then be preempted for one in a higher queue.
- At every event the scheduler walks all jobs (running and waiting) in that order and keeps
  running the ones the cluster's GPU count holds; a running job outside that set is preempted
  (to a checkpoint: it keeps its progress and pays the simulator's restart overhead, as the
  paper's checkpoint-based preemption does) and a waiting one inside it is started.
- Placement: the paper consolidates jobs whose model is sensitive to it (skewed tensor sizes,
  found by profiling) and places the others anywhere. Here a model is sensitive when its
  measured cross-node factor exceeds `SENSITIVE_FACTOR`; sensitive jobs take the fewest nodes
  that hold them, others take GPUs first-fit in node order. A job chosen to run that cannot be
  placed for fragmentation waits for the next event.

Not modelled: the PromoteKnob against starvation (off by default in the paper's evaluation of
the discretized variant), the profiler itself (the factor stands in for it), lease renewal
periods (decisions happen at events, not on a fixed period).
"""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.policy.scheduler.service import BAND_GROWTH, BANDS, FIRST_BAND_GPU_SECONDS, service_band
from aisched.sim.jobs import CycleOutcome, SimJob, Start
from aisched.sim.speed import SpeedModel

SENSITIVE_FACTOR = 1.2
DEMOTION_MARGIN_S = 1e-6
"""A demotion event fires this much after the crossing, so that the service has crossed in floating point."""


def band_edge(band: int) -> float | None:
    """The attained service (GPU-seconds) at which a job leaves BAND; None: the last band has no edge."""
    return FIRST_BAND_GPU_SECONDS * BAND_GROWTH**band if band < BANDS - 1 else None


class TiresiasPolicy:
    name = "tiresias"

    def __init__(self, snapshot: ClusterSnapshot, speed: SpeedModel) -> None:
        self.snapshot = snapshot
        self.speed = speed
        self.jobs: dict[str, SimJob] = {}
        self.attained: dict[str, float] = {}
        """GPU-seconds of runs that ended."""
        self.started: dict[str, float] = {}
        self.entered: dict[str, tuple[int, float]] = {}
        """(queue, when it entered it) of every unfinished job."""
        self.placements: dict[str, Placement] = {}
        self.order = snapshot.node_names()

    def submit(self, job: SimJob, now: float) -> None:
        self.jobs[job.key] = job
        self.attained[job.key] = 0.0
        self.entered[job.key] = (0, now)

    def finish(self, job: SimJob, now: float) -> None:
        self.snapshot.release(self.placements.pop(job.key).gpus_by_node())
        for table in (self.jobs, self.attained, self.started, self.entered):
            table.pop(job.key, None)

    def _service(self, key: str, now: float) -> float:
        running = now - self.started[key] if key in self.started else 0.0
        return self.attained[key] + self.jobs[key].gpus * running

    def cycle(self, now: float) -> CycleOutcome:
        for key, (queue, _) in list(self.entered.items()):
            band = service_band(self._service(key, now))
            if band > queue:
                self.entered[key] = (band, now)
        ranked = sorted(self.entered, key=lambda k: (*self.entered[k], self.jobs[k].arrival, k))
        capacity, chosen = self.snapshot.total_gpus, set()
        for key in ranked:
            if self.jobs[key].gpus <= capacity:
                chosen.add(key)
                capacity -= self.jobs[key].gpus
        outcome = CycleOutcome()
        for key in [k for k in self.placements if k not in chosen]:
            self.snapshot.release(self.placements.pop(key).gpus_by_node())
            self.attained[key] = self._service(key, now)
            del self.started[key]
            outcome.stopped.append(self.jobs[key])
        for key in ranked:
            if key in chosen and key not in self.placements:
                self._start(self.jobs[key], now, outcome)
        outcome.wake_at = self._next_demotion(now)
        return outcome

    def _next_demotion(self, now: float) -> float | None:
        """When the first running job crosses into a lower queue (None: no running job will)."""
        times = []
        for key, started in self.started.items():
            edge = band_edge(self.entered[key][0])
            if edge is not None:
                crossing = started + (edge - self.attained[key]) / self.jobs[key].gpus
                times.append(max(crossing, now) + DEMOTION_MARGIN_S)
        return min(times, default=None)

    def _start(self, job: SimJob, now: float, outcome: CycleOutcome) -> None:
        sensitive = self.speed.node_factors.get(job.model, 1.0) > SENSITIVE_FACTOR
        nodes = self._consolidated(job) if sensitive else self._first_fit(job)
        if nodes is None:
            return
        placement = Placement.of_nodes(nodes, job.gpus_per_replica, self.snapshot)
        self.snapshot.allocate(placement.gpus_by_node())
        self.placements[job.key] = placement
        self.started[job.key] = now
        outcome.started.append(Start(job, nodes))

    def _first_fit(self, job: SimJob) -> tuple[str, ...] | None:
        nodes: list[str] = []
        for name in self.order:
            fits = self.snapshot.free_gpus(name) // job.gpus_per_replica
            nodes.extend([name] * min(fits, job.replicas - len(nodes)))
            if len(nodes) == job.replicas:
                return tuple(nodes)
        return None

    def _consolidated(self, job: SimJob) -> tuple[str, ...] | None:
        """The fewest nodes: the roomiest first, the last pods on the smallest node that holds them."""
        g = job.gpus_per_replica
        room = sorted(((self.snapshot.free_gpus(n) // g, n) for n in self.order), key=lambda r: (-r[0], r[1]))
        nodes: list[str] = []
        for pods, name in room:
            left = job.replicas - len(nodes)
            if left == 0 or pods == 0:
                break
            holding = [r for r in room if r[0] >= left and r[1] not in nodes]
            if holding:
                nodes.extend([min(holding)[1]] * left)
                break
            nodes.extend([name] * min(pods, left))
        return tuple(nodes) if len(nodes) == job.replicas else None
