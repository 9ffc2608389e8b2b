"""One simulated job on spot and on-demand capacity, under a policy that chooses where it runs.

The job runs on one instance (or one gang of them, all lost together). A (re)start costs
`restart_overhead` seconds before training moves (billed, no progress); a move the policy
chooses is graceful (the job saves first). On spot the job checkpoints every interval, each
checkpoint taking `checkpoint_cost` seconds. A preemption loses the work since the last
finished checkpoint, unless the SIGTERM checkpoint of aisched.workload fits in the notice
(checkpoint_cost <= notice) and `notice_checkpoint` says it runs. Prices: on-demand 1 per
hour, spot `price_ratio`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from aisched.policy.interruptions import InterruptionPrior
from aisched.sim.spot.traces import SpotTrace

EPS = 1e-6
HOUR = 3600.0


class Where(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on_demand"


@dataclass(frozen=True)
class Params:
    price_ratio: float
    checkpoint_cost_s: float
    restart_overhead_s: float
    notice_s: float
    notice_checkpoint: bool
    """Does the worker's SIGTERM save (aisched.workload) run in the notice window?"""
    baseline_interval_s: float
    prior: InterruptionPrior


@dataclass(frozen=True)
class JobView:
    """What a policy may know at a decision."""

    elapsed_s: float
    deadline_s: float
    work_s: float
    """The job's work as the policy is told it: the user's estimate (`simulate_job`'s `estimate_s`)."""
    remaining_s: float
    """Work left by that estimate (0 once the job has run past it), counting what the job did since
    its last checkpoint on spot as done."""
    unsaved_s: float
    """Work since the last checkpoint on spot, which a preemption would lose (0 elsewhere)."""
    spot_available: bool
    running_on: Where | None
    period_s: float
    restart_overhead_s: float


class Policy(Protocol):
    name: str

    def decide(self, view: JobView) -> Where | None: ...

    def checkpoint_interval_s(self, trace: SpotTrace, index: int, so_far: JobResult) -> float: ...


@dataclass
class JobResult:
    cost: float = 0.0
    finished_at_s: float = math.inf
    lost_work_s: float = 0.0
    interruptions: int = 0
    saved_on_notice: int = 0
    restarts: int = 0
    spot_time_s: float = 0.0
    on_demand_time_s: float = 0.0
    intervals_s: list[float] = field(default_factory=list)


@dataclass
class _Run:
    """The state of one job under one policy."""

    work_s: float
    checkpoint_cost_s: float
    saved_s: float = 0.0
    unsaved_s: float = 0.0
    running_on: Where | None = None
    overhead_left_s: float = 0.0
    checkpoint_left_s: float = 0.0
    interval_s: float = math.inf

    @property
    def done_s(self) -> float:
        return self.saved_s + self.unsaved_s

    def save(self) -> None:
        self.saved_s += self.unsaved_s
        self.unsaved_s = 0.0


def simulate_job(
    policy: Policy,
    trace: SpotTrace,
    start_index: int,
    *,
    work_s: float,
    deadline_s: float,
    params: Params,
    estimate_s: float | None = None,
) -> JobResult:
    """Run one job from sample `start_index` until its work is done; deadline_s is relative to its start.

    The policy sees `estimate_s` (None: `work_s`, the truth) as the job's work, never `work_s` itself.
    """
    told = work_s if estimate_s is None else estimate_s
    run, result, gap = _Run(work_s, params.checkpoint_cost_s), JobResult(), trace.gap_s
    index, elapsed = start_index, 0.0
    while run.done_s < work_s - EPS:
        up = trace.at(index)
        if run.running_on is Where.SPOT and not up:
            _preempt(run, result, params)
        view = JobView(
            elapsed_s=elapsed,
            deadline_s=deadline_s,
            work_s=told,
            remaining_s=max(0.0, told - run.done_s),
            unsaved_s=run.unsaved_s if run.running_on is Where.SPOT else 0.0,
            spot_available=up,
            running_on=run.running_on,
            period_s=gap,
            restart_overhead_s=params.restart_overhead_s,
        )
        where = policy.decide(view)
        if where is Where.SPOT and not up:
            raise AssertionError(f"{policy.name} chose spot where there is none")
        if where is not run.running_on:
            _move(run, result, where, policy=policy, trace=trace, index=index, params=params)
        used = _train(run, gap) if run.running_on is not None else 0.0
        if run.running_on is Where.SPOT:
            result.spot_time_s += used
            result.cost += used / HOUR * params.price_ratio
        elif run.running_on is Where.ON_DEMAND:
            result.on_demand_time_s += used
            result.cost += used / HOUR
        if run.done_s >= work_s - EPS:
            result.finished_at_s = elapsed + used
        elapsed += gap
        index += 1
    return result


def _preempt(run: _Run, result: JobResult, params: Params) -> None:
    result.interruptions += 1
    fits_in_notice = params.notice_checkpoint and params.checkpoint_cost_s <= params.notice_s
    if fits_in_notice:
        result.saved_on_notice += 1
        run.save()
    else:
        result.lost_work_s += run.unsaved_s
        run.unsaved_s = 0.0
    run.running_on, run.overhead_left_s, run.checkpoint_left_s = None, 0.0, 0.0


def _move(
    run: _Run,
    result: JobResult,
    where: Where | None,
    *,
    policy: Policy,
    trace: SpotTrace,
    index: int,
    params: Params,
) -> None:
    # A move the policy chooses is graceful: the job saves before it stops (the
    # save's time is part of the restart overhead).
    run.save()
    run.running_on, run.checkpoint_left_s = where, 0.0
    if where is None:
        run.overhead_left_s = 0.0
        return
    result.restarts += 1
    run.overhead_left_s = params.restart_overhead_s
    # On-demand is not preempted, so nothing is gained by checkpointing there.
    run.interval_s = policy.checkpoint_interval_s(trace, index, result) if where is Where.SPOT else math.inf
    if where is Where.SPOT:
        result.intervals_s.append(run.interval_s)


def _train(run: _Run, budget_s: float) -> float:
    """Advance the running job by up to `budget_s`; returns the instance time it used."""
    used = 0.0
    while used < budget_s - EPS and run.done_s < run.work_s - EPS:
        left = budget_s - used
        if run.overhead_left_s > EPS:
            step = min(run.overhead_left_s, left)
            run.overhead_left_s -= step
        elif run.checkpoint_left_s > EPS:
            step = min(run.checkpoint_left_s, left)
            run.checkpoint_left_s -= step
            if run.checkpoint_left_s <= EPS:
                run.save()
        else:
            step = min(left, run.work_s - run.done_s, run.interval_s - run.unsaved_s)
            run.unsaved_s += step
            if run.unsaved_s >= run.interval_s - EPS and run.done_s < run.work_s - EPS:
                run.checkpoint_left_s = run.checkpoint_cost_s
        used += step
    return used
