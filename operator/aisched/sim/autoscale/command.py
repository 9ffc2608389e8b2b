"""`aisched simulate autoscale [--days 14] [--seed 7] ...`: autoscalers on a generated bursty diurnal trace."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from aisched.sim.autoscale.demand import TraceModel
from aisched.sim.autoscale.replicas import Cluster, simulate_policies
from aisched.sim.options import positive


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--days", type=positive(float), default=TraceModel.days, help="length of the trace")
    parser.add_argument("--seed", type=int, default=TraceModel.seed)
    parser.add_argument("--bursts-per-day", type=float, default=TraceModel.bursts_per_day)
    parser.add_argument("--startup", type=float, default=Cluster.startup_s, help="seconds from pod creation to ready")
    parser.add_argument(
        "--scrape", type=positive(float), default=Cluster.scrape_s, help="Prometheus scrape interval, seconds"
    )
    parser.add_argument(
        "--target-fraction",
        type=positive(float),
        default=Cluster.target_fraction,
        help="targetPerReplica / replica capacity",
    )
    parser.add_argument(
        "--large-scale",
        type=float,
        default=5.0,
        help="load multiplier of the second scenario, a service of about a hundred replicas (0: skip it)",
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    parser.set_defaults(handler=run)


def simulate_scenarios(args: argparse.Namespace) -> dict[str, Any]:
    """Every policy on the trace, and on the same trace scaled by --large-scale; prints each as it ends."""
    model = TraceModel(days=args.days, seed=args.seed, bursts_per_day=args.bursts_per_day)
    cluster = Cluster(startup_s=args.startup, scrape_s=args.scrape, target_fraction=args.target_fraction)
    results = simulate_policies(model, cluster)
    print_results("service of tens of replicas", results)
    if args.large_scale:
        # The same trace shape, larger: shows how per-minute replica caps fare as a service grows.
        large = simulate_policies(
            replace(model, base_rps=model.base_rps * args.large_scale),
            replace(cluster, max_replicas=math.ceil(cluster.max_replicas * args.large_scale * 2)),
        )
        print_results(f"the same load x{args.large_scale:g}", large)
        results["large_service"] = large
    return results


def print_results(title: str, results: dict[str, Any]) -> None:
    trace = results["trace"]
    print(f"{title}: {trace['days']:g} days, mean {trace['mean_rps']} rps, peak {trace['peak_rps']} rps")
    print(f"  {'policy':<12} {'within':>8} {'GPU-h':>9} {'saved':>7} {'mean rep':>9} {'events':>7} {'short min':>10}")
    for name, detail in results["details"].items():
        print(
            f"  {name:<12} {detail['within_target']:>8.2%} {detail['gpu_hours']:>9.1f} "
            f"{detail['gpu_hours_saved_vs_static_peak']:>7.1%} {detail['mean_replicas']:>9.2f} "
            f"{detail['scale_events']:>7} {detail['short_minutes']:>10.1f}"
        )


def run(args: argparse.Namespace) -> int:
    results = simulate_scenarios(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0
