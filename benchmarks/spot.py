"""Spot benchmark: cost, deadline misses and lost work of capacity policies on real spot traces.

The traces (default: ../shared/data/spot/, four AWS zones of "Can't Be Late", Wu et al.,
NSDI 2024) say, every `metadata.gap_seconds`, whether one V100 spot instance could be had
in one zone. The simulation and its policies are aisched.sim.spot's (see its docstring):
aisched's choose_capacity and checkpoint interval against always-on-demand, greedy spot and
Uniform Progress, with the same jobs for every policy, with and without the SIGTERM
checkpoint landing in the notice, and a clairvoyant lower bound. This benchmark adds the
target aisched must meet (issue 5: at least 60% cheaper than on-demand, no deadline missed).

A trace's zone is the one its metadata names, else the matching `--zone` (one per
`--traces` file, in order); the default traces' zones are known. Multi-node traces, whose
samples count instances, take `--instances`: the instances a job needs at once.

Usage: .venv/bin/python -m benchmarks.spot [--data-dir ../shared/data] [--traces T.json ... --zone Z ...]
       [--price-ratio 0.33] ... [--output PATH] [--update-results]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aisched.settings import Settings
from aisched.sim.spot.command import (
    add_model_arguments,
    add_trace_arguments,
    load_traces,
    parameters,
    print_both_notice_cases,
    simulate_both_notice_cases,
)
from benchmarks.common import (
    SHARED_DATA,
    InputError,
    add_output_arguments,
    require_files,
    run_reporting_input_errors,
    write_figures,
)

# The public traces under the data directory and their zones, which the files' metadata
# does not name (it holds only gap_seconds).
DEFAULT_TRACES = (
    ("us-east-2a", Path("spot/aws-02-15-2023_us-east-2a_v100_1.json")),
    ("us-west-2a", Path("spot/aws-02-15-2023_us-west-2a_v100_1.json")),
    ("us-west-2b", Path("spot/aws-02-15-2023_us-west-2b_v100_1.json")),
    ("us-west-2c", Path("spot/aws-02-15-2023_us-west-2c_v100_1.json")),
)
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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA, help="where the default traces are")
    parser.add_argument(
        "--traces", nargs="*", type=Path, help="trace files (default: the four AWS zones under data-dir/spot)"
    )
    add_trace_arguments(parser)
    defaults = Settings.model_fields
    add_model_arguments(
        parser,
        prior_interruptions_per_hour=defaults["spot_prior_interruptions_per_hour"].default,
        prior_weight_hours=defaults["spot_prior_weight_hours"].default,
    )
    add_output_arguments(parser, "spot.json")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    if args.traces:
        paths, zones = list(args.traces), list(args.zone)
    else:
        paths = [args.data_dir / path for _, path in DEFAULT_TRACES]
        zones = args.zone or [zone for zone, _ in DEFAULT_TRACES]
    require_files((path, "--traces or --data-dir") for path in paths)
    began = time.perf_counter()
    try:
        traces = load_traces(paths, zones, args.instances)
        results = simulate_both_notice_cases(traces, args)
    except ValueError as error:  # an unusable trace, or one shorter than the jobs
        raise InputError(str(error)) from error
    results["target"] = target_verdict(results)
    results["parameters"] = parameters(args, paths)
    results["wall_seconds"] = round(time.perf_counter() - began, 2)
    print_both_notice_cases(results, args)
    write_figures(results, args.output, args.update_results, "spot.json")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
