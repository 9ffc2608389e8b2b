"""A mix of jobs over spot traces, every policy on the same jobs: costs, misses, lost work, and a bound."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aisched.sim.jobs import ESTIMATE_SIGMA, estimate_duration
from aisched.sim.spot.job import EPS, HOUR, JobResult, Params, simulate_job
from aisched.sim.spot.policies import policies
from aisched.sim.spot.traces import SpotTrace


@dataclass(frozen=True)
class Job:
    start_index: int
    work_s: float
    deadline_s: float
    estimate_s: float | None = None
    """What every policy is told of `work_s` (a user's estimate); None: the truth."""

    @property
    def deadline_factor(self) -> float:
        return round(self.deadline_s / self.work_s, 3)


def job_mix(
    trace: SpotTrace,
    durations_h: Sequence[float],
    deadline_factors: Sequence[float],
    starts: int,
    *,
    estimate_sigma: float = ESTIMATE_SIGMA,
    seed: int = 0,
) -> list[Job]:
    """Every duration x deadline factor, starting at `starts` evenly spaced points of the trace.

    Each job's estimate is its work times a log-normal error (aisched.sim.jobs.estimate_duration,
    sigma `estimate_sigma`; 0: the truth), drawn from a stream seeded by `seed` and the trace's
    name, in the jobs' order: the same estimate for every policy. The deadline is drawn on the
    true work, so that each can be met.
    """
    longest = max(durations_h) * max(deadline_factors) * HOUR
    last_start = len(trace.available) - math.ceil(longest / trace.gap_s) - 1
    if last_start < 0:
        raise ValueError(f"trace {trace.name} is shorter than the longest deadline ({longest / HOUR:.0f} h)")
    offsets = [round(k * last_start / max(1, starts - 1)) for k in range(starts)]
    rng = random.Random(f"estimates-{seed}-{trace.name}")
    jobs = []
    for offset in offsets:
        for hours in durations_h:
            for factor in deadline_factors:
                work = hours * HOUR
                estimate = estimate_duration(work, rng, estimate_sigma) if estimate_sigma > 0 else None
                jobs.append(Job(offset, work, hours * factor * HOUR, estimate))
    return jobs


def clairvoyant_lower_bound(trace: SpotTrace, job: Job, params: Params) -> float:
    """A cost no policy can beat: all the spot time inside the deadline window used, each stretch
    of it paying one restart, nothing ever lost, the rest of the work on on-demand for free restarts."""
    spot_work, stretch = 0.0, 0
    window = range(job.start_index, job.start_index + int(job.deadline_s // trace.gap_s))
    for index in [*window, -1]:
        if index >= 0 and trace.at(index):
            stretch += 1
            continue
        spot_work += max(0.0, stretch * trace.gap_s - params.restart_overhead_s)
        stretch = 0
    on_spot = min(job.work_s, spot_work)
    return (on_spot * params.price_ratio + job.work_s - on_spot) / HOUR


@dataclass
class Totals:
    cost: float = 0.0
    misses: int = 0
    lost_work_s: float = 0.0
    interruptions: int = 0
    spot_time_s: float = 0.0
    on_demand_time_s: float = 0.0
    jobs: int = 0
    intervals_s: list[float] = field(default_factory=list)

    def add(self, job: Job, result: JobResult) -> None:
        self.cost += result.cost
        self.misses += result.finished_at_s > job.deadline_s + EPS
        self.lost_work_s += result.lost_work_s
        self.interruptions += result.interruptions
        self.spot_time_s += result.spot_time_s
        self.on_demand_time_s += result.on_demand_time_s
        self.jobs += 1
        self.intervals_s.extend(result.intervals_s)

    def summary(self, on_demand_cost: float) -> dict[str, Any]:
        busy = self.spot_time_s + self.on_demand_time_s
        intervals = sorted(self.intervals_s)
        return {
            "cost_vs_on_demand": round(self.cost / on_demand_cost, 4),
            "deadline_misses": self.misses,
            "lost_work_hours": round(self.lost_work_s / HOUR, 2),
            "jobs": self.jobs,
            "interruptions": self.interruptions,
            "spot_share_of_instance_time": round(self.spot_time_s / busy, 4) if busy else 0.0,
            "median_checkpoint_interval_s": round(intervals[len(intervals) // 2], 1) if intervals else None,
        }


@dataclass
class Group:
    """Totals of every policy over some jobs, and the clairvoyant bound for the same jobs."""

    by_policy: dict[str, Totals]
    bound_cost: float = 0.0

    def summary(self) -> dict[str, Any]:
        baseline = self.by_policy["on_demand"].cost
        return {
            "policies": {name: totals.summary(baseline) for name, totals in self.by_policy.items()},
            "clairvoyant_lower_bound_cost_vs_on_demand": round(self.bound_cost / baseline, 4),
        }


def run_scenario(traces: Sequence[SpotTrace], jobs_of: dict[str, list[Job]], params: Params) -> dict[str, Any]:
    names = [policy.name for policy in policies(params)]

    def group() -> Group:
        return Group({name: Totals() for name in names})

    overall, per_trace = group(), {trace.name: group() for trace in traces}
    per_factor: dict[float, Group] = {}
    for trace in traces:
        for job in jobs_of[trace.name]:
            groups = (overall, per_trace[trace.name], per_factor.setdefault(job.deadline_factor, group()))
            bound = clairvoyant_lower_bound(trace, job, params)
            for bucket in groups:
                bucket.bound_cost += bound
            for policy in policies(params):
                result = simulate_job(
                    policy,
                    trace,
                    job.start_index,
                    work_s=job.work_s,
                    deadline_s=job.deadline_s,
                    params=params,
                    estimate_s=job.estimate_s,
                )
                for bucket in groups:
                    bucket.by_policy[policy.name].add(job, result)
    return {
        **overall.summary(),
        "per_trace": {
            trace.name: {"spot_availability": round(trace.availability, 4), **per_trace[trace.name].summary()}
            for trace in traces
        },
        "per_deadline_factor": {str(factor): per_factor[factor].summary() for factor in sorted(per_factor)},
    }


def print_results(results: dict[str, Any]) -> None:
    print(f"{'policy':<18}{'cost/OD':>9}{'misses':>8}{'lost h':>9}{'spot share':>12}")
    for name, row in results["policies"].items():
        print(
            f"{name:<18}{row['cost_vs_on_demand']:>9.3f}{row['deadline_misses']:>8}"
            f"{row['lost_work_hours']:>9.1f}{row['spot_share_of_instance_time']:>12.3f}"
        )
    print(f"{'clairvoyant bound':<18}{results['clairvoyant_lower_bound_cost_vs_on_demand']:>9.3f}")
    groups = [
        *(
            (f"{zone} (spot {detail['spot_availability']:.0%})", detail)
            for zone, detail in results["per_trace"].items()
        ),
        *((f"deadline x{factor}", detail) for factor, detail in results["per_deadline_factor"].items()),
    ]
    for label, detail in groups:
        rows = ", ".join(
            f"{name} {row['cost_vs_on_demand']:.3f}/{row['deadline_misses']}"
            for name, row in detail["policies"].items()
            if name != "on_demand"
        )
        print(f"  {label}: {rows}, bound {detail['clairvoyant_lower_bound_cost_vs_on_demand']:.3f}")
