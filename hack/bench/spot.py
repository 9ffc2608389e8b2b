"""Spot benchmark: cost, deadline misses and lost work of capacity policies on real spot traces.

Each trace (../shared/data/spot/*.json, from "Can't Be Late", Wu et al., NSDI 2024)
says, every `metadata.gap_seconds`, whether one V100 spot instance could be had in
one AWS zone (1) or not (0). Jobs of several lengths and deadlines start at evenly
spaced points of each trace, and every policy runs the same jobs:

- aisched: aisched.policy.spot.choose_capacity (policy Prefer), with the checkpoint
  interval of spot_checkpoint_interval: Young/Daly for the pool's interruption rate
  as estimated (aisched.policy.interruptions) from the trace before each (re)start,
  thinned by the notice saves the job has seen land, and capped by its slack.
- on_demand: always on-demand; the baseline every cost is divided by.
- greedy_spot: spot whenever there is some, otherwise wait, and on-demand for good
  once the deadline leaves no more room to wait.
- uniform_progress: our reimplementation of the paper's Uniform Progress, from its
  description (see UniformProgress).

The simulated job runs on one instance. A (re)start costs `restart_overhead`
seconds before training moves (billed, no progress); a move the policy chooses is
graceful (the job saves first). On spot the job checkpoints every interval, each
checkpoint taking `checkpoint_cost` seconds; the baselines use a fixed interval.
A preemption loses the work since the last finished checkpoint, unless the SIGTERM
checkpoint of aisched.workload fits in the notice (checkpoint_cost <= notice): the
results hold both cases, since the traces do not say whether a notice came in time.
Every spot policy here counts only saved work as safe when it judges the deadline,
so each knows what an interruption can cost. Prices: on-demand 1 per hour, spot
`price_ratio`; cost_vs_on_demand divides by the cost of the on_demand policy.

Usage: .venv/bin/python hack/bench/spot.py [--data-dir ../shared/data] [--price-ratio 0.33] ...
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from aisched.api.common import CapacityType, SpotPolicy
from aisched.policy.interruptions import InterruptionPrior, PoolHistory, interruption_rate
from aisched.policy.spot import (
    CapacityChoice,
    CapacityDecision,
    choose_capacity,
    spot_checkpoint_interval,
)
from aisched.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
EPOCH = datetime(2023, 2, 15, tzinfo=UTC)  # the traces' first sample; only differences matter
EPS = 1e-6
HOUR = 3600.0


# --- traces -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpotTrace:
    name: str
    gap_s: float
    available: tuple[bool, ...]
    # Prefix sums, so a pool's history up to any sample is O(1).
    _available_before: tuple[int, ...] = field(repr=False)
    _losses_before: tuple[int, ...] = field(repr=False)

    @classmethod
    def build(cls, name: str, gap_s: float, samples: Sequence[int]) -> SpotTrace:
        available = tuple(bool(sample) for sample in samples)
        available_before, losses_before = [0], [0]
        for index, up in enumerate(available):
            available_before.append(available_before[-1] + up)
            lost = index > 0 and available[index - 1] and not up
            losses_before.append(losses_before[-1] + lost)
        return cls(name, gap_s, available, tuple(available_before), tuple(losses_before))

    @classmethod
    def load(cls, path: Path) -> SpotTrace:
        document = json.loads(path.read_text())
        zone = path.stem.split("_")[1] if "_" in path.stem else path.stem
        return cls.build(zone, float(document["metadata"]["gap_seconds"]), document["data"])

    def at(self, index: int) -> bool:
        # Beyond the trace's end, assume no spot: never in the policies' favour.
        return self.available[index] if index < len(self.available) else False

    def history_before(self, index: int) -> PoolHistory:
        """What an operator watching this pool from the trace's start knows at sample `index`."""
        index = min(index, len(self.available))
        return PoolHistory(
            interruptions=float(self._losses_before[index]),
            exposure_s=self._available_before[index] * self.gap_s,
        )

    @property
    def availability(self) -> float:
        return sum(self.available) / len(self.available)


# --- the simulated job --------------------------------------------------------------------------


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
    remaining_s: float
    """Work left, counting what the job did since its last checkpoint on spot as done."""
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
    policy: Policy, trace: SpotTrace, start_index: int, work_s: float, deadline_s: float, params: Params
) -> JobResult:
    """Run one job from sample `start_index` until its work is done; deadline_s is relative to its start."""
    run, result, gap = _Run(work_s, params.checkpoint_cost_s), JobResult(), trace.gap_s
    index, elapsed = start_index, 0.0
    while run.done_s < work_s - EPS:
        up = trace.at(index)
        if run.running_on is Where.SPOT and not up:
            _preempt(run, result, params)
        view = JobView(
            elapsed_s=elapsed,
            deadline_s=deadline_s,
            work_s=work_s,
            remaining_s=work_s - run.done_s,
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
            _move(run, result, where, policy, trace, index, params)
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


# --- policies -----------------------------------------------------------------------------------


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
        self.previous = choose_capacity(
            SpotPolicy.PREFER,
            now=EPOCH + timedelta(seconds=view.elapsed_s),
            deadline=EPOCH + timedelta(seconds=view.deadline_s),
            remaining_work_s=view.remaining_s,
            restart_overhead_s=view.restart_overhead_s,
            spot_available=view.spot_available,
            unsaved_work_s=view.unsaved_s,
            decision_period_s=view.period_s,
            running_on=_CAPACITY_TYPE[view.running_on] if view.running_on else None,
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


# --- the benchmark ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    start_index: int
    work_s: float
    deadline_s: float

    @property
    def deadline_factor(self) -> float:
        return round(self.deadline_s / self.work_s, 3)


def job_mix(
    trace: SpotTrace, durations_h: Sequence[float], deadline_factors: Sequence[float], starts: int
) -> list[Job]:
    """Every duration x deadline factor, starting at `starts` evenly spaced points of the trace."""
    longest = max(durations_h) * max(deadline_factors) * HOUR
    last_start = len(trace.available) - math.ceil(longest / trace.gap_s) - 1
    if last_start < 0:
        raise SystemExit(f"trace {trace.name} is shorter than the longest deadline ({longest / HOUR:.0f} h)")
    offsets = [round(k * last_start / max(1, starts - 1)) for k in range(starts)]
    return [
        Job(offset, hours * HOUR, hours * factor * HOUR)
        for offset in offsets
        for hours in durations_h
        for factor in deadline_factors
    ]


def policies(params: Params) -> list[Policy]:
    """Fresh policy objects (they keep per-job state such as the on-demand pin)."""
    return [
        OnDemand(),
        GreedySpot(params.baseline_interval_s),
        UniformProgress(params.baseline_interval_s),
        Aisched(params.checkpoint_cost_s, params.notice_s, params.prior),
    ]


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
                result = simulate_job(policy, trace, job.start_index, job.work_s, job.deadline_s, params)
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


TARGET_COST_VS_ON_DEMAND = 0.40  # issue 5: at least 60% cheaper than on-demand, no deadline missed


def target_verdict(results: dict[str, Any]) -> dict[str, Any]:
    """Whether aisched meets the target overall, and for which traces and deadline factors it does."""

    def meets(detail: dict[str, Any]) -> bool:
        row = detail["policies"]["aisched"]
        return bool(row["cost_vs_on_demand"] <= TARGET_COST_VS_ON_DEMAND and row["deadline_misses"] == 0)

    return {
        "aisched_cost_vs_on_demand_at_most": TARGET_COST_VS_ON_DEMAND,
        "met": meets(results),
        "met_on_traces": [name for name, detail in results["per_trace"].items() if meets(detail)],
        "met_for_deadline_factors": [f for f, detail in results["per_deadline_factor"].items() if meets(detail)],
    }


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=REPO_ROOT.parent / "shared" / "data")
    parser.add_argument("--traces", nargs="*", type=Path, help="trace files (default: every data-dir/spot/*.json)")
    parser.add_argument(
        "--price-ratio",
        type=float,
        default=1 / 3,
        help="spot price / on-demand price (default 1/3: spot GPUs commonly sell at 60-70%% off)",
    )
    parser.add_argument("--durations-hours", type=_floats, default=_floats("4,8,16,24,48"))
    parser.add_argument(
        "--deadline-factors",
        type=_floats,
        default=_floats("1.25,1.5,2"),
        help="deadline = duration x factor, counted from submission",
    )
    parser.add_argument("--starts", type=int, default=24, help="start points per trace for each job kind")
    parser.add_argument("--checkpoint-cost", type=float, default=120.0, help="seconds per checkpoint")
    parser.add_argument(
        "--restart-overhead", type=float, default=360.0, help="seconds from (re)start to training again"
    )
    parser.add_argument("--notice", type=float, default=120.0, help="spot interruption notice, seconds")
    parser.add_argument(
        "--baseline-interval", type=float, default=3600.0, help="fixed checkpoint interval of the baselines"
    )
    defaults = Settings.model_fields
    parser.add_argument(
        "--prior-interruptions-per-hour",
        type=float,
        default=defaults["spot_prior_interruptions_per_hour"].default,
        help="aisched's prior for a pool with no history (default: the operator's setting)",
    )
    parser.add_argument("--prior-weight-hours", type=float, default=defaults["spot_prior_weight_hours"].default)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "hack" / "bench" / "results" / "spot.json")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    paths = args.traces or sorted((args.data_dir / "spot").glob("*.json"))
    if not paths:
        print(f"no spot traces under {args.data_dir / 'spot'}", file=sys.stderr)
        return 2
    params = Params(
        price_ratio=args.price_ratio,
        checkpoint_cost_s=args.checkpoint_cost,
        restart_overhead_s=args.restart_overhead,
        notice_s=args.notice,
        notice_checkpoint=True,
        baseline_interval_s=args.baseline_interval,
        prior=InterruptionPrior.per_hour(args.prior_interruptions_per_hour, args.prior_weight_hours),
    )
    traces = [SpotTrace.load(path) for path in paths]
    jobs_of = {trace.name: job_mix(trace, args.durations_hours, args.deadline_factors, args.starts) for trace in traces}
    began = time.perf_counter()
    results = run_scenario(traces, jobs_of, params)
    # The traces do not say whether a notice came in time, so the same jobs run
    # again with every notice checkpoint failing: the worst case for lost work.
    results["without_notice_checkpoint"] = run_scenario(
        traces, jobs_of, dataclasses.replace(params, notice_checkpoint=False)
    )
    results["target"] = target_verdict(results)
    results["parameters"] = {
        "traces": [path.name for path in paths],
        "price_ratio": round(params.price_ratio, 4),
        "durations_hours": args.durations_hours,
        "deadline_factors": args.deadline_factors,
        "starts_per_trace": args.starts,
        "checkpoint_cost_s": params.checkpoint_cost_s,
        "restart_overhead_s": params.restart_overhead_s,
        "notice_s": params.notice_s,
        "notice_checkpoint_fits": params.checkpoint_cost_s <= params.notice_s,
        "baseline_checkpoint_interval_s": params.baseline_interval_s,
        "prior_interruptions_per_hour": args.prior_interruptions_per_hour,
        "prior_weight_hours": args.prior_weight_hours,
    }
    results["wall_seconds"] = round(time.perf_counter() - began, 2)
    print("with the SIGTERM checkpoint in the notice window" if params.checkpoint_cost_s <= params.notice_s else "")
    _print(results)
    print("\nevery notice checkpoint failing (periodic checkpoints only)")
    _print(results["without_notice_checkpoint"])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


def _print(results: dict[str, Any]) -> None:
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


if __name__ == "__main__":
    sys.exit(main())
