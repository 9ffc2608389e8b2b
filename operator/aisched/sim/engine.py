"""The event loop: arrivals and completions on a simulated clock, one scheduling cycle per event time.

Each policy replays the same jobs on its own fresh copy of the same cluster.
Jobs that could not run even on the empty cluster are left out of every run
(and counted), so one impossible job cannot stall a FIFO baseline forever.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aisched.policy.cluster import ClusterSnapshot, Node, level_rank
from aisched.policy.placement import GangRequest, Placement, place_gang
from aisched.sim.policies import (
    ANY_CAPACITY,
    AischedPolicy,
    FifoFirstFit,
    FifoSpread,
    Policy,
    SimJob,
)
from aisched.sim.traces import TraceJob

POLICIES = ("aisched", "fifo_first_fit", "fifo_spread")

Progress = Callable[[str, int, int, float], None]
"""(policy, events done, events in all, simulated seconds)"""


@dataclass(frozen=True, slots=True)
class PolicyReport:
    policy: str
    finished_jobs: int
    unfinished_jobs: int
    gpu_utilization: float
    """Busy GPU-time over GPU-time available while jobs were arriving (first to last arrival)."""
    avg_jct_s: float
    p95_jct_s: float
    avg_queue_s: float
    avg_jct_multi_gpu_s: float
    """Average JCT of the jobs with more than one GPU: the gangs topology and gang placement are for."""
    in_smallest_domain: float | None
    """Share of multi-GPU jobs placed inside the smallest topology domain that could ever hold them."""
    makespan_s: float
    preemptions: int
    timeline: tuple[tuple[float, float], ...]
    """(bucket start in seconds, busy fraction of the cluster's GPUs) over the whole run."""

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu_utilization": round(self.gpu_utilization, 4),
            "avg_jct_s": round(self.avg_jct_s, 1),
            "p95_jct_s": round(self.p95_jct_s, 1),
            "avg_queue_s": round(self.avg_queue_s, 1),
            "avg_jct_multi_gpu_s": round(self.avg_jct_multi_gpu_s, 1),
            "in_smallest_domain": None if self.in_smallest_domain is None else round(self.in_smallest_domain, 4),
            "finished_jobs": self.finished_jobs,
            "unfinished_jobs": self.unfinished_jobs,
            "makespan_s": round(self.makespan_s, 1),
            "preemptions": self.preemptions,
        }


@dataclass(frozen=True, slots=True)
class SimulationReport:
    trace: str
    jobs: int
    multi_gpu_jobs: int
    too_big_jobs: int
    nodes: int
    gpus: int
    policies: dict[str, PolicyReport] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "jobs": self.jobs,
            "multi_gpu_jobs": self.multi_gpu_jobs,
            "jobs_larger_than_cluster": self.too_big_jobs,
            "cluster": {"nodes": self.nodes, "gpus": self.gpus},
            "policies": {name: report.to_json() for name, report in self.policies.items()},
        }


def gangs(trace: Sequence[TraceJob], gpus_per_node: int) -> list[SimJob]:
    """Jobs as gangs: up to a node's GPUs in one replica, bigger ones as replicas of the largest divisor that fits."""
    jobs = []
    for job in trace:
        per_replica = max(d for d in range(1, min(job.gpus, gpus_per_node) + 1) if job.gpus % d == 0)
        jobs.append(SimJob(job.key, job.arrival, job.duration, job.gpus // per_replica, per_replica))
    return jobs


def simulate(
    trace: Sequence[TraceJob],
    nodes: Sequence[Node],
    *,
    trace_name: str = "",
    policies: Sequence[str] = POLICIES,
    estimates: bool = True,
    buckets: int = 12,
    progress: Progress | None = None,
) -> SimulationReport:
    """Replay `trace` on `nodes` under each policy; `estimates` gives aisched the true durations."""
    empty = ClusterSnapshot(nodes)
    smallest = _SmallestDomains(empty)
    all_jobs = gangs(trace, empty.max_gpus_per_node)
    jobs = [j for j in all_jobs if smallest.fits(j)]
    report = SimulationReport(
        trace=trace_name,
        jobs=len(jobs),
        multi_gpu_jobs=sum(1 for j in jobs if j.gpus > 1),
        too_big_jobs=len(all_jobs) - len(jobs),
        nodes=len(empty),
        gpus=empty.total_gpus,
    )
    for name in policies:
        policy = _make(name, ClusterSnapshot(nodes), estimates=estimates)
        report.policies[name] = _run(policy, jobs, smallest, buckets, progress)
    return report


def _make(name: str, snapshot: ClusterSnapshot, *, estimates: bool) -> Policy:
    if name == "aisched":
        return AischedPolicy(snapshot, estimates=estimates)
    if name == "fifo_first_fit":
        return FifoFirstFit(snapshot)
    if name == "fifo_spread":
        return FifoSpread(snapshot)
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")


class _SmallestDomains:
    """The tightest level each gang shape could ever get, from placing it on the empty cluster."""

    def __init__(self, empty: ClusterSnapshot) -> None:
        self.empty = empty
        self.cache: dict[tuple[int, int], Placement | None] = {}

    def _placement(self, job: SimJob) -> Placement | None:
        shape = (job.replicas, job.gpus_per_replica)
        if shape not in self.cache:
            request = GangRequest(job.replicas, job.gpus_per_replica, capacity_types=ANY_CAPACITY)
            outcome = place_gang(request, self.empty)
            self.cache[shape] = outcome if isinstance(outcome, Placement) else None
        return self.cache[shape]

    def fits(self, job: SimJob) -> bool:
        return self._placement(job) is not None

    def rank(self, job: SimJob) -> int:
        placement = self._placement(job)
        return level_rank(placement.level if placement is not None else None)


@dataclass(slots=True)
class _RunLog:
    """What one policy's run records as it goes, for its report."""

    start: dict[str, float] = field(default_factory=dict)
    finish: dict[str, float] = field(default_factory=dict)
    busy_log: list[tuple[float, int]] = field(default_factory=lambda: [(0.0, 0)])
    tight: int = 0
    """Multi-GPU starts in the tightest domain their shape could ever get."""
    multi: int = 0
    """Multi-GPU starts."""
    preemptions: int = 0


def _run(
    policy: Policy, jobs: Sequence[SimJob], smallest: _SmallestDomains, buckets: int, progress: Progress | None
) -> PolicyReport:
    total_gpus = policy.snapshot.total_gpus
    completions: list[tuple[float, int, str]] = []
    by_key = {j.key: j for j in jobs}
    runs: dict[str, int] = {}
    log = _RunLog()
    busy = 0
    next_arrival, events = 0, 2 * len(jobs)
    while next_arrival < len(jobs) or completions:
        now = min(
            jobs[next_arrival].arrival if next_arrival < len(jobs) else math.inf,
            completions[0][0] if completions else math.inf,
        )
        while completions and completions[0][0] <= now:
            _, run, key = heapq.heappop(completions)
            if runs.get(key) == run:  # not a run that was preempted
                policy.finish(by_key[key])
                busy -= by_key[key].gpus
                log.finish[key] = now
        while next_arrival < len(jobs) and jobs[next_arrival].arrival <= now:
            policy.submit(jobs[next_arrival], now)
            next_arrival += 1
        outcome = policy.cycle(now)
        for job in outcome.stopped:
            busy -= job.gpus
            runs[job.key] += 1
            log.preemptions += 1
        for started in outcome.started:
            job = started.job
            busy += job.gpus
            log.start[job.key] = now
            runs[job.key] = runs.get(job.key, 0) + 1
            heapq.heappush(completions, (now + job.duration, runs[job.key], job.key))
            if job.gpus > 1:
                log.multi += 1
                placed = policy.snapshot.tightest_domain(started.nodes).level
                log.tight += level_rank(placed) <= smallest.rank(job)
        log.busy_log.append((now, busy))
        if progress is not None:
            progress(policy.name, next_arrival + len(log.finish), events, now)
    return _report(policy.name, jobs, log, total_gpus=total_gpus, buckets=buckets)


def _report(name: str, jobs: Sequence[SimJob], log: _RunLog, *, total_gpus: int, buckets: int) -> PolicyReport:
    start, finish, busy_log = log.start, log.finish, log.busy_log
    done = [j for j in jobs if j.key in finish]
    jct = sorted(finish[j.key] - j.arrival for j in done)
    multi_jct = [finish[j.key] - j.arrival for j in done if j.gpus > 1]
    queued = [start[j.key] - j.arrival for j in jobs if j.key in start]
    makespan = busy_log[-1][0]
    first, last = (jobs[0].arrival, jobs[-1].arrival) if jobs else (0.0, 0.0)
    window = (first, last) if last > first else (0.0, makespan)
    return PolicyReport(
        policy=name,
        finished_jobs=len(done),
        unfinished_jobs=len(jobs) - len(done),
        gpu_utilization=_busy_between(busy_log, *window) / max(total_gpus, 1),
        avg_jct_s=sum(jct) / len(jct) if jct else 0.0,
        p95_jct_s=jct[min(len(jct) - 1, math.ceil(0.95 * len(jct)) - 1)] if jct else 0.0,
        avg_queue_s=sum(queued) / len(queued) if queued else 0.0,
        avg_jct_multi_gpu_s=sum(multi_jct) / len(multi_jct) if multi_jct else 0.0,
        in_smallest_domain=log.tight / log.multi if log.multi else None,
        makespan_s=makespan,
        preemptions=log.preemptions,
        timeline=tuple(
            (
                makespan * i / buckets,
                _busy_between(busy_log, makespan * i / buckets, makespan * (i + 1) / buckets) / max(total_gpus, 1),
            )
            for i in range(buckets)
        )
        if makespan > 0
        else (),
    )


def _busy_between(busy_log: list[tuple[float, int]], begin: float, end: float) -> float:
    """Average busy GPUs over [begin, end) of the step function in `busy_log`."""
    if end <= begin:
        return 0.0
    area = 0.0
    for (t0, busy), (t1, _) in zip(busy_log, [*busy_log[1:], (math.inf, 0)], strict=True):
        lo, hi = max(t0, begin), min(t1, end)
        if hi > lo:
            area += busy * (hi - lo)
    return area / (end - begin)
