"""`aisched simulate spot TRACE... [--zone ZONE]...`: capacity policies on spot traces, print the tables."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aisched.policy.interruptions import InterruptionPrior
from aisched.sim.jobs import ESTIMATE_SIGMA
from aisched.sim.options import positive
from aisched.sim.spot.job import Params
from aisched.sim.spot.scenario import job_mix, print_results, run_scenario
from aisched.sim.spot.traces import SpotTrace, SpotTraceError


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """How to read the traces: their zones and the instances a job needs at once."""
    parser.add_argument(
        "--zone",
        action="append",
        default=[],
        help="zone of each trace, in the order of the traces (default: the zone its metadata names)",
    )
    parser.add_argument(
        "--instances",
        type=int,
        default=1,
        help="spot instances a job needs at once: spot is there where a sample counts as many (multi-node traces)",
    )


def add_model_arguments(
    parser: argparse.ArgumentParser, *, prior_interruptions_per_hour: float, prior_weight_hours: float
) -> None:
    """The jobs, prices and checkpoint costs; the prior's defaults are the operator's settings, passed in."""
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
    parser.add_argument("--starts", type=positive(int), default=24, help="start points per trace for each job kind")
    parser.add_argument("--checkpoint-cost", type=float, default=120.0, help="seconds per checkpoint")
    parser.add_argument(
        "--restart-overhead", type=float, default=360.0, help="seconds from (re)start to training again"
    )
    parser.add_argument("--notice", type=positive(float), default=120.0, help="spot interruption notice, seconds")
    parser.add_argument(
        "--baseline-interval", type=float, default=3600.0, help="fixed checkpoint interval of the baselines"
    )
    parser.add_argument(
        "--prior-interruptions-per-hour",
        type=float,
        default=prior_interruptions_per_hour,
        help="aisched's prior for a pool with no history (default: the operator's setting)",
    )
    parser.add_argument("--prior-weight-hours", type=float, default=prior_weight_hours)
    parser.add_argument(
        "--estimate-sigma",
        type=float,
        default=ESTIMATE_SIGMA,
        help="log-normal error of the duration estimate every policy is told (0: the true duration)",
    )
    parser.add_argument("--seed", type=int, default=0, help="of the estimates")


def configure_parser(
    parser: argparse.ArgumentParser, *, prior_interruptions_per_hour: float, prior_weight_hours: float
) -> None:
    parser.add_argument("traces", nargs="+", type=Path, help='spot traces ({"metadata": {"gap_seconds"}, "data"})')
    add_trace_arguments(parser)
    add_model_arguments(
        parser, prior_interruptions_per_hour=prior_interruptions_per_hour, prior_weight_hours=prior_weight_hours
    )
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    parser.set_defaults(handler=run)


def load_traces(paths: Sequence[Path], zones: Sequence[str], instances: int) -> list[SpotTrace]:
    """The traces, each named by its --zone (in order) or else by its metadata; SpotTraceError if unusable."""
    if len(zones) > len(paths):
        raise SpotTraceError(f"{len(zones)} zones for {len(paths)} traces: give at most one --zone per trace")
    named = [*zones, *[None] * (len(paths) - len(zones))]
    traces = [SpotTrace.load(path, zone, instances) for path, zone in zip(paths, named, strict=True)]
    seen = [trace.name for trace in traces]
    if len(set(seen)) < len(seen):
        raise SpotTraceError(f"two traces of the same zone ({', '.join(seen)}): give each its own --zone")
    return traces


def params_of(args: argparse.Namespace) -> Params:
    return Params(
        price_ratio=args.price_ratio,
        checkpoint_cost_s=args.checkpoint_cost,
        restart_overhead_s=args.restart_overhead,
        notice_s=args.notice,
        notice_checkpoint=True,
        baseline_interval_s=args.baseline_interval,
        prior=InterruptionPrior.per_hour(args.prior_interruptions_per_hour, args.prior_weight_hours),
    )


def simulate_both_notice_cases(traces: Sequence[SpotTrace], args: argparse.Namespace) -> dict[str, Any]:
    """Every policy on the job mix; then the same jobs again with every notice checkpoint failing."""
    params = params_of(args)
    jobs_of = {
        trace.name: job_mix(
            trace,
            args.durations_hours,
            args.deadline_factors,
            args.starts,
            estimate_sigma=args.estimate_sigma,
            seed=args.seed,
        )
        for trace in traces
    }
    results = run_scenario(traces, jobs_of, params)
    # The traces do not say whether a notice came in time, so the same jobs run
    # again with every notice checkpoint failing: the worst case for lost work.
    results["without_notice_checkpoint"] = run_scenario(
        traces, jobs_of, dataclasses.replace(params, notice_checkpoint=False)
    )
    return results


def parameters(args: argparse.Namespace, paths: Sequence[Path]) -> dict[str, Any]:
    """What the figures depend on, as the results file records it."""
    params = params_of(args)
    return {
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
        "instances_per_job": args.instances,
        "duration_knowledge": "estimate" if args.estimate_sigma > 0 else "truth",
        "estimate_sigma": args.estimate_sigma,
        "seed": args.seed,
    }


def print_both_notice_cases(results: dict[str, Any], args: argparse.Namespace) -> None:
    print("with the SIGTERM checkpoint in the notice window" if args.checkpoint_cost <= args.notice else "")
    print_results(results)
    print("\nevery notice checkpoint failing (periodic checkpoints only)")
    print_results(results["without_notice_checkpoint"])


def run(args: argparse.Namespace) -> int:
    try:
        traces = load_traces(args.traces, args.zone, args.instances)
        results = simulate_both_notice_cases(traces, args)
    except ValueError as error:  # SpotTraceError included
        print(f"error: {error}", file=sys.stderr)
        return 1
    results["parameters"] = parameters(args, args.traces)
    print_both_notice_cases(results, args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0
