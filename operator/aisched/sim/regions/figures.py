"""What a run of every policy comes to: grams, cost, deadline misses and completion times."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from aisched.sim.regions.engine import Costs, JobState, Policy, Simulation
from aisched.sim.regions.jobs import RegionalJob
from aisched.sim.regions.world import Region

DEADLINE_SLACK_S = 1.0


def at_arrival_grams(regions: Sequence[Region], jobs: Sequence[RegionalJob], costs: Costs) -> float:
    """Every job run at its arrival in its home region, with room for all: the figure savings are against."""
    by_name = {r.name: r for r in regions}
    return sum(by_name[j.home].grams(j.arrival, j.arrival + j.duration, costs.power_per_gpu_w * j.gpus) for j in jobs)


def summarise(states: Sequence[JobState]) -> dict[str, Any]:
    jcts = sorted(s.finished - s.job.arrival for s in states if s.finished is not None)
    gpu_s = sum(sum(s.gpu_s_by_region.values()) for s in states)
    by_region: dict[str, float] = {}
    for s in states:
        for name, seconds in s.gpu_s_by_region.items():
            by_region[name] = by_region.get(name, 0.0) + seconds
    misses = sum(
        1
        for s in states
        if s.job.deadline is not None and s.finished is not None and s.finished > s.job.deadline + DEADLINE_SLACK_S
    )
    return {
        "co2_g": round(sum(s.grams for s in states), 1),
        "cost": round(sum(s.cost for s in states), 2),
        "deadline_misses": misses,
        "avg_jct_s": round(statistics.fmean(jcts), 1),
        "p50_jct_s": round(jcts[len(jcts) // 2], 1),
        "p95_jct_s": round(jcts[min(len(jcts) - 1, int(0.95 * len(jcts)))], 1),
        "avg_wait_s": round(
            statistics.fmean(s.finished - s.job.arrival - s.job.duration for s in states if s.finished is not None), 1
        ),
        "preemptions": sum(s.preemptions for s in states),
        "spot_gpu_share": round(sum(s.spot_gpu_s for s in states) / gpu_s, 4) if gpu_s else 0.0,
        "gpu_hours_by_region": {name: round(seconds / 3600, 1) for name, seconds in sorted(by_region.items())},
        "jobs_away_from_home": sum(1 for s in states if set(s.gpu_s_by_region) - {s.job.home}),
    }


def run_policies(
    regions: Sequence[Region], jobs: Sequence[RegionalJob], policies: Sequence[Policy], costs: Costs
) -> dict[str, Any]:
    """Every policy on the same jobs and regions, and the savings against running each at arrival at home."""
    baseline = at_arrival_grams(regions, jobs, costs)
    results: dict[str, Any] = {}
    for policy in policies:
        figures = summarise(Simulation(regions, jobs, policy, costs).run())
        figures["co2_saving"] = round(1 - figures["co2_g"] / baseline, 5) if baseline > 0 else 0.0
        results[policy.name] = figures
    return {"baseline_at_arrival_co2_g": round(baseline, 1), "policies": results}
