"""When each strategy runs a job: Let's Wait Awhile as the paper describes it, and aisched's planner."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from aisched.policy.carbon import DeferrableJob, PlanOptions, RunChunk, plan_start
from aisched.sim.carbon.grid import EPS, Grid, Job, View

Runs = list[tuple[float, float]]


def lets_wait_awhile(view: View, job: Job, deadline: float, *, interruptible: bool, overhead: float) -> Runs:
    step = view.grid.step
    first = int(job.arrival // step)
    n = math.ceil(job.duration / step - 1e-9)
    whole_steps = int((deadline - job.arrival + EPS) // step)
    if interruptible:
        if whole_steps < n:
            return [(job.arrival, job.arrival + job.duration)]
        values = view.values(first, first + whole_steps)
        chosen = sorted(sorted(range(whole_steps), key=lambda k: values[k])[:n])
        return run_steps(
            [(job.arrival + k * step, job.arrival + (k + 1) * step) for k in chosen], job.duration, overhead
        )
    latest = int((deadline - job.duration - job.arrival + EPS) // step)
    values = view.values(first, first + latest + n)
    window = sum(values[:n])
    best_k, best = 0, window
    for k in range(1, latest + 1):
        window += values[k + n - 1] - values[k - 1]
        if window < best - 1e-9:
            best_k, best = k, window
    start = job.arrival + best_k * step
    return [(start, start + job.duration)]


def run_steps(steps: Sequence[tuple[float, float]], work: float, overhead: float) -> Runs:
    """Run through reserved steps in time order; a resumed chunk first restores; over-run if short."""
    runs: Runs = []
    left = work
    for a, b in steps:
        resumed = bool(runs) and abs(runs[-1][1] - a) > EPS
        useful = (b - a) - (overhead if resumed else 0.0)
        if useful <= 0:
            continue
        end = b if useful < left else a + (overhead if resumed else 0.0) + left
        left -= min(useful, left)
        runs = [*runs[:-1], (runs[-1][0], end)] if runs and not resumed else [*runs, (a, end)]
        if left <= EPS:
            return runs
    tail = runs[-1][1] if runs else steps[0][0]
    return [*runs[:-1], (runs[-1][0], tail + left)] if runs else [(tail, tail + left)]


@dataclass(frozen=True)
class Knobs:
    overhead: float
    power_w: float
    min_saving: float
    replan: bool
    shrink: bool


def aisched(view: View, job: Job, deadline: float, *, interruptible: bool, knobs: Knobs, error: float) -> Runs:
    grid = view.grid
    overhead = knobs.overhead
    t, left = job.arrival, job.duration
    runs: Runs = []
    options = PlanOptions(
        interruptible=interruptible,
        min_chunk=timedelta(seconds=grid.step),
        chunk_overhead=timedelta(seconds=overhead),
        min_saving_fraction=knobs.min_saving,
        forecast_error=error if knobs.shrink else 0.0,
    )
    for _ in range(10_000):  # re-plans; bounded because every one either runs or waits for a later start
        running = bool(runs) and runs[-1][1] >= t - EPS
        paused = bool(runs) and not running
        left_to_plan = DeferrableJob(
            timedelta(seconds=left),
            power_w=knobs.power_w * job.gpus,
            deadline=grid.at(deadline),
            running=running,
            paused=paused,
        )
        plan = plan_start(view.forecast(t, max(deadline, t + left + overhead)), grid.at(t), left_to_plan, options)
        if not knobs.replan:
            return follow(plan.chunks, grid, left, overhead)
        first = plan.chunks[0]
        start, end = grid.offset(first.start), grid.offset(first.end)
        if start > t + EPS:
            t = start  # wait, then look again with what is known then
            continue
        left -= (end - t) - (overhead if paused else 0.0)
        runs = [*runs[:-1], (runs[-1][0], end)] if running else [*runs, (t, end)]
        t = end
        if left <= EPS:
            return runs
    raise RuntimeError("re-planning did not converge")


def follow(chunks: Sequence[RunChunk], grid: Grid, work: float, overhead: float) -> Runs:
    """Run a plan as made, without looking again."""
    return run_steps([(grid.offset(c.start), grid.offset(c.end)) for c in chunks], work, overhead)
