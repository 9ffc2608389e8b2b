"""Fleet benchmark: a GPU fleet that grows and shrinks with the queue, against static fleets, Karpenter alone
and a gang scheduler with Karpenter.

Runs aisched.sim.fleet (the operator's own scheduler on a simulated clock, on nodes that are
launched, boot, are interrupted and consolidated away) on traces loaded as benchmarks/trace.py
loads them: Philly (the first `--philly-limit` jobs after its opening ramp, real arrivals and
durations) and the four Pollux workloads back to back (Alibaba too, with `--traces`). Arms
(aisched.sim.fleet.arms): `static_peak`, `static_mean`, `karpenter_alone`, `gang_karpenter` (the
peer that counts: all-or-nothing gangs, MostAllocated, Karpenter), `aisched_karpenter`; all on
the same jobs, the same spot traces (`--spot`, default ../shared/data/spot, the three us-west-2
zones) and the same prices (aisched.sim.fleet.catalog). Durations reach aisched's arms only as
users' estimates (`DurationKnowledge.ESTIMATE`, log-normal error, aisched.sim.jobs); the peers
read none. Each arm's `knew` and `assumptions` are written beside its figures, and the commit
that produced them at the top (`provenance`). Jobs run slower when their pods are spread over
more nodes than they need, by their model's measured Pollux cross-node factor
(aisched.sim.speed); no rack factor (a cloud fleet's nodes carry no rack) and, by default, no
zone factor: none is measured (`--zone-factor` sets one). `variants.provisioning_delay_<s>` reruns
the growing arms with another boot time; `variants.spot_price_<r>` reruns the gang peer and
aisched with other spot prices (1.0: spot priced as on-demand, the figure without the spot price
assumption).

Usage: .venv/bin/python -m benchmarks.fleet [--traces philly,pollux] [--philly PATH] [--pollux PATH ...]
       [--spot TRACE.json ... [--spot-zone Z ...]] [--philly-limit 2000] ... [--output PATH] [--update-results]
       (--update-results also redraws docs/fleet.png)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from aisched.sim.fleet.arms import (
    DEFAULT_CONSOLIDATE_AFTER_S,
    DEFAULT_PROVISIONING_DELAY_S,
    FleetOptions,
    arm_knowledge,
    simulate_fleet,
)
from aisched.sim.fleet.fleet import SpotMarket
from aisched.sim.speed import SpeedModel, cross_node_factors
from benchmarks import fleet_report, headline
from benchmarks.common import (
    REPO_ROOT,
    RESULTS_DIR,
    SHARED_DATA,
    InputError,
    add_output_arguments,
    provenance,
    require_files,
    run_reporting_input_errors,
    write_figures,
)
from benchmarks.spot import named_traces
from benchmarks.trace import ALIBABA, PHILLY, PLACEMENT, POLLUX, add_philly_skip_argument, load_trace, shown_path

ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
SPOT_FILE = "spot/aws-02-15-2023_{zone}_v100_1.json"
TRACES = ("philly", "pollux", "alibaba")
DEFAULT_TRACES = ("philly", "pollux")
SPOT_PRICE_SWEEP = (0.3, 0.6, 1.0)
SWEPT = ("gang_karpenter", "aisched_karpenter")
PLOT = Path("docs/fleet.png")
JCT_WITHIN_OF_PEAK = 0.10
COST_AT_MOST_OF_PEAK = 0.5
COST_AT_MOST_OF_GANG_PEER = 0.7  # issue 40: at most 0.7x the gang scheduler + Karpenter's cost, at no worse JCT
GROWING = ("karpenter_alone", "gang_karpenter", "aisched_karpenter")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA, help="where the default inputs are")
    parser.add_argument("--traces", default=",".join(DEFAULT_TRACES), help=f"comma-separated, of {', '.join(TRACES)}")
    parser.add_argument("--philly", type=Path, help=f"a Philly trace (default: data-dir/{PHILLY})")
    parser.add_argument("--pollux", type=Path, nargs="+", help="Pollux workloads (default: data-dir/traces/pollux)")
    parser.add_argument("--alibaba", type=Path, help=f"an Alibaba pod list with times (default: data-dir/{ALIBABA})")
    parser.add_argument("--placement", type=Path, help=f"Pollux placement CSVs (default: data-dir/{PLACEMENT})")
    parser.add_argument(
        "--spot", type=Path, nargs="+", help="spot availability traces, one per zone (default: data-dir's us-west-2)"
    )
    parser.add_argument(
        "--spot-zone",
        action="append",
        default=[],
        help="zone of each --spot trace, in order (default: its metadata's, else the file's name)",
    )
    parser.add_argument("--philly-limit", type=int, default=2000, help="Philly jobs after the ramp")
    add_philly_skip_argument(parser)
    parser.add_argument("--alibaba-limit", type=int, default=2000, help="Alibaba pods by arrival")
    parser.add_argument("--pollux-gap", type=float, default=8 * 3600.0, help="seconds between Pollux workloads")
    parser.add_argument("--provisioning-delay", type=float, default=DEFAULT_PROVISIONING_DELAY_S)
    parser.add_argument("--variant-delay", type=float, default=600.0, help="a second boot time for the growing arms")
    parser.add_argument("--consolidate-after", type=float, default=DEFAULT_CONSOLIDATE_AFTER_S)
    parser.add_argument("--spot-price-ratio", type=float, default=0.4, help="spot price over on-demand")
    parser.add_argument(
        "--spot-price-sweep",
        default=",".join(str(r) for r in SPOT_PRICE_SWEEP),
        help="other spot price ratios the growing arms are rerun with (comma-separated; empty: none)",
    )
    parser.add_argument(
        "--zone-factor", type=float, default=1.0, help="slowdown of a gang spread over zones (none measured)"
    )
    parser.add_argument("--seed", type=int, default=0)
    add_output_arguments(parser, "fleet.json")
    return parser.parse_args(argv)


def judge(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The issue's targets for one trace, each with the figures it was judged on."""
    peak, ours, alone = arms["static_peak"], arms["aisched_karpenter"], arms["karpenter_alone"]
    jct_ratio = _ratio(ours["avg_jct_s"], peak["avg_jct_s"])
    cost_ratio = _ratio(ours["gpu_hours_cost"], peak["gpu_hours_cost"])
    verdict = {
        "avg_jct_vs_static_peak": round(jct_ratio, 3),
        "cost_vs_static_peak": round(cost_ratio, 3),
        "jct_within_10pct_of_static_peak": jct_ratio <= 1 + JCT_WITHIN_OF_PEAK,
        "cost_at_most_half_of_static_peak": cost_ratio <= COST_AT_MOST_OF_PEAK,
        "cheaper_than_karpenter_alone": ours["gpu_hours_cost"] < alone["gpu_hours_cost"],
        "faster_than_karpenter_alone": ours["avg_jct_s"] < alone["avg_jct_s"],
        "no_partial_gang": ours["partial_gangs"] == 0 and ours["partial_gang_node_hours"] == 0,
    }
    if "gang_karpenter" in arms:
        gang = arms["gang_karpenter"]
        verdict |= {
            "cost_vs_gang_karpenter": round(_ratio(ours["gpu_hours_cost"], gang["gpu_hours_cost"]), 3),
            "avg_jct_vs_gang_karpenter": round(_ratio(ours["avg_jct_s"], gang["avg_jct_s"]), 3),
            "cost_at_most_of_gang_karpenter_met": _ratio(ours["gpu_hours_cost"], gang["gpu_hours_cost"])
            <= COST_AT_MOST_OF_GANG_PEER
            and ours["avg_jct_s"] <= gang["avg_jct_s"],
        }
    return verdict


def _ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs else float("inf")


def _spot_market(args: argparse.Namespace) -> tuple[SpotMarket, list[str]]:
    paths = list(args.spot) if args.spot else [args.data_dir / SPOT_FILE.format(zone=zone) for zone in ZONES]
    require_files((p, "--spot or --data-dir") for p in paths)
    try:
        traces = named_traces(paths, args.spot_zone if args.spot else list(ZONES[: len(paths)]), instances=1)
    except ValueError as error:
        raise InputError(str(error)) from error
    return SpotMarket({trace.name: trace for trace in traces}), [shown_path(p) for p in paths]


def _with_knowledge(reports: Mapping[str, Any], options: FleetOptions) -> dict[str, Any]:
    return {arm: {**report.to_json(), **arm_knowledge(arm, options)} for arm, report in reports.items()}


def run(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    traces = [t.strip() for t in args.traces.split(",") if t.strip()]
    if unknown := sorted(set(traces) - set(TRACES)):
        raise InputError(f"unknown trace {', '.join(unknown)}; known: {', '.join(TRACES)}")
    args.philly = args.philly or args.data_dir / PHILLY
    args.pollux = args.pollux or [args.data_dir / p for p in POLLUX]
    args.alibaba = args.alibaba or args.data_dir / ALIBABA
    wanted = {"philly": [args.philly], "pollux": list(args.pollux), "alibaba": [args.alibaba]}
    flags = {"philly": "--philly", "pollux": "--pollux", "alibaba": "--alibaba"}
    require_files((p, f"{flags[t]} or --data-dir") for t in traces for p in wanted[t])
    market, spot_files = _spot_market(args)
    placement = args.placement or args.data_dir / PLACEMENT
    if not placement.is_dir():
        raise InputError(f"{placement}: no such directory (set it with --placement or --data-dir)")
    speed = SpeedModel(cross_node_factors(placement), rack_factor=1.0, zone_factor=args.zone_factor)
    options = FleetOptions(
        provisioning_delay_s=args.provisioning_delay,
        consolidate_after_s=args.consolidate_after,
        spot_price_ratio=args.spot_price_ratio,
        speed=speed,
        seed=args.seed,
    )
    sweep = [float(r) for r in args.spot_price_sweep.split(",") if r.strip()]
    results: dict[str, Any] = {
        "provenance": provenance(),
        "options": options.to_json(),
        "spot_zones": sorted(market.traces),
        "spot_files": spot_files,
        "traces": {},
    }
    for name in traces:
        jobs, taken = load_trace(name, args)
        setup, reports = simulate_fleet(jobs, market, options)
        arms = _with_knowledge(reports, options)
        variant = replace(options, provisioning_delay_s=args.variant_delay)
        _, slower = simulate_fleet(jobs, market, variant, arms=GROWING)
        variants = {f"provisioning_delay_{args.variant_delay:g}s": _with_knowledge(slower, variant)}
        for ratio in sweep:
            priced = replace(options, spot_price_ratio=ratio)
            _, repriced = simulate_fleet(jobs, market, priced, arms=SWEPT)
            variants[f"spot_price_{ratio:g}"] = _with_knowledge(repriced, priced)
        results["traces"][name] = {
            "taken": taken,
            "setup": setup,
            "arms": arms,
            "targets": judge(arms),
            "variants": variants,
        }
        print(f"{name}: {results['traces'][name]['targets']}", flush=True)
    results["targets"] = {
        "avg_jct_within_of_static_peak": JCT_WITHIN_OF_PEAK,
        "cost_at_most_of_static_peak": COST_AT_MOST_OF_PEAK,
        "cost_at_most_of_gang_karpenter_at_no_worse_avg_jct": COST_AT_MOST_OF_GANG_PEER,
    }
    results["wall_seconds"] = round(time.perf_counter() - began, 1)
    write_figures(results, args.output, args.update_results, "fleet.json")
    if args.update_results:
        from benchmarks.fleet_plot import plot  # matplotlib only when drawing

        plot(results, REPO_ROOT / PLOT)
        fleet_report.refresh(RESULTS_DIR / "fleet.json", REPO_ROOT / fleet_report.PAGE)
        headline.refresh()
        print(f"drew {PLOT}, rewrote the tables of {fleet_report.PAGE} and the headline of docs/benchmarks.md")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
