"""Spot benchmark: cost, deadline misses and lost work of capacity policies on real spot traces.

The traces (default: ../shared/data/spot/, four AWS zones of "Can't Be Late", Wu et al.,
NSDI 2024) say, every `metadata.gap_seconds`, whether one V100 spot instance could be had
in one zone. The simulation and its policies are aisched.sim.spot's (see its docstring):
aisched's choose_capacity and checkpoint interval against always-on-demand, greedy spot and
Uniform Progress, with the same jobs for every policy, with and without the SIGTERM
checkpoint landing in the notice, and a clairvoyant lower bound. This benchmark adds the
target aisched must meet (issue 5: at least 60% cheaper than on-demand, no deadline missed).

A trace's zone is the matching `--zone` (in order; fewer than the traces is fine), else the one
its metadata names, else its file's name without `.json`: a name for the pool in the results,
so any set of traces runs without one `--zone` each. Multi-node traces, whose samples count
instances, take `--instances`: the instances a job needs at once.

What the policies know (`knew`, per policy, in the results): each job's duration only as a
user's estimate (log-normal error, sigma `--estimate-sigma`, aisched.sim.jobs; the same estimate
for every policy), spot availability only up to now; the clairvoyant bound knows the true
duration and the whole trace. The spot trace is V100 availability standing in for any GPU's,
at a flat `--price-ratio` (assumptions, recorded with them).

Usage: .venv/bin/python -m benchmarks.spot [--data-dir ../shared/data] [--traces T.json ... --zone Z ...]
       [--price-ratio 0.33] ... [--output PATH] [--update-results]
"""

from __future__ import annotations

import argparse
import json
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
from aisched.sim.spot.traces import SpotTrace
from benchmarks.common import (
    SHARED_DATA,
    InputError,
    add_output_arguments,
    provenance,
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
ESTIMATE_SWEEP = 0.25
"""An estimate from the job's own progress (steps left over the throughput measured so far), as
Pollux and Optimus make one: a quarter of the log-normal error of a user's guess."""
TARGET_COST_VS_ON_DEMAND = 0.40  # issue 5: at least 60% cheaper than on-demand, no deadline missed


def named_traces(paths: Sequence[Path], zones: Sequence[str], instances: int) -> list[SpotTrace]:
    """The traces, each named by its zone in ZONES (in order), else its metadata's, else its file's name."""
    names = list(zones)
    for path in paths[len(zones) :]:
        try:
            metadata = json.loads(path.read_text()).get("metadata", {})
        except (OSError, ValueError, AttributeError):
            metadata = {}  # load_traces says what is wrong with it
        names.append(str(metadata.get("zone") or "") or path.name.removesuffix(".json"))
    return load_traces(paths, names, instances)


def knowledge(results: dict[str, Any]) -> dict[str, Any]:
    """What each policy was told, and what every figure assumes."""
    estimate = results["parameters"]["duration_knowledge"]
    told = {"durations": estimate, "future_spot_availability": False, "deadline": True}
    return {
        "knew": {
            "on_demand": {**told, "durations": "none", "deadline": False},
            "greedy_spot": told,
            "uniform_progress": told,
            "aisched": told,
            "clairvoyant_lower_bound": {"durations": "truth", "future_spot_availability": True, "deadline": True},
        },
        "assumptions": {
            "spot_trace": "Can't Be Late V100 single-instance availability, standing in for any GPU's",
            "spot_price_ratio": results["parameters"]["price_ratio"],
            "spot_price": "flat, every zone and hour",
        },
    }


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
    parser.add_argument(
        "--estimate-sweep",
        type=lambda text: [float(part) for part in text.split(",") if part.strip()],
        default=[ESTIMATE_SWEEP],
        help="other estimate errors (sigmas) the policies are rerun with (comma-separated)",
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
        traces = named_traces(paths, zones, args.instances)
        results = simulate_both_notice_cases(traces, args)
        if args.estimate_sigma > 0:  # beside it, the same jobs with every policy told the truth
            results["with_true_durations"] = simulate_both_notice_cases(
                traces, argparse.Namespace(**{**vars(args), "estimate_sigma": 0.0})
            )
        results["estimate_sensitivity"] = {
            f"sigma_{sigma:g}": {
                "policies": simulate_both_notice_cases(
                    traces, argparse.Namespace(**{**vars(args), "estimate_sigma": sigma})
                )["policies"]
            }
            for sigma in args.estimate_sweep
            if sigma not in (0.0, args.estimate_sigma)
        }
    except ValueError as error:  # an unusable trace, or one shorter than the jobs
        raise InputError(str(error)) from error
    results["target"] = target_verdict(results)
    results["parameters"] = parameters(args, paths)
    results |= knowledge(results)
    results["provenance"] = provenance()
    results["wall_seconds"] = round(time.perf_counter() - began, 2)
    print_both_notice_cases(results, args)
    write_figures(results, args.output, args.update_results, "spot.json")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
