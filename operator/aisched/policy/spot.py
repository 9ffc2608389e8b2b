"""Spot decisions: how often to checkpoint, and whether to run on spot, on on-demand, or wait.

Pure: every input, the time included, is a parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from aisched.api.common import CapacityType, SpotPolicy

# Bounds on the checkpoint interval. Below a minute, checkpoints would come faster
# than the operator reconciles and storage would see a storm of writes; above a
# day (the CRD's own maximum for spec.checkpoint.intervalSeconds), a node failure
# on on-demand capacity could still cost a day of work.
MIN_CHECKPOINT_INTERVAL_S = 60.0
MAX_CHECKPOINT_INTERVAL_S = 86400.0

# Slack a Prefer job keeps in reserve per second of remaining work before it stops
# waiting out spot outages: about the share of time spot V100s were unavailable in
# the AWS zones of the Can't-Be-Late traces (10-24%). benchmarks/spot.py measured
# 0.15-0.3 as equally good and all of them cheaper than waiting to the last moment.
RESERVE_PER_WORK = 0.2


def young_interval(checkpoint_cost_s: float, mean_time_between_interruptions_s: float) -> float:
    """Young's first-order optimum, sqrt(2 C M): right when C << M."""
    return math.sqrt(2.0 * checkpoint_cost_s * mean_time_between_interruptions_s)


def daly_interval(checkpoint_cost_s: float, mean_time_between_interruptions_s: float) -> float:
    """Daly's higher-order optimum (2006) of the compute time between checkpoints.

    Its leading term is Young's sqrt(2 C M); the correction terms matter once
    the checkpoint cost C is no longer small against the mean time between
    interruptions M. Where C >= 2M, Daly's answer is M itself.
    """
    cost, mtbi = checkpoint_cost_s, mean_time_between_interruptions_s
    if cost >= 2.0 * mtbi:
        return mtbi
    ratio = cost / (2.0 * mtbi)
    return young_interval(cost, mtbi) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - cost


def optimal_checkpoint_interval(
    checkpoint_cost_s: float,
    interruption_rate_per_s: float,
    *,
    min_s: float = MIN_CHECKPOINT_INTERVAL_S,
    max_s: float = MAX_CHECKPOINT_INTERVAL_S,
) -> float:
    """Seconds of training between checkpoints that waste the least time, within [min_s, max_s].

    `interruption_rate_per_s` is the rate at which the whole gang is interrupted:
    a gang stops when any one of its nodes goes, so that is the sum of its nodes'
    pool rates (aisched.policy.interruptions). No interruptions: `max_s`.
    """
    if not (math.isfinite(checkpoint_cost_s) and checkpoint_cost_s > 0):
        raise ValueError(f"checkpoint cost must be positive, got {checkpoint_cost_s}")
    if not (math.isfinite(interruption_rate_per_s) and interruption_rate_per_s >= 0):
        raise ValueError(f"interruption rate must be finite and non-negative, got {interruption_rate_per_s}")
    if not 0 < min_s <= max_s:
        raise ValueError(f"need 0 < min_s <= max_s, got {min_s} and {max_s}")
    if interruption_rate_per_s == 0:
        return max_s
    return min(max_s, max(min_s, daly_interval(checkpoint_cost_s, 1.0 / interruption_rate_per_s)))


# Until a job's own interruptions say otherwise, its save on SIGTERM is assumed
# to miss one notice in four (a Beta(1, 3) prior): a node can die without a
# notice, or storage can be slow that day. Each notice the job's checkpoint
# lands in (or misses) moves the estimate, so the periodic interval stretches
# as the SIGTERM save proves itself and shrinks back when it does not.
NOTICE_MISS_PRIOR = 1.0
NOTICE_PRIOR_WEIGHT = 4.0

# Share of a job's deadline slack one failed notice save may cost. Unsaved work
# counts against the slack (choose_capacity), so an interval as long as the
# slack would send the job to on-demand as soon as it had trained that long;
# half of it keeps the job on spot. benchmarks/spot.py measured 0.25-0.75 alike.
SLACK_AT_RISK = 0.5


def losing_interruption_share(
    *, checkpoint_cost_s: float, notice_s: float, interruptions: int, saved_on_notice: int
) -> float:
    """Share of interruptions expected to throw away the work since the last periodic checkpoint.

    A checkpoint written in the notice window saves everything, so only the
    interruptions whose notice save fails make periodic checkpoints pay. A
    checkpoint that takes longer than the notice never fits: every interruption
    loses work.
    """
    if not 0 <= saved_on_notice <= interruptions:
        raise ValueError(f"need 0 <= saved_on_notice <= interruptions, got {saved_on_notice} and {interruptions}")
    if checkpoint_cost_s > notice_s:
        return 1.0
    misses = interruptions - saved_on_notice
    return (NOTICE_MISS_PRIOR + misses) / (NOTICE_PRIOR_WEIGHT + interruptions)


def spot_checkpoint_interval(
    checkpoint_cost_s: float,
    interruption_rate_per_s: float,
    *,
    notice_s: float,
    interruptions: int = 0,
    saved_on_notice: int = 0,
    slack_s: float | None = None,
) -> float:
    """The periodic checkpoint interval of a job (re)starting on capacity interrupted at this rate.

    The Young/Daly optimum for the interruptions that would lose work (those
    whose notice save is expected to fail), no longer than SLACK_AT_RISK of the
    deadline slack `slack_s` (None: no deadline), so a failed save cannot eat the
    slack the job needs to stay on spot.
    """
    share = losing_interruption_share(
        checkpoint_cost_s=checkpoint_cost_s,
        notice_s=notice_s,
        interruptions=interruptions,
        saved_on_notice=saved_on_notice,
    )
    longest = MAX_CHECKPOINT_INTERVAL_S
    if slack_s is not None:
        longest = min(longest, max(MIN_CHECKPOINT_INTERVAL_S, SLACK_AT_RISK * slack_s))
    return optimal_checkpoint_interval(checkpoint_cost_s, interruption_rate_per_s * share, max_s=longest)


def lost_work_seconds(
    last_checkpoint_time: datetime | None,
    interruption_time: datetime,
    gang_start_time: datetime | None = None,
) -> float:
    """Training an interruption threw away: the time since the last checkpoint of this run.

    A checkpoint older than the gang's (re)start belongs to an earlier run, so
    the work lost is only what this run did since it started.
    """
    marks = [mark for mark in (last_checkpoint_time, gang_start_time) if mark is not None]
    if not marks:
        raise ValueError("need the last checkpoint time or the gang's start time")
    return max(0.0, (interruption_time - max(marks)).total_seconds())


def interruption_cost_factor(gang_rate_per_s: float, loss_per_interruption_s: float) -> float:
    """What a second of a gang's work costs, in seconds paid for, on capacity interrupted at this rate.

    Each interruption throws away `loss_per_interruption_s` (new nodes to boot, the restart, the
    work since the last save), so of every second paid for, 1 - rate x loss moves the job on:
    1 / (1 - rate x loss), the renewal-reward rate with the loss taken as fixed. Unbounded (inf)
    where interruptions come faster than the gang can recover from them.
    """
    if not (math.isfinite(gang_rate_per_s) and gang_rate_per_s >= 0 and loss_per_interruption_s >= 0):
        raise ValueError(
            f"need a finite rate >= 0 and a loss >= 0, got {gang_rate_per_s} and {loss_per_interruption_s}"
        )
    wasted = gang_rate_per_s * loss_per_interruption_s
    return math.inf if wasted >= 1.0 else 1.0 / (1.0 - wasted)


SPOT_OUTAGE_ON_DEMAND = "SpotOutageOnDemand"
"""The reason of an on-demand choice made while spot could not be had."""


class CapacityChoice(StrEnum):
    SPOT = "Spot"
    ON_DEMAND = "OnDemand"
    WAIT = "Wait"


@dataclass(frozen=True)
class CapacityDecision:
    choice: CapacityChoice
    reason: str
    """CamelCase, for conditions and events."""
    message: str
    """For people: why, with the figures."""
    pinned_on_demand: bool = False
    """On-demand because the deadline demands it: every later decision stays on-demand."""


@dataclass(frozen=True)
class SpotJob:
    """A job as the capacity decision sees it, in seconds.

    `remaining_work_s` is the training left; `unsaved_work_s` is what the job did
    on spot since its last checkpoint, which an interruption would throw away;
    `restart_overhead_s` is what a (re)start costs before training moves again
    (node, image, loading the checkpoint); `running_on` is where the gang runs now.
    """

    remaining_work_s: float
    restart_overhead_s: float
    unsaved_work_s: float = 0.0
    running_on: CapacityType | None = None


def choose_capacity(
    policy: SpotPolicy,
    job: SpotJob,
    *,
    now: datetime,
    deadline: datetime | None,
    spot_available: bool,
    decision_period_s: float = 0.0,
    previous: CapacityDecision | None = None,
    reserve_per_work: float = RESERVE_PER_WORK,
) -> CapacityDecision:
    """Where JOB should run from `now` until the next decision, `decision_period_s` later.

    Prefer with a deadline uses spot, or waits for it, only while a fresh start on
    on-demand would still finish in time if spot failed at the worst moment before
    the next decision:

        slack = deadline - now - remaining - unsaved - decision period - restart >= 0

    Spot and waiting lose at most the unsaved work and one decision period, so by
    induction on-demand is always still in time for a job whose deadline was
    feasible on on-demand when it was submitted. Once the slack is gone the job
    goes to on-demand and stays (`pinned_on_demand`): without slack a move back
    could never pay for its restart, and flapping would.

    Before that, waiting spends slack the job may need later. When spot is out
    and the slack has fallen below `reserve_per_work` x the remaining work, the
    job rides the outage out on on-demand instead, and goes back to spot when
    spot returns.
    """
    if policy == SpotPolicy.NEVER:
        return CapacityDecision(CapacityChoice.ON_DEMAND, "SpotPolicyNever", "spot policy is Never")
    if policy == SpotPolicy.ONLY:
        return _spot_or_wait(spot_available, "spot policy is Only")
    if previous is not None and previous.pinned_on_demand:
        return previous
    if deadline is None:
        # A deadline is how a user says how long the job may wait for its price. Without one,
        # nothing was agreed to: spot when it can be had, on-demand meanwhile, as Karpenter's
        # spot-first NodePools fall back. Waiting here cost Pollux's jobs on a growing fleet 3.4%
        # of their average JCT against Karpenter alone (benchmarks/fleet.py, docs/fleet.md).
        if spot_available:
            return _spot_or_wait(True, "no deadline")
        return CapacityDecision(
            CapacityChoice.ON_DEMAND,
            SPOT_OUTAGE_ON_DEMAND,
            "no spot capacity and no deadline to wait against: on-demand (a deadline lets the job wait for spot)",
        )
    return _prefer_before_deadline(
        job,
        (deadline - now).total_seconds(),
        spot_available=spot_available,
        decision_period_s=decision_period_s,
        reserve_per_work=reserve_per_work,
    )


def _prefer_before_deadline(
    job: SpotJob, time_left: float, *, spot_available: bool, decision_period_s: float, reserve_per_work: float
) -> CapacityDecision:
    """Prefer with TIME_LEFT seconds to the deadline: spot or waiting while the slack allows."""
    slack = time_left - job.remaining_work_s - job.unsaved_work_s - decision_period_s - job.restart_overhead_s
    if slack < 0:
        return CapacityDecision(
            CapacityChoice.ON_DEMAND,
            "DeadlineNeedsOnDemand",
            f"{job.remaining_work_s:.0f}s of work left and {time_left:.0f}s to the deadline "
            "leave no room for a spot interruption: on-demand until done",
            pinned_on_demand=True,
        )
    if spot_available:
        return _spot_or_wait(True, f"{slack:.0f}s of slack before on-demand is needed")
    reserve = reserve_per_work * job.remaining_work_s
    if job.running_on == CapacityType.ON_DEMAND or slack < reserve:
        # Riding the whole outage out on on-demand: stopping half-way would pay
        # another restart for the same outage.
        return CapacityDecision(
            CapacityChoice.ON_DEMAND,
            SPOT_OUTAGE_ON_DEMAND,
            f"no spot capacity and {slack:.0f}s of slack, under the {reserve:.0f}s kept in reserve: "
            "on-demand until spot returns",
        )
    return CapacityDecision(
        CapacityChoice.WAIT, "WaitingForSpot", f"no spot capacity; {slack:.0f}s of slack to wait with"
    )


def capacity_types_of(decision: CapacityDecision) -> tuple[CapacityType, ...]:
    """The capacity types a waiting gang enters the scheduling cycle on, for its DECISION.

    Spot alone for spot, and for waiting for spot too: the gang's priority may make room on spot
    nodes (preempt, shrink) that no free GPU offers, and left waiting it says it waits for spot.
    A gang given spot never takes an on-demand node, even an idle one: the decision weighed spot's
    price against the deadline, and on-demand is what it chose not to pay for. On-demand alone
    for on-demand. The operator's cycle and the simulator both enter gangs by this."""
    if decision.choice == CapacityChoice.ON_DEMAND:
        return (CapacityType.ON_DEMAND,)
    return (CapacityType.SPOT,)


def _spot_or_wait(spot_available: bool, why: str) -> CapacityDecision:
    if spot_available:
        return CapacityDecision(CapacityChoice.SPOT, "SpotAvailable", f"spot capacity available; {why}")
    return CapacityDecision(CapacityChoice.WAIT, "WaitingForSpot", f"no spot capacity; {why}")
