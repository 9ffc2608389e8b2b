"""One queue over several regions: aisched's dispatch against time-shifting alone, cheapest-first,
lowest-intensity and MultiKueue-style first-to-admit, on public carbon, spot and job data.

Data (paths are arguments; defaults under ../shared/data):
- regions: the four zones of the spot traces, two on the GB grid and two on the FR grid (the Let's
  Wait Awhile data, hourly, with its forecast error model: 5% of the mean); each zone's spot trace
  starts at the first job's arrival;
- jobs: the Philly trace by arrival (every job of a minute or more), moved by whole weeks onto
  September-October 2020, each with a home region drawn uniformly (its data lives there), and, as in
  the carbon benchmark, every job deferrable with its "12h" deadline.

Assumptions, each an argument: every region offers the most GPUs busy at once were every job run at
arrival, split evenly (the fleet is sized for the work); a V100 GPU-hour costs $3.06 on-demand (AWS's
p3.2xlarge list price in us-east-2 and us-west-2) and a third of that on spot, in every region; moving
a job's data to another region costs $2 (100 GB at $0.02/GB, AWS's inter-region transfer price);
300 W per GPU; a checkpoint every 30 minutes of work and 5 minutes to restore one.

aisched.sim.regions has the rules and the policies. Besides the headline run, the results hold
ablations (aisched moving jobs in space only; a 5% cost slack), the next-workday deadline, and one
where the FR regions cost 10% more. The plot goes to docs/regions.png.

Usage: .venv/bin/python -m benchmarks.regions [--days 26] [--output PATH] [--update-results]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aisched.sim.regions.command import RegionSpec, add_model_arguments, simulate
from aisched.sources.carbon import CarbonSourceError, read_intensity_csv
from benchmarks.common import (
    REPO_ROOT,
    SHARED_DATA,
    InputError,
    add_output_arguments,
    require_files,
    run_reporting_input_errors,
    write_figures,
)
from benchmarks.regions_plot import plot

# (region, grid, spot zone): two zones on each grid.
ZONES = (
    ("gb-west-2a", "gb", "us-west-2a"),
    ("gb-west-2b", "gb", "us-west-2b"),
    ("fr-west-2c", "fr", "us-west-2c"),
    ("fr-east-2a", "fr", "us-east-2a"),
)
TARGETS = {"carbon_saving_vs_time_only": 1.5, "cost_vs_cheapest_first": 1.05, "deadline_misses": 0}
VARIANTS: dict[str, list[str]] = {
    "space_only": ["--no-time-shift"],
    "cost_slack_5pct": ["--cost-slack", "0.05"],
    "next_workday": ["--deadline", "next_workday"],
    "fr_costs_10pct_more": ["--price-premium", "fr-west-2c=0.1", "--price-premium", "fr-east-2a=0.1"],
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="the shared data directory")
    parser.add_argument("--no-variants", action="store_true", help="the headline run only")
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / "docs" / "regions.png")
    add_model_arguments(parser)
    add_output_arguments(parser, "regions.json")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.trace = args.data / "traces" / "philly" / "philly-2017-09-04_2017-10-20.csv"
    args.region = [
        RegionSpec(
            name, args.data / "carbon" / f"{grid}_ci.csv", args.data / "spot" / f"aws-02-15-2023_{zone}_v100_1.json"
        )
        for name, grid, zone in ZONES
    ]
    return args


def against_targets(figures: dict[str, Any]) -> dict[str, Any]:
    """aisched's figures as the targets read them."""
    policies = figures["policies"]
    ours, time_only = policies["aisched"], policies["time_only"]
    cheapest, first = policies["cheapest_first"], policies["first_to_admit"]
    saving_ratio = ours["co2_saving"] / time_only["co2_saving"] if time_only["co2_saving"] > 0 else None
    return {
        "carbon_saving_vs_time_only": None if saving_ratio is None else round(saving_ratio, 2),
        "cost_vs_cheapest_first": round(ours["cost"] / cheapest["cost"], 4),
        "deadline_misses": ours["deadline_misses"],
        "avg_jct_vs_first_to_admit": round(ours["avg_jct_s"] / first["avg_jct_s"], 4),
    }


def print_against_targets(name: str, achieved: dict[str, Any]) -> None:
    print(
        f"{name}: carbon saving {achieved['carbon_saving_vs_time_only']}x time-only's (target 1.5x), "
        f"cost {achieved['cost_vs_cheapest_first']}x cheapest-first's (target <= 1.05x), "
        f"{achieved['deadline_misses']} misses (target 0), "
        f"average JCT {achieved['avg_jct_vs_first_to_admit']}x first-to-admit's (target <= 1x)",
        flush=True,
    )


def run_case(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    case = parse_args([*args.argv, *extra]) if extra else args
    try:
        figures = simulate(case, read_intensity_csv)
    except (ValueError, CarbonSourceError) as error:
        raise InputError(str(error)) from error
    return {**figures, "against_targets": against_targets(figures)}


def run(args: argparse.Namespace) -> int:
    require_files(
        [
            (args.trace, "--data"),
            *((s.carbon, "--data") for s in args.region),
            *((s.spot, "--data") for s in args.region),
        ]
    )
    began = time.monotonic()
    headline = run_case(args, [])
    print_against_targets("headline", headline["against_targets"])
    report: dict[str, Any] = {
        "benchmark": "one queue over several regions (see aisched.sim.regions and benchmarks/regions.py)",
        **headline,
        "targets": TARGETS,
        "variants": {},
    }
    if not args.no_variants:
        for name, extra in VARIANTS.items():
            variant = run_case(args, extra)
            print_against_targets(name, variant["against_targets"])
            report["variants"][name] = {
                k: variant[k] for k in ("baseline_at_arrival_co2_g", "policies", "against_targets")
            }
    report["elapsed_seconds"] = round(time.monotonic() - began, 1)
    write_figures(report, args.output, args.update_results, "regions.json")
    if args.update_results:
        plot(report, args.plot)
        print(f"plot: {args.plot}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
