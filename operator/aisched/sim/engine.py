"""The event loop: arrivals and completions on a simulated clock, one scheduling cycle per event time.

Each policy replays the same jobs on its own fresh copy of the same cluster. A job runs at the
speed its placement allows (`aisched.sim.speed`) and, when aisched resized an elastic job, at the
pace its GPUs allow (`aisched.sim.scaling`): a run of `remaining` seconds of the job's own work
(its run time alone on the GPUs it asked for, consolidated) on a placement with slowdown `s` and
pace `p` ends `remaining * s / p` later. A preempted job keeps its progress (it is preempted to a
checkpoint, as the operator does) and pays `restart_overhead_s` each time it starts again: lost
work. A resize relaunches the gang from its checkpoint on its new placement, as the operator does,
and pays the same overhead. Jobs that could not run even on the empty cluster are left out of
every run (and counted), so one impossible job cannot stall a FIFO baseline forever.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aisched.policy.cluster import ClusterSnapshot, Node, level_rank
from aisched.policy.placement import GangRequest, Placement, place_gang
from aisched.policy.queueing import QueueQuota
from aisched.sim.jobs import (
    ANY_CAPACITY,
    DEFAULT_GPUS_PER_POD,
    NO_ELASTIC,
    DurationKnowledge,
    Policy,
    SimJob,
    Start,
    gangs,
)
from aisched.sim.outcomes import PolicyReport, RunLog, report_of
from aisched.sim.policies import make_policy
from aisched.sim.scaling import ScalingModel
from aisched.sim.speed import Geometry, ModelMix, SpeedModel
from aisched.sim.tenants import QueueLedger
from aisched.sim.traces import TraceJob

POLICIES = ("aisched", "kueue", "volcano", "tiresias", "fifo_first_fit", "fifo_spread")
DEFAULT_RESTART_OVERHEAD_S = 60.0

Progress = Callable[[str, int, int, float], None]
"""(policy, events done, events in all, simulated seconds)"""


@dataclass(frozen=True, slots=True)
class SimOptions:
    """How the simulated world behaves, the same for every policy."""

    speed: SpeedModel = field(default_factory=SpeedModel.uniform)
    knowledge: DurationKnowledge = DurationKnowledge.NONE
    gpus_per_pod: int = DEFAULT_GPUS_PER_POD
    restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S
    """Seconds a preempted or resized job spends starting again (pods, checkpoint load) before it makes progress."""
    scaling: ScalingModel = field(default_factory=ScalingModel)
    elastic_share: float = NO_ELASTIC
    """Share of the jobs that are elastic (`aisched.sim.jobs`); only aisched resizes them."""
    seed: int = 0
    queues: tuple[QueueQuota, ...] = ()
    """Queues named by the jobs' tenants (`aisched.sim.tenants`); none: one default queue. Only
    aisched schedules by them; every policy's figures are given per queue when there are some."""
    enforce_queues: bool = True
    """False: the queues are accounted, not enforced (aisched runs every job in one queue), for
    what the same teams get with no quotas."""

    def to_json(self) -> dict[str, Any]:
        return {
            "duration_knowledge": self.knowledge.value,
            "gpus_per_pod": self.gpus_per_pod,
            "restart_overhead_s": self.restart_overhead_s,
            "rack_factor": self.speed.rack_factor,
            "zone_factor": self.speed.zone_factor,
            "cross_node_factors": {k: round(v, 3) for k, v in sorted(self.speed.node_factors.items())},
            "elastic_share": self.elastic_share,
            "scaling": self.scaling.to_json(),
            "seed": self.seed,
        } | (
            {"queues": {q.name: q.nominal_gpus for q in self.queues}, "queues_enforced": self.enforce_queues}
            if self.queues
            else {}
        )


@dataclass(frozen=True, slots=True)
class SimulationReport:
    trace: str
    jobs: int
    multi_gpu_jobs: int
    too_big_jobs: int
    nodes: int
    gpus: int
    avg_run_time_alone_s: float = 0.0
    """Mean of the jobs' durations on consolidated placements: no policy's average JCT can be lower."""
    options: SimOptions = field(default_factory=SimOptions)
    policies: dict[str, PolicyReport] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "jobs": self.jobs,
            "multi_gpu_jobs": self.multi_gpu_jobs,
            "jobs_larger_than_cluster": self.too_big_jobs,
            "cluster": {"nodes": self.nodes, "gpus": self.gpus},
            "avg_run_time_alone_s": round(self.avg_run_time_alone_s, 1),
            "options": self.options.to_json(),
            "policies": {name: report.to_json() for name, report in self.policies.items()},
        }


def simulate(
    trace: Sequence[TraceJob],
    nodes: Sequence[Node],
    *,
    trace_name: str = "",
    policies: Sequence[str] = POLICIES,
    options: SimOptions | None = None,
    progress: Progress | None = None,
) -> SimulationReport:
    """Replay `trace` on `nodes` under each policy."""
    options = options or SimOptions()
    empty = ClusterSnapshot(nodes)
    smallest = _SmallestDomains(empty)
    models = ModelMix(tuple(options.speed.node_factors), seed=options.seed)
    all_jobs = gangs(
        trace,
        empty.max_gpus_per_node,
        gpus_per_pod=options.gpus_per_pod,
        knowledge=options.knowledge,
        models=models,
        elastic_share=options.elastic_share,
        seed=options.seed,
    )
    jobs = [j for j in all_jobs if smallest.fits(j)]
    report = SimulationReport(
        trace=trace_name,
        jobs=len(jobs),
        multi_gpu_jobs=sum(1 for j in jobs if j.gpus > 1),
        too_big_jobs=len(all_jobs) - len(jobs),
        nodes=len(empty),
        gpus=empty.total_gpus,
        avg_run_time_alone_s=sum(j.duration for j in jobs) / len(jobs) if jobs else 0.0,
        options=options,
    )
    for name in policies:
        enforced = options.queues if options.enforce_queues else ()
        policy = make_policy(name, ClusterSnapshot(nodes), options.speed, enforced)
        report.policies[name] = _Replay(policy, jobs, smallest, options, progress).run()
    return report


class _SmallestDomains:
    """The tightest level each gang shape could ever get, from placing it on the empty cluster."""

    def __init__(self, empty: ClusterSnapshot) -> None:
        self.empty = empty
        self.cache: dict[tuple[int, int], Placement | None] = {}

    def _placement(self, replicas: int, gpus_per_replica: int) -> Placement | None:
        shape = (replicas, gpus_per_replica)
        if shape not in self.cache:
            request = GangRequest(replicas, gpus_per_replica, capacity_types=ANY_CAPACITY)
            outcome = place_gang(request, self.empty)
            self.cache[shape] = outcome if isinstance(outcome, Placement) else None
        return self.cache[shape]

    def fits(self, job: SimJob) -> bool:
        return self._placement(job.replicas, job.gpus_per_replica) is not None

    def rank(self, replicas: int, gpus_per_replica: int) -> int:
        """The tightest level a gang of this shape (as asked, or as resized) could get."""
        placement = self._placement(replicas, gpus_per_replica)
        return level_rank(placement.level if placement is not None else None)


@dataclass(slots=True)
class _Running:
    run: int
    work_start: float
    pace: float
    """Seconds of the job's own work done a second: scaling pace over placement slowdown."""
    gpus: int
    """GPUs it holds: those it asked for unless resized."""


class _Replay:
    """One policy's run over the jobs: the clock, each job's progress, and the log the report is made of."""

    def __init__(
        self,
        policy: Policy,
        jobs: Sequence[SimJob],
        smallest: _SmallestDomains,
        options: SimOptions,
        progress: Progress | None,
    ) -> None:
        self.policy, self.jobs, self.smallest, self.options, self.progress = policy, jobs, smallest, options, progress
        self.geometry = Geometry(policy.snapshot)
        self.by_key = {j.key: j for j in jobs}
        self.remaining = {j.key: j.duration for j in jobs}
        self.runs: dict[str, int] = {}
        self.running: dict[str, _Running] = {}
        self.completions: list[tuple[float, int, str]] = []
        self.log = RunLog()
        self.busy = 0
        self.wake_at: float | None = None
        self.ledger = QueueLedger({q.name: q.nominal_gpus or 0 for q in options.queues})

    def run(self) -> PolicyReport:
        jobs, next_arrival, events = self.jobs, 0, 2 * len(self.jobs)
        while next_arrival < len(jobs) or self.completions:
            self._drop_stale_completions()
            if next_arrival == len(jobs) and not self.completions:
                break
            now = min(
                jobs[next_arrival].arrival if next_arrival < len(jobs) else math.inf,
                self.completions[0][0] if self.completions else math.inf,
                self.wake_at if self.wake_at is not None else math.inf,
            )
            self.ledger.advance(now)
            while self.completions and self.completions[0][0] <= now:
                _, run, key = heapq.heappop(self.completions)
                if self._current(run, key):
                    self._finish(self.by_key[key], now)
            while next_arrival < len(jobs) and jobs[next_arrival].arrival <= now:
                self.policy.submit(jobs[next_arrival], now)
                self.ledger.arrived(jobs[next_arrival].tenant, jobs[next_arrival].gpus)
                next_arrival += 1
            outcome = self.policy.cycle(now)
            self.wake_at = outcome.wake_at
            for job in outcome.stopped:
                self._stop(job, now)
            for resized in outcome.resized:
                self._resize(resized, now)
            for started in outcome.started:
                self._start(started, now)
            self.log.busy_log.append((now, self.busy))
            if self.progress is not None:
                self.progress(self.policy.name, next_arrival + len(self.log.finish), events, now)
        return report_of(
            self.policy.name, jobs, self.log, total_gpus=self.policy.snapshot.total_gpus, ledger=self.ledger
        )

    def _current(self, run: int, key: str) -> bool:
        """Is this the end of the job's current run (not of one a preemption or resize cut short)?"""
        return key in self.running and self.running[key].run == run

    def _drop_stale_completions(self) -> None:
        """Ends of runs cut short are no events: no cycle, and no makespan, at their times."""
        while self.completions and not self._current(self.completions[0][1], self.completions[0][2]):
            heapq.heappop(self.completions)

    def _start(self, started: Start, now: float) -> None:
        job = started.job
        resumed = job.key in self.runs
        self._place(started, now, self.options.restart_overhead_s if resumed else 0.0)
        self.ledger.started(job.tenant, job.gpus, self.running[job.key].gpus)
        self.log.first_start.setdefault(job.key, now)

    def _resize(self, resized: Start, now: float) -> None:
        job = resized.job
        running = self.running.pop(job.key)
        self._account(job, running, now)
        self.busy -= running.gpus
        self.log.resizes += 1
        self._place(resized, now, self.options.restart_overhead_s)
        self.ledger.resized(job.tenant, running.gpus, self.running[job.key].gpus)

    def _place(self, placed: Start, now: float, overhead: float) -> None:
        """Run the job on `placed.nodes` (one per replica) from `now`, after `overhead` seconds of restart."""
        job, nodes = placed.job, placed.nodes
        gpus = len(nodes) * job.gpus_per_replica
        slowdown = self.options.speed.slowdown(job.model, nodes, gpus, self.geometry)
        pace = self.options.scaling.pace(job.model, job.gpus, gpus) / slowdown
        self.runs[job.key] = self.runs.get(job.key, 0) + 1
        self.running[job.key] = _Running(self.runs[job.key], now + overhead, pace, gpus)
        heapq.heappush(self.completions, (now + overhead + self.remaining[job.key] / pace, self.runs[job.key], job.key))
        self.busy += gpus
        self.log.lost_gpu_seconds += overhead * gpus
        self.log.slowdown_weighted += slowdown * gpus
        self.log.gpu_starts += gpus
        if gpus > 1:
            self.log.multi += 1
            placed_level = self.policy.snapshot.tightest_domain(nodes).level
            self.log.tight += level_rank(placed_level) <= self.smallest.rank(len(nodes), job.gpus_per_replica)

    def _stop(self, job: SimJob, now: float) -> None:
        running = self.running.pop(job.key)
        self._account(job, running, now)
        self.busy -= running.gpus
        self.log.preemptions += 1
        self.ledger.stopped(job.tenant, running.gpus, job.gpus)

    def _finish(self, job: SimJob, now: float) -> None:
        self.policy.finish(job, now)
        running = self.running.pop(job.key)
        self._account(job, running, now)
        self.remaining[job.key] = 0.0
        self.busy -= running.gpus
        self.log.finish[job.key] = now
        self.ledger.finished(job.tenant, running.gpus)

    def _account(self, job: SimJob, running: _Running, now: float) -> None:
        """Progress up to `now`. Useful work is counted in the job's own GPU-time (the GPUs it asked
        for, consolidated), so each job adds `gpus x duration` in all however it ran: a job grown past
        linear scaling holds more GPUs than its progress is worth, and effective utilisation says so."""
        if now > running.work_start:
            self.remaining[job.key] -= (now - running.work_start) * running.pace
            self.log.useful.append((running.work_start, now, job.gpus * running.pace))
        else:  # stopped before its restart was over: the time it held the GPUs was all lost
            self.log.lost_gpu_seconds -= (running.work_start - now) * running.gpus
