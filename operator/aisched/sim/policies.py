"""Scheduling policies the simulator compares, all on the same `ClusterSnapshot`.

- `AischedPolicy`: the operator's own cycle, `aisched.policy.decision.decide`, called every cycle
  exactly as the controller calls it (with no replica asks: no services are simulated), with the
  default queue's settings (time-slicing by attained service with its minimum run time), or with
  the given queues (quotas, cohort borrowing and reclaim), each job in the queue named by its
  tenant (the default queue when none is). It is
  told a job's duration only as the simulation's `DurationKnowledge` allows; attained service
  is carried as the operator carries it in status.
  Elastic jobs (`SimJob.min_replicas`, `max_replicas`) are handed to it as elastic, and its
  resizes (shrinks to make room, growth into idle GPUs) are carried out as the controller
  carries them out: the gang is relaunched on its new placement, and the run that ends there
  is added to its attained service.
- `FifoFirstFit`: strict FIFO (the head of the queue blocks everyone behind it);
  a gang is placed all at once, each replica on the first node, in name order,
  with room.
- `FifoSpread`: what the default kube-scheduler does with a gang's pods: each
  pod on its own, FIFO, onto the node with the largest free fraction
  (NodeResourcesFit LeastAllocated); pods that do not fit wait while later ones
  go on. Bound pods hold their GPUs; the job runs once all its pods are bound.
- Kueue, Volcano and Tiresias: `aisched.sim.peers`, each with what it models and what it does not.

Only `AischedPolicy` resizes elastic jobs; every other policy runs each job at its requested size.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from datetime import timedelta

from aisched.api.queue import DEFAULT_QUEUE
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.decision import decide
from aisched.policy.job_status import attained_gpu_seconds_after_run
from aisched.policy.placement import Placement, release
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import Applied, JobRequest, ScheduleResult, apply_result
from aisched.sim.jobs import ANY_CAPACITY, EPOCH, CycleOutcome, Policy, SimJob, Start, at
from aisched.sim.peers.kueue import KueuePolicy
from aisched.sim.peers.tiresias import TiresiasPolicy
from aisched.sim.peers.volcano import VolcanoPolicy
from aisched.sim.speed import SpeedModel


def make_policy(name: str, snapshot: ClusterSnapshot, speed: SpeedModel, queues: tuple[QueueQuota, ...] = ()) -> Policy:
    """NAME's policy; only aisched reads QUEUES (the peers as modelled have one queue)."""
    if name == "aisched":
        return AischedPolicy(snapshot, queues)
    if name == "kueue":
        return KueuePolicy(snapshot)
    if name == "volcano":
        return VolcanoPolicy(snapshot)
    if name == "tiresias":
        return TiresiasPolicy(snapshot, speed)
    if name == "fifo_first_fit":
        return FifoFirstFit(snapshot)
    if name == "fifo_spread":
        return FifoSpread(snapshot)
    raise ValueError(f"unknown policy {name!r}; known: aisched, kueue, volcano, tiresias, fifo_first_fit, fifo_spread")


class AischedPolicy:
    name = "aisched"

    def __init__(self, snapshot: ClusterSnapshot, queues: tuple[QueueQuota, ...] = ()) -> None:
        self.snapshot = snapshot
        self.pending: dict[str, JobRequest] = {}
        self.running: dict[str, JobRequest] = {}
        self.jobs: dict[str, SimJob] = {}
        self.queues = queues
        """The queues' settings; none: the default queue's."""
        self._queue_names = {q.name for q in queues}
        self.last_result: ScheduleResult | None = None
        """What the last cycle decided for the gangs (the fleet's provisioning plans on it)."""

    def submit(self, job: SimJob, now: float) -> None:
        self.jobs[job.key] = job
        self.pending[job.key] = JobRequest(
            key=job.key,
            queue=job.tenant if job.tenant in self._queue_names else DEFAULT_QUEUE,
            priority=0,
            created=at(job.arrival),
            gpus_per_replica=job.gpus_per_replica,
            replicas=job.replicas,
            capacity_types=ANY_CAPACITY,
            expected_duration=timedelta(seconds=job.estimate) if job.estimate is not None else None,
            min_replicas=job.min_replicas,
            max_replicas=job.max_replicas,
        )

    def finish(self, job: SimJob, now: float) -> None:
        request = self.running.pop(job.key)
        assert request.placement is not None
        release(self.snapshot, request.placement)

    def cycle(self, now: float) -> CycleOutcome:
        # The operator's cycle (`controller.cycle.scheduling`) decides by `decide`, with the services'
        # replica asks beside the gangs; the simulator runs no services, so it asks for none.
        decision = decide(self.snapshot, [*self.running.values(), *self.pending.values()], (), self.queues, at(now))
        result = decision.jobs
        self.last_result = result
        placements = {key: r.placement for key, r in self.running.items() if r.placement is not None}
        # The simulated clock stops a gang in the instant it is preempted or resized.
        apply_result(self.snapshot, result, placements, Applied.AT_ONCE)
        outcome = CycleOutcome()
        for preemption in result.preempted:
            request = self.running.pop(preemption.key)
            attained = attained_after_run(request, now)
            self.pending[preemption.key] = replace(request, placement=None, started=None, attained_gpu_seconds=attained)
            outcome.stopped.append(self.jobs[preemption.key])
        for resize in result.resized:
            request = self.running[resize.key]
            attained = attained_after_run(request, now)
            self.running[resize.key] = replace(
                request, placement=resize.placement, started=at(now), attained_gpu_seconds=attained
            )
            outcome.resized.append(Start(self.jobs[resize.key], resize.placement.nodes))
        for admission in result.admitted:
            request = self.pending.pop(admission.key)
            self.running[admission.key] = replace(request, placement=admission.placement, started=at(now))
            outcome.started.append(Start(self.jobs[admission.key], admission.placement.nodes))
        # Jobs the cycle did not reach (it admitted its most) have the next one at once, as in the operator.
        outcome.wake_at = now if result.deferred else self._next_growth_chance(now)
        return outcome

    def _next_growth_chance(self, now: float) -> float | None:
        """The first time after `now` a running elastic gang below its most replicas has run the
        queue's minimum run time: the scheduler may grow it then, and the operator, which runs a
        cycle every resync, would see it within seconds, not at the next arrival or end."""
        min_run = QueueQuota.unlimited().min_run_seconds or 0.0
        times = [
            (r.started - EPOCH).total_seconds() + min_run
            for r in self.running.values()
            if r.elastic
            and r.started is not None
            and r.placement is not None
            and r.placement.replicas < (r.max_replicas or 0)
        ]
        later = [t for t in times if t > now]
        return min(later) if later else None


def attained_after_run(request: JobRequest, now: float) -> float:
    """What the operator writes to status.attainedGpuSeconds when the gang that runs now ends
    (stopped, or relaunched on a new placement), by the operator's own rule
    (`aisched.policy.job_status.attained_gpu_seconds_after_run`)."""
    assert request.placement is not None and request.started is not None
    return attained_gpu_seconds_after_run(
        request.attained_gpu_seconds, request.placement.total_gpus, request.started, at(now)
    )


class FifoFirstFit:
    name = "fifo_first_fit"

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.queue: deque[SimJob] = deque()
        self.placements: dict[str, Placement] = {}
        self.order = snapshot.node_names()

    def submit(self, job: SimJob, now: float) -> None:
        self.queue.append(job)

    def finish(self, job: SimJob, now: float) -> None:
        self.snapshot.release(self.placements.pop(job.key).gpus_by_node())

    def cycle(self, now: float) -> CycleOutcome:
        outcome = CycleOutcome()
        while self.queue:
            nodes = self._first_fit(self.queue[0])
            if nodes is None:
                break
            job = self.queue.popleft()
            placement = Placement.of_nodes(nodes, job.gpus_per_replica, self.snapshot)
            self.snapshot.allocate(placement.gpus_by_node())
            self.placements[job.key] = placement
            outcome.started.append(Start(job, nodes))
        return outcome

    def _first_fit(self, job: SimJob) -> tuple[str, ...] | None:
        if self.snapshot.used_total + job.gpus > self.snapshot.total_gpus:
            return None
        nodes: list[str] = []
        for name in self.order:
            fits = self.snapshot.free_gpus(name) // job.gpus_per_replica
            nodes.extend([name] * min(fits, job.replicas - len(nodes)))
            if len(nodes) == job.replicas:
                return tuple(nodes)
        return None


class FifoSpread:
    name = "fifo_spread"

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.waiting: dict[str, SimJob] = {}
        """Jobs with pods still unbound, in arrival order."""
        self.bound: dict[str, list[str]] = {}
        self.by_free = _FreeIndex(snapshot)

    def submit(self, job: SimJob, now: float) -> None:
        self.waiting[job.key] = job
        self.bound[job.key] = []

    def finish(self, job: SimJob, now: float) -> None:
        for name in self.bound.pop(job.key):
            self._change(name, -job.gpus_per_replica)

    def cycle(self, now: float) -> CycleOutcome:
        outcome = CycleOutcome()
        smallest_refused = 1 << 30  # a pod this big found no node: bigger ones will not either
        for key, job in list(self.waiting.items()):
            bound = self.bound[key]
            while len(bound) < job.replicas and job.gpus_per_replica < smallest_refused:
                name = self.by_free.least_allocated(job.gpus_per_replica)
                if name is None:
                    smallest_refused = job.gpus_per_replica
                    break
                self._change(name, job.gpus_per_replica)
                bound.append(name)
            if len(bound) == job.replicas:
                del self.waiting[key]
                outcome.started.append(Start(job, tuple(bound)))
        return outcome

    def _change(self, name: str, gpus: int) -> None:
        old = self.snapshot.free_gpus(name)
        self.snapshot.allocate({name: gpus})
        self.by_free.move(name, old, self.snapshot.free_gpus(name))


class _FreeIndex:
    """Nodes by (allocatable, free GPUs), for the kube-scheduler's LeastAllocated choice without a scan."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.sizes = sorted({n.allocatable_gpus for n in snapshot.nodes()})
        self.nodes: dict[tuple[int, int], set[int]] = {}
        for node in snapshot.nodes():
            if node.usable:
                self._add(snapshot.ordinal(node.name), node.allocatable_gpus, snapshot.free_gpus(node.name))

    def _add(self, ordinal: int, size: int, free: int) -> None:
        self.nodes.setdefault((size, free), set()).add(ordinal)

    def move(self, name: str, old: int, new: int) -> None:
        ordinal = self.snapshot.ordinal(name)
        size = self.snapshot.node(name).allocatable_gpus
        if ordinal in self.nodes.get((size, old), set()):
            self.nodes[(size, old)].discard(ordinal)
            self._add(ordinal, size, new)

    def least_allocated(self, gpus: int) -> str | None:
        best: tuple[float, int] | None = None
        for size in self.sizes:
            for free in range(size, gpus - 1, -1):
                candidates = self.nodes.get((size, free))
                if candidates:
                    choice = (-free / size, min(candidates))
                    if best is None or choice < best:
                        best = choice
                    break
        return self.snapshot.name_of(best[1]) if best is not None else None
