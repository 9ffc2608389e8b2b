"""`aisched simulate carbon --carbon CSV [--trace PHILLY]`: carbon-aware deferral against Let's Wait Awhile."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from aisched.policy.carbon import Forecast
from aisched.sim.carbon.cases import run_case
from aisched.sim.carbon.grid import DEADLINES, Grid
from aisched.sim.carbon.jobs import load_jobs, paper_jobs, place_jobs
from aisched.sim.carbon.strategies import Knobs
from aisched.sim.options import positive


class IntensityReader(Protocol):
    """Reads a CSV of carbon intensity readings (aisched.sources.carbon.read_intensity_csv, passed in by the
    command line, since the simulator stays below the sources); ValueError or OSError if it cannot."""

    def __call__(self, path: Path, region: str, *, step: timedelta | None = None) -> Forecast: ...


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The grid's region and step, the job mixes, deadlines, forecast errors and aisched's knobs."""
    parser.add_argument("--region", default="GB", help="the region the carbon data is of")
    parser.add_argument(
        "--step-minutes",
        type=int,
        default=30,
        help="the data's step; finer readings are thinned to it, as the paper did",
    )
    parser.add_argument("--year", type=int, default=2020)
    parser.add_argument(
        "--jobs", type=positive(int), default=3387, help="jobs sampled from the trace (the paper used 3387)"
    )
    parser.add_argument("--seeds", type=positive(int), default=3, help="forecast-noise runs per case with error")
    parser.add_argument("--errors", default="0,0.05,0.1")
    parser.add_argument("--deadlines", default="12h,next_workday")
    parser.add_argument("--resume-overhead-minutes", type=float, default=0.0)
    parser.add_argument("--power-per-gpu", type=float, default=300.0, help="W; scales grams, not fractions")
    parser.add_argument("--job-mix", default="philly,paper", help="philly, paper, or both (comma-separated)")
    parser.add_argument("--min-saving", type=float, default=0.0, help="aisched's min_saving_fraction")
    parser.add_argument("--no-replan", action="store_true", help="aisched follows its first plan")
    parser.add_argument("--no-shrink", action="store_true", help="aisched is not told the forecast error")
    parser.add_argument("--seed", type=int, default=1)


def configure_parser(parser: argparse.ArgumentParser, read_intensity: IntensityReader) -> None:
    parser.add_argument("--carbon", type=Path, required=True, help="CSV of carbon intensity (time, gCO2eq/kWh)")
    parser.add_argument("--trace", type=Path, help="Philly trace CSV (needed by the philly job mix)")
    add_model_arguments(parser)
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    parser.set_defaults(handler=run, read_intensity=read_intensity)


def load_grid(read_intensity: IntensityReader, args: argparse.Namespace) -> Grid:
    return Grid.from_forecast(read_intensity(args.carbon, args.region, step=timedelta(minutes=args.step_minutes)))


def knobs_of(args: argparse.Namespace) -> Knobs:
    return Knobs(
        args.resume_overhead_minutes * 60,
        args.power_per_gpu,
        args.min_saving,
        not args.no_replan,
        not args.no_shrink,
    )


def run_cases(grid: Grid, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every job mix x deadline x (non-)interruptible x forecast error; prints a line per case as it ends."""
    knobs = knobs_of(args)
    cases: list[dict[str, Any]] = []
    for mix in args.job_mix.split(","):
        sampled = load_jobs(args.trace, args.jobs, args.seed) if mix == "philly" else []
        for deadline in args.deadlines.split(","):
            if mix == "philly":
                placed = place_jobs(sampled, grid, args.year, deadline, args.seed)
            else:
                jobs = paper_jobs(grid, args.year, args.jobs, args.seed)
                with_deadlines = [(job, DEADLINES[deadline](grid, job.arrival, job.duration)) for job in jobs]
                placed = [(job, due) for job, due in with_deadlines if due + grid.step <= grid.end]
            for interruptible in (False, True):
                for error in (float(e) for e in args.errors.split(",")):
                    case_began = time.monotonic()
                    result = run_case(
                        grid, placed, error=error, interruptible=interruptible, seeds=args.seeds, knobs=knobs
                    )
                    case = {"deadline": deadline, "forecast_error": error, "interruptible": interruptible}
                    cases.append({**case, "job_mix": mix, "jobs": len(placed), **result})
                    print(
                        f"{mix:>6} {deadline:>12} error {error:4.2f} "
                        f"{'interruptible' if interruptible else 'one run      '}"
                        f"  aisched {100 * result['aisched_saving']:5.2f}%"
                        f"  lets-wait-awhile {100 * result['lets_wait_awhile_saving']:5.2f}%"
                        f"  misses {result['deadline_misses']}/{result['lets_wait_awhile_deadline_misses']}"
                        f"  ({time.monotonic() - case_began:.0f} s)",
                        flush=True,
                    )
    return cases


def inputs_of(args: argparse.Namespace) -> dict[str, Any]:
    """What the figures depend on, as the results file records it."""
    return {
        "carbon": args.carbon.name,
        "region": args.region,
        "trace": args.trace.name if args.trace else None,
        "year": args.year,
        "job_mix": args.job_mix,
        "jobs": args.jobs,
        "min_saving_fraction": args.min_saving,
        "replan": not args.no_replan,
        "shrink": not args.no_shrink,
        "seeds": args.seeds,
        "resume_overhead_minutes": args.resume_overhead_minutes,
    }


def check_job_mix(args: argparse.Namespace) -> None:
    """ValueError for a job mix or deadline this simulation does not know, or a philly mix without a trace."""
    unknown = set(args.job_mix.split(",")) - {"philly", "paper"}
    if unknown:
        raise ValueError(f"unknown job mix {', '.join(sorted(unknown))}: philly, paper or both")
    unknown = set(args.deadlines.split(",")) - set(DEADLINES)
    if unknown:
        raise ValueError(f"unknown deadline {', '.join(sorted(unknown))}: {', '.join(DEADLINES)}")
    if "philly" in args.job_mix.split(",") and args.trace is None:
        raise ValueError("the philly job mix needs --trace (the Philly trace CSV)")


def run(args: argparse.Namespace) -> int:
    try:
        check_job_mix(args)
        grid = load_grid(args.read_intensity, args)
        cases = run_cases(grid, args)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"inputs": inputs_of(args), "cases": cases}, indent=2) + "\n")
    return 0
