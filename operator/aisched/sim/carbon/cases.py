"""Emissions of every job under both strategies, against running each at once: one case's figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aisched.sim.carbon.grid import DAY, HOUR, Grid, Job, View
from aisched.sim.carbon.strategies import Knobs, aisched, lets_wait_awhile

BUCKETS = (("<1h", 0.0, HOUR), ("1h-4h", HOUR, 4 * HOUR), ("4h-1d", 4 * HOUR, DAY), (">=1d", DAY, math.inf))


@dataclass
class Tally:
    baseline: float = 0.0
    emitted: float = 0.0
    misses: int = 0
    job_savings: float = 0.0
    jobs: int = 0

    def add(self, baseline: float, emitted: float, missed: bool) -> None:
        self.baseline += baseline
        self.emitted += emitted
        self.misses += missed
        self.job_savings += 1 - emitted / baseline if baseline > 0 else 0.0
        self.jobs += 1

    @property
    def saving(self) -> float:
        return 1 - self.emitted / self.baseline if self.baseline > 0 else 0.0


def bucket_of(duration: float) -> str:
    return next(name for name, lo, hi in BUCKETS if lo <= duration < hi)


def run_case(
    grid: Grid,
    placed: Sequence[tuple[Job, float]],
    *,
    error: float,
    interruptible: bool,
    seeds: int,
    knobs: Knobs,
) -> dict[str, Any]:
    tallies = {name: {"all": Tally(), **{b[0]: Tally() for b in BUCKETS}} for name in ("aisched", "lwa")}
    for seed in range(seeds if error else 1):
        view = View(grid, grid.noisy(error, seed))
        for job, deadline in placed:
            baseline = grid.cost([(job.arrival, job.arrival + job.duration)]) * job.gpus
            outcomes = {
                "aisched": aisched(view, job, deadline, interruptible=interruptible, knobs=knobs, error=error),
                "lwa": lets_wait_awhile(view, job, deadline, interruptible=interruptible, overhead=knobs.overhead),
            }
            for name, runs in outcomes.items():
                missed = runs[-1][1] > deadline + 1.0
                for key in ("all", bucket_of(job.duration)):
                    tallies[name][key].add(baseline, grid.cost(runs) * job.gpus, missed)
    ours, theirs = tallies["aisched"], tallies["lwa"]
    return {
        "aisched_saving": round(ours["all"].saving, 5),
        "lets_wait_awhile_saving": round(theirs["all"].saving, 5),
        "deadline_misses": ours["all"].misses,
        "lets_wait_awhile_deadline_misses": theirs["all"].misses,
        "aisched_mean_job_saving": round(ours["all"].job_savings / max(1, ours["all"].jobs), 5),
        "lets_wait_awhile_mean_job_saving": round(theirs["all"].job_savings / max(1, theirs["all"].jobs), 5),
        "by_duration": {
            name: {
                "jobs": ours[name].jobs // max(1, seeds if error else 1),
                "aisched_saving": round(ours[name].saving, 5),
                "lets_wait_awhile_saving": round(theirs[name].saving, 5),
            }
            for name, _, _ in BUCKETS
        },
        "runs": seeds if error else 1,
    }
