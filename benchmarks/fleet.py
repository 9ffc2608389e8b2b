"""Fleet benchmark: a GPU fleet that grows and shrinks with the queue, against static fleets and Karpenter alone.

Runs aisched.sim.fleet (the operator's own scheduler on a simulated clock, on nodes that are
launched, boot, are interrupted and consolidated away) on two traces, as benchmarks/trace.py
loads them: Philly (the first `--philly-limit` jobs after the ramp, real arrivals and
durations) and the four Pollux workloads back to back. Arms (aisched.sim.fleet.arms):
`static_peak`, `static_mean`, `karpenter_alone`, `aisched_karpenter`; all on the same jobs,
the same spot traces (../shared/data/spot, the three us-west-2 zones) and the same prices
(aisched.sim.fleet.catalog). Jobs run slower when their pods are spread over more nodes than
they need, by their model's measured Pollux cross-node factor (aisched.sim.speed); no rack
factor (a cloud fleet's nodes carry no rack) and, by default, no zone factor: none is measured
(`--zone-factor` sets one, e.g. the trace benchmark's assumed 1.5). `variants.provisioning_delay_<s>` reruns
the two growing arms with another boot time.

Usage: .venv/bin/python -m benchmarks.fleet [--philly-limit 2000] [--provisioning-delay 300] ...
       [--output PATH] [--update-results]    (--update-results also redraws docs/fleet.png)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from aisched.sim.fleet.arms import (
    ARMS,
    DEFAULT_CONSOLIDATE_AFTER_S,
    DEFAULT_PROVISIONING_DELAY_S,
    FleetOptions,
    simulate_fleet,
)
from aisched.sim.fleet.fleet import SpotMarket
from aisched.sim.speed import SpeedModel, cross_node_factors
from aisched.sim.spot.traces import SpotTrace
from benchmarks.common import (
    REPO_ROOT,
    SHARED_DATA,
    InputError,
    add_output_arguments,
    require_files,
    run_reporting_input_errors,
    write_figures,
)
from benchmarks.trace import PHILLY, PLACEMENT, POLLUX, load_trace

ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
SPOT_FILE = "spot/aws-02-15-2023_{zone}_v100_1.json"
TRACES = ("philly", "pollux")
PLOT = Path("docs/fleet.png")
JCT_WITHIN_OF_PEAK = 0.10
COST_AT_MOST_OF_PEAK = 0.5
GROWING = ("karpenter_alone", "aisched_karpenter")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA, help="where the traces are")
    parser.add_argument("--traces", default=",".join(TRACES), help=f"comma-separated, of {', '.join(TRACES)}")
    parser.add_argument("--philly-limit", type=int, default=2000, help="Philly jobs after the ramp")
    parser.add_argument("--pollux-gap", type=float, default=8 * 3600.0, help="seconds between Pollux workloads")
    parser.add_argument("--provisioning-delay", type=float, default=DEFAULT_PROVISIONING_DELAY_S)
    parser.add_argument("--variant-delay", type=float, default=600.0, help="a second boot time for the growing arms")
    parser.add_argument("--consolidate-after", type=float, default=DEFAULT_CONSOLIDATE_AFTER_S)
    parser.add_argument("--spot-price-ratio", type=float, default=0.4, help="spot price over on-demand")
    parser.add_argument(
        "--zone-factor", type=float, default=1.0, help="slowdown of a gang spread over zones (none measured)"
    )
    parser.add_argument("--seed", type=int, default=0)
    add_output_arguments(parser, "fleet.json")
    return parser.parse_args(argv)


def judge(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The issue's targets for one trace, each with the figures it was judged on."""
    peak, ours, alone = arms["static_peak"], arms["aisched_karpenter"], arms["karpenter_alone"]
    jct_ratio = ours["avg_jct_s"] / peak["avg_jct_s"] if peak["avg_jct_s"] else float("inf")
    cost_ratio = ours["gpu_hours_cost"] / peak["gpu_hours_cost"] if peak["gpu_hours_cost"] else float("inf")
    return {
        "avg_jct_vs_static_peak": round(jct_ratio, 3),
        "cost_vs_static_peak": round(cost_ratio, 3),
        "jct_within_10pct_of_static_peak": jct_ratio <= 1 + JCT_WITHIN_OF_PEAK,
        "cost_at_most_half_of_static_peak": cost_ratio <= COST_AT_MOST_OF_PEAK,
        "cheaper_than_karpenter_alone": ours["gpu_hours_cost"] < alone["gpu_hours_cost"],
        "faster_than_karpenter_alone": ours["avg_jct_s"] < alone["avg_jct_s"],
        "no_partial_gang": ours["partial_gangs"] == 0 and ours["partial_gang_node_hours"] == 0,
    }


def run(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    traces = [t.strip() for t in args.traces.split(",") if t.strip()]
    if unknown := sorted(set(traces) - set(TRACES)):
        raise InputError(f"unknown trace {', '.join(unknown)}; known: {', '.join(TRACES)}")
    spot_paths = {zone: args.data_dir / SPOT_FILE.format(zone=zone) for zone in ZONES}
    args.philly, args.pollux = args.data_dir / PHILLY, [args.data_dir / p for p in POLLUX]
    require_files([(p, "--data-dir") for p in [*spot_paths.values(), args.philly, *args.pollux]])
    placement = args.data_dir / PLACEMENT
    if not placement.is_dir():
        raise InputError(f"{placement}: no such directory (set it with --data-dir)")
    market = SpotMarket({zone: SpotTrace.load(path, zone=zone) for zone, path in spot_paths.items()})
    speed = SpeedModel(cross_node_factors(placement), rack_factor=1.0, zone_factor=args.zone_factor)
    options = FleetOptions(
        provisioning_delay_s=args.provisioning_delay,
        consolidate_after_s=args.consolidate_after,
        spot_price_ratio=args.spot_price_ratio,
        speed=speed,
        seed=args.seed,
    )
    results: dict[str, Any] = {"options": options.to_json(), "spot_zones": list(ZONES), "traces": {}}
    for name in traces:
        jobs, taken = load_trace(name, args)
        setup, reports = simulate_fleet(jobs, market, options)
        arms = {arm: reports[arm].to_json() for arm in ARMS}
        variant = replace(options, provisioning_delay_s=args.variant_delay)
        _, slower = simulate_fleet(jobs, market, variant, arms=GROWING)
        results["traces"][name] = {
            "taken": taken,
            "setup": setup,
            "arms": arms,
            "targets": judge(arms),
            "variants": {f"provisioning_delay_{args.variant_delay:g}s": {a: r.to_json() for a, r in slower.items()}},
        }
        print(f"{name}: {results['traces'][name]['targets']}", flush=True)
    results["targets"] = {
        "avg_jct_within_of_static_peak": JCT_WITHIN_OF_PEAK,
        "cost_at_most_of_static_peak": COST_AT_MOST_OF_PEAK,
    }
    results["wall_seconds"] = round(time.perf_counter() - began, 1)
    write_figures(results, args.output, args.update_results, "fleet.json")
    if args.update_results:
        from benchmarks.fleet_plot import plot  # matplotlib only when drawing

        plot(results, REPO_ROOT / PLOT)
        print(f"drew {PLOT}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
