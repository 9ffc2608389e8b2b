"""The capacity policies the spot simulation compares: aisched's and three baselines."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from aisched.api.common import CapacityType, SpotPolicy
from aisched.policy.interruptions import InterruptionPrior, interruption_rate
from aisched.policy.spot import (
    CapacityChoice,
    CapacityDecision,
    SpotJob,
    choose_capacity,
    spot_checkpoint_interval,
)
from aisched.sim.spot.job import JobResult, JobView, Params, Policy, Where
from aisched.sim.spot.traces import SpotTrace

EPOCH = datetime(2023, 2, 15, tzinfo=UTC)  # the traces' first sample; only differences matter


class OnDemand:
    name = "on_demand"

    def decide(self, view: JobView) -> Where | None:
        return Where.ON_DEMAND

    def checkpoint_interval_s(self, trace: SpotTrace, index: int, so_far: JobResult) -> float:
        return math.inf


def _safe_slack_s(view: JobView) -> float:
    """The slack every spot policy here respects, the same as choose_capacity's (see its docstring)."""
    return (
        view.deadline_s - view.elapsed_s - view.remaining_s - view.unsaved_s - view.period_s - view.restart_overhead_s
    )


class GreedySpot:
    """Spot whenever there is some, otherwise wait; on-demand for good once waiting is no longer safe."""

    name = "greedy_spot"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.pinned = False

    def decide(self, view: JobView) -> Where | None:
        self.pinned = self.pinned or _safe_slack_s(view) < 0
        if self.pinned:
            return Where.ON_DEMAND
        return Where.SPOT if view.spot_available else None

    def checkpoint_interval_s(self, trace: SpotTrace, index: int, so_far: JobResult) -> float:
        return self.interval_s


class UniformProgress:
    """Uniform Progress (Wu et al., NSDI 2024), as we read the paper's description.

    The job aims to be at least as far along as if it progressed at the same
    rate all the way to the deadline: at time t, work * t / deadline done.
    Spot is always taken when there is some. Without spot, the job waits while
    it is ahead of that line and runs on on-demand while it is behind; once on
    on-demand it stays until it is ahead by two restart overheads (hysteresis,
    so that each on-demand stint pays for its changeover). The same safety net
    as greedy's takes over when the deadline leaves no room for anything else.
    """

    name = "uniform_progress"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.pinned = False

    def decide(self, view: JobView) -> Where | None:
        self.pinned = self.pinned or _safe_slack_s(view) < 0
        if self.pinned:
            return Where.ON_DEMAND
        if view.spot_available:
            return Where.SPOT
        done = view.work_s - view.remaining_s
        target = view.work_s * min(1.0, view.elapsed_s / view.deadline_s)
        if view.running_on is Where.ON_DEMAND:
            target += 2 * view.restart_overhead_s
        return Where.ON_DEMAND if done < target else None

    def checkpoint_interval_s(self, trace: SpotTrace, index: int, so_far: JobResult) -> float:
        return self.interval_s


class Aisched:
    """choose_capacity with policy Prefer, and the Young/Daly interval for the pool's estimated rate."""

    name = "aisched"

    def __init__(self, checkpoint_cost_s: float, notice_s: float, prior: InterruptionPrior) -> None:
        self.checkpoint_cost_s = checkpoint_cost_s
        self.notice_s = notice_s
        self.prior = prior
        self.previous: CapacityDecision | None = None
        self.slack_s: float | None = None

    def decide(self, view: JobView) -> Where | None:
        self.slack_s = _safe_slack_s(view)
        job = SpotJob(
            remaining_work_s=view.remaining_s,
            restart_overhead_s=view.restart_overhead_s,
            unsaved_work_s=view.unsaved_s,
            running_on=_CAPACITY_TYPE[view.running_on] if view.running_on else None,
        )
        self.previous = choose_capacity(
            SpotPolicy.PREFER,
            job,
            now=EPOCH + timedelta(seconds=view.elapsed_s),
            deadline=EPOCH + timedelta(seconds=view.deadline_s),
            spot_available=view.spot_available,
            decision_period_s=view.period_s,
            previous=self.previous,
        )
        return _WHERE[self.previous.choice]

    def checkpoint_interval_s(self, trace: SpotTrace, index: int, so_far: JobResult) -> float:
        return spot_checkpoint_interval(
            self.checkpoint_cost_s,
            interruption_rate(trace.history_before(index), self.prior),
            notice_s=self.notice_s,
            interruptions=so_far.interruptions,
            saved_on_notice=so_far.saved_on_notice,
            slack_s=self.slack_s,
        )


_WHERE = {CapacityChoice.SPOT: Where.SPOT, CapacityChoice.ON_DEMAND: Where.ON_DEMAND, CapacityChoice.WAIT: None}
_CAPACITY_TYPE = {Where.SPOT: CapacityType.SPOT, Where.ON_DEMAND: CapacityType.ON_DEMAND}


def policies(params: Params) -> list[Policy]:
    """Fresh policy objects (they keep per-job state such as the on-demand pin)."""
    return [
        OnDemand(),
        GreedySpot(params.baseline_interval_s),
        UniformProgress(params.baseline_interval_s),
        Aisched(params.checkpoint_cost_s, params.notice_s, params.prior),
    ]
