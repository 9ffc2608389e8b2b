"""What one policy's replay measured, and the figures made of it.

- JCT: arrival to completion; p95 over finished jobs; averages by size class (1 GPU, 2-8, >8).
- Effective utilisation: GPU-time doing useful work at consolidated speed (a job slowed 2x by its
  placement does half its GPU-time's worth; restarts do none) over the GPU-time available. Useful
  work is counted on the GPUs the job asked for: an elastic job grown to twice its GPUs that
  trains 1.4x as fast does 1.4x its asked GPUs' worth while holding twice as many, so growth
  beyond linear scaling lowers it, and a shrunk job does less than its GPUs' worth too. Both are
  between the first and the last arrival, while the cluster is fed. A policy that runs short jobs
  first leaves more of the long jobs' work after that window, so the same ratio is also given
  until the last job ends (`effective_utilization_until_done`).
- In smallest domain: of the placements of multi-GPU gangs (starts, and resizes of elastic ones),
  the share inside the tightest topology domain their shape as placed could ever get.
- Slowdown: JCT over the job's run time alone on a consolidated placement; p99 and worst show
  starvation.
- Preemptions, resizes (aisched relaunching an elastic gang on more or fewer GPUs) and lost work
  (GPU-seconds of restarts after either: pod start and checkpoint load) per job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aisched.sim.jobs import SimJob
from aisched.sim.tenants import QueueLedger

SIZE_CLASSES = ("1", "2-8", ">8")


@dataclass(slots=True)
class RunLog:
    """What one policy's run records as it goes."""

    first_start: dict[str, float] = field(default_factory=dict)
    finish: dict[str, float] = field(default_factory=dict)
    busy_log: list[tuple[float, int]] = field(default_factory=lambda: [(0.0, 0)])
    useful: list[tuple[float, float, float]] = field(default_factory=list)
    """(from, to, GPUs' worth of consolidated work per second) of every run."""
    tight: int = 0
    multi: int = 0
    preemptions: int = 0
    resizes: int = 0
    lost_gpu_seconds: float = 0.0
    slowdown_weighted: float = 0.0
    """Sum over starts of GPUs x placement slowdown: with `gpu_starts`, the average slowdown of a GPU."""
    gpu_starts: int = 0


@dataclass(frozen=True, slots=True)
class PolicyReport:
    policy: str
    finished_jobs: int
    unfinished_jobs: int
    gpu_utilization: float
    """Busy GPU-time over GPU-time available while jobs were arriving (first to last arrival)."""
    effective_utilization: float
    effective_utilization_until_done: float
    """The same from the first arrival until the last job ends: how soon the policy drains the work."""
    avg_jct_s: float
    p95_jct_s: float
    avg_jct_by_size_s: dict[str, float | None]
    avg_queue_s: float
    """Arrival to first start."""
    avg_jct_multi_gpu_s: float
    in_smallest_domain: float | None
    p99_slowdown: float
    max_slowdown: float
    preemptions: int
    preemptions_per_job: float
    resizes_per_job: float
    lost_gpu_seconds_per_job: float
    avg_placement_slowdown: float
    makespan_s: float
    jcts: tuple[float, ...] = ()
    by_queue: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per queue, where the simulation has queues: jobs, JCT, slowdown, guarantee shortfall, borrowing."""

    def to_json(self) -> dict[str, Any]:
        return {
            "avg_jct_s": round(self.avg_jct_s, 1),
            "p95_jct_s": round(self.p95_jct_s, 1),
            "avg_jct_by_size_s": {k: None if v is None else round(v, 1) for k, v in self.avg_jct_by_size_s.items()},
            "effective_utilization": round(self.effective_utilization, 4),
            "effective_utilization_until_done": round(self.effective_utilization_until_done, 4),
            "gpu_utilization": round(self.gpu_utilization, 4),
            "in_smallest_domain": None if self.in_smallest_domain is None else round(self.in_smallest_domain, 4),
            "p99_slowdown": round(self.p99_slowdown, 2),
            "max_slowdown": round(self.max_slowdown, 2),
            "avg_queue_s": round(self.avg_queue_s, 1),
            "avg_jct_multi_gpu_s": round(self.avg_jct_multi_gpu_s, 1),
            "preemptions": self.preemptions,
            "preemptions_per_job": round(self.preemptions_per_job, 4),
            "resizes_per_job": round(self.resizes_per_job, 4),
            "lost_gpu_seconds_per_job": round(self.lost_gpu_seconds_per_job, 1),
            "avg_placement_slowdown": round(self.avg_placement_slowdown, 4),
            "finished_jobs": self.finished_jobs,
            "unfinished_jobs": self.unfinished_jobs,
            "makespan_s": round(self.makespan_s, 1),
        } | ({"by_queue": self.by_queue} if self.by_queue else {})


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile of sorted `values`."""
    if not values:
        return 0.0
    return values[min(len(values) - 1, max(0, math.ceil(share * len(values)) - 1))]


def report_of(
    name: str, jobs: Sequence[SimJob], log: RunLog, *, total_gpus: int, ledger: QueueLedger | None = None
) -> PolicyReport:
    done = [j for j in jobs if j.key in log.finish]
    jct = sorted(log.finish[j.key] - j.arrival for j in done)
    slowdowns = sorted((log.finish[j.key] - j.arrival) / max(j.duration, 1.0) for j in done)
    by_size: dict[str, float | None] = {}
    for size in SIZE_CLASSES:
        values = [log.finish[j.key] - j.arrival for j in done if j.size_class == size]
        by_size[size] = sum(values) / len(values) if values else None
    multi_jct = [log.finish[j.key] - j.arrival for j in done if j.gpus > 1]
    queued = [log.first_start[j.key] - j.arrival for j in jobs if j.key in log.first_start]
    makespan = log.busy_log[-1][0]
    first, last = (jobs[0].arrival, jobs[-1].arrival) if jobs else (0.0, 0.0)
    window = (first, last) if last > first else (0.0, makespan)
    available = max(total_gpus, 1) * max(window[1] - window[0], 1e-9)
    return PolicyReport(
        policy=name,
        finished_jobs=len(done),
        unfinished_jobs=len(jobs) - len(done),
        gpu_utilization=_busy_between(log.busy_log, *window) / max(total_gpus, 1),
        effective_utilization=_useful_between(log.useful, *window) / available,
        effective_utilization_until_done=_useful_between(log.useful, first, makespan)
        / (max(total_gpus, 1) * max(makespan - first, 1e-9)),
        avg_jct_s=_mean(jct),
        p95_jct_s=percentile(jct, 0.95),
        avg_jct_by_size_s=by_size,
        avg_queue_s=_mean(queued),
        avg_jct_multi_gpu_s=_mean(multi_jct),
        in_smallest_domain=log.tight / log.multi if log.multi else None,
        p99_slowdown=percentile(slowdowns, 0.99),
        max_slowdown=slowdowns[-1] if slowdowns else 0.0,
        preemptions=log.preemptions,
        preemptions_per_job=log.preemptions / max(len(jobs), 1),
        resizes_per_job=log.resizes / max(len(jobs), 1),
        lost_gpu_seconds_per_job=log.lost_gpu_seconds / max(len(jobs), 1),
        avg_placement_slowdown=log.slowdown_weighted / log.gpu_starts if log.gpu_starts else 1.0,
        makespan_s=makespan,
        jcts=tuple(jct),
        by_queue=_by_queue(done, log, ledger) if ledger is not None else {},
    )


def _by_queue(done: Sequence[SimJob], log: RunLog, ledger: QueueLedger) -> dict[str, dict[str, float]]:
    figures = {}
    for queue, nominal in sorted(ledger.nominal.items()):
        mine = [j for j in done if j.tenant == queue]
        jct = [log.finish[j.key] - j.arrival for j in mine]
        figures[queue] = {
            "nominal_gpus": nominal,
            "finished_jobs": len(mine),
            "avg_jct_s": round(_mean(jct), 1),
            "avg_slowdown": round(_mean([t / max(j.duration, 1.0) for t, j in zip(jct, mine, strict=True)]), 3),
            "shortfall_gpu_hours": round(ledger.shortfall[queue] / 3600, 1),
            "borrowed_gpu_hours": round(ledger.borrowed[queue] / 3600, 1),
        }
    return figures


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _useful_between(useful: Sequence[tuple[float, float, float]], begin: float, end: float) -> float:
    return sum(rate * max(0.0, min(t1, end) - max(t0, begin)) for t0, t1, rate in useful)


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
