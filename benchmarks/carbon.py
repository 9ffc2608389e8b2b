"""Carbon-aware deferral benchmark: aisched's planner against "Let's Wait Awhile" on real grid data.

Data (paths are arguments; defaults under ../shared/data):
- carbon: GB grid carbon intensity every 30 minutes (the Let's Wait Awhile data set;
  from 2020-10-31 on it has 15-minute readings, of which the paper, and this benchmark,
  keep those on the half hour); jobs arrive during one calendar year of it (`--year`,
  2020 as in that paper). `--region` says which grid a file is of.
- job mix `philly` (`--trace`, the Philly trace) and `paper` (the paper's ML jobs,
  regenerated from its description).

The job mixes, deadlines, forecast error model, both strategies and the savings are
aisched.sim.carbon's (see its docstring). This benchmark adds the comparison with the
paper's own figures, which belong to one region: its repository reports, for ML jobs
(4-90 h, uniform) on the GB data with 5% error and the next-workday deadline, about 6.6%
(not interruptible) and 9.0% (interruptible) saved. Other regions' runs are not compared.

Usage: .venv/bin/python -m benchmarks.carbon [--job-mix philly,paper] [--jobs 3387] [--seeds 3] ...
       [--output PATH] [--update-results]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aisched.sim.carbon.command import add_model_arguments, check_job_mix, inputs_of, load_grid, run_cases
from aisched.sources.carbon import CarbonSourceError, read_intensity_csv
from benchmarks.common import (
    SHARED_DATA,
    InputError,
    add_output_arguments,
    require_files,
    run_reporting_input_errors,
    write_figures,
)

# The paper's savings for ML jobs, read off its chart (5% error, next workday), by the
# region whose grid data they were measured on.
PAPER_SAVING = {"GB": {False: 0.066, True: 0.09}}
PAPER_CASE = ("next_workday", 0.05)
TARGET_FACTOR = 1.5


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--carbon", type=Path, default=SHARED_DATA / "carbon" / "gb_ci.csv")
    parser.add_argument(
        "--trace", type=Path, default=SHARED_DATA / "traces" / "philly" / "philly-2017-09-04_2017-10-20.csv"
    )
    add_model_arguments(parser)
    add_output_arguments(parser, "carbon.json")
    return parser.parse_args(argv)


def reference(region: str) -> dict[str, Any]:
    """The paper's figures for REGION, if it reported any, and the factor aisched aims at."""
    paper = PAPER_SAVING.get(region)
    figures: dict[str, Any] = {}
    if paper is not None:
        figures["lets_wait_awhile_paper"] = {
            "region": region,
            "deadline": PAPER_CASE[0],
            "forecast_error": PAPER_CASE[1],
            "non_interruptible_saving": paper[False],
            "interruptible_saving": paper[True],
        }
    return {**figures, "target_factor": TARGET_FACTOR}


def print_paper_comparison(region: str, cases: Sequence[dict[str, Any]]) -> None:
    paper_of_region = PAPER_SAVING.get(region)
    if paper_of_region is None:
        print(f"the paper reports no figures for region {region}: no comparison")
        return
    for case in cases:
        if (case["deadline"], case["forecast_error"]) == PAPER_CASE:
            mix = case["job_mix"]
            paper = paper_of_region[case["interruptible"]]
            print(
                f"vs paper ({region}), {mix} mix ({'interruptible' if case['interruptible'] else 'one run'}): "
                f"aisched {case['aisched_saving'] / paper:.2f}x of {100 * paper:.1f}% (target {TARGET_FACTOR}x), "
                f"lets-wait-awhile here {case['lets_wait_awhile_saving'] / paper:.2f}x"
            )


def run(args: argparse.Namespace) -> int:
    inputs = [(args.carbon, "--carbon")]
    if "philly" in args.job_mix.split(","):
        inputs.append((args.trace, "--trace"))
    require_files(inputs)
    began = time.monotonic()
    try:
        check_job_mix(args)
        grid = load_grid(read_intensity_csv, args)
    except (ValueError, CarbonSourceError) as error:
        raise InputError(str(error)) from error
    cases = run_cases(grid, args)
    report = {
        "benchmark": "carbon-aware deferral (see aisched.sim.carbon and benchmarks/carbon.py for the method)",
        "inputs": inputs_of(args),
        "reference": reference(args.region),
        "cases": cases,
        "elapsed_seconds": round(time.monotonic() - began, 1),
    }
    print_paper_comparison(args.region, cases)
    write_figures(report, args.output, args.update_results, "carbon.json")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
