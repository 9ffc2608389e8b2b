"""`aisched simulate regions --region NAME=CARBON.csv,SPOT.json ... --trace PHILLY`: one queue over several regions."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aisched.policy.regions import RegionSettings
from aisched.sim.carbon.command import IntensityReader
from aisched.sim.carbon.grid import DEADLINES, Grid, View
from aisched.sim.options import positive
from aisched.sim.regions.engine import Costs
from aisched.sim.regions.figures import run_policies
from aisched.sim.regions.jobs import assign, load_philly
from aisched.sim.regions.policies import policies
from aisched.sim.regions.world import Region, check_regions
from aisched.sim.spot.traces import SpotTrace


@dataclass(frozen=True)
class RegionSpec:
    name: str
    carbon: Path
    spot: Path

    @classmethod
    def parse(cls, text: str) -> RegionSpec:
        name, sep, files = text.partition("=")
        carbon, comma, spot = files.partition(",")
        if not (sep and comma and name and carbon and spot):
            raise argparse.ArgumentTypeError(f"a region is NAME=CARBON.csv,SPOT.json (got {text!r})")
        return cls(name, Path(carbon), Path(spot))


def fraction(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise argparse.ArgumentTypeError(f"must be a fraction from 0 to 1 (got {text!r})")
    return value


def premium(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not (sep and name):
        raise argparse.ArgumentTypeError(f"a price premium is NAME=FRACTION (got {text!r})")
    share = float(value)
    if not (math.isfinite(share) and share > -1):
        raise argparse.ArgumentTypeError(f"a price premium is a fraction above -1 (got {value!r})")
    return name, share


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Everything but the input files: the jobs, the regions' capacity and prices, aisched's slack."""
    parser.add_argument("--start", default="2020-09-07", help="the first job lands in this week (a date)")
    parser.add_argument("--days", type=positive(float), help="keep only the first DAYS of submissions")
    parser.add_argument("--deadline", default="12h", choices=sorted(DEADLINES))
    parser.add_argument("--deferrable-share", type=fraction, default=1.0, help="the share of jobs with a deadline")
    parser.add_argument("--forecast-error", type=float, default=0.05, help="the paper's error model")
    parser.add_argument("--step-minutes", type=positive(int), default=60, help="the forecast's step (hourly)")
    parser.add_argument(
        "--gpus-per-region",
        type=positive(int),
        help="each region's GPUs; by default the most GPUs busy at once were every job run at arrival, split evenly",
    )
    parser.add_argument("--on-demand-price", type=float, default=3.06, help="$ per GPU-hour")
    parser.add_argument("--spot-price", type=float, default=1.02, help="$ per GPU-hour")
    parser.add_argument("--price-premium", type=premium, action="append", default=[], help="NAME=FRACTION, repeatable")
    parser.add_argument("--power-per-gpu", type=float, default=300.0, help="W")
    parser.add_argument("--checkpoint-minutes", type=positive(float), default=30.0)
    parser.add_argument("--restore-minutes", type=float, default=5.0)
    parser.add_argument("--data-move-cost", type=float, default=2.0, help="$ to move a job's data to another region")
    parser.add_argument("--cost-slack", type=float, default=0.0, help="aisched pays at most this much more for carbon")
    parser.add_argument(
        "--min-deferral-saving", type=fraction, default=0.25, help="aisched defers only when it saves this much"
    )
    parser.add_argument("--no-time-shift", action="store_true", help="aisched moves jobs in space only (ablation)")
    parser.add_argument("--seed", type=int, default=1)


def configure_parser(parser: argparse.ArgumentParser, read_intensity: IntensityReader) -> None:
    parser.add_argument("--region", type=RegionSpec.parse, action="append", required=True, help="NAME=CARBON,SPOT")
    parser.add_argument("--trace", type=Path, required=True, help="the Philly trace CSV")
    add_model_arguments(parser)
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    parser.set_defaults(handler=run, read_intensity=read_intensity)


def build_regions(
    specs: Sequence[RegionSpec], read_intensity: IntensityReader, args: argparse.Namespace, origin: float, gpus: int
) -> list[Region]:
    """The regions; regions on one grid share its forecast (one grid, one forecast), drawn once per grid."""
    step = timedelta(minutes=args.step_minutes)
    grids: dict[Path, tuple[Grid, View]] = {}
    premiums = dict(args.price_premium)
    unknown = set(premiums) - {s.name for s in specs}
    if unknown:
        raise ValueError(f"a price premium for no region: {', '.join(sorted(unknown))}")
    regions = []
    for spec in specs:
        if spec.carbon not in grids:
            grid = Grid.from_forecast(read_intensity(spec.carbon, spec.name, step=step))
            grids[spec.carbon] = (grid, View(grid, grid.noisy(args.forecast_error, args.seed + len(grids))))
        grid, view = grids[spec.carbon]
        factor = 1 + premiums.get(spec.name, 0.0)
        spot = SpotTrace.load(spec.spot, zone=spec.name)
        regions.append(
            Region.build(
                spec.name,
                grid,
                view,
                spot,
                spot_origin=origin,
                gpus=gpus,
                on_demand_price=args.on_demand_price * factor,
                spot_price=args.spot_price * factor,
            )
        )
    check_regions(regions)
    return regions


def peak_busy_gpus(jobs: Sequence[tuple[float, float, int]]) -> int:
    """The most GPUs busy at once, were every job run at its arrival."""
    changes = sorted([(a, g) for a, _, g in jobs] + [(a + d, -g) for a, d, g in jobs], key=lambda c: (c[0], c[1]))
    busy = peak = 0
    for _, delta in changes:
        busy += delta
        peak = max(peak, busy)
    return peak


def simulate(args: argparse.Namespace, read_intensity: IntensityReader) -> dict[str, Any]:
    """Load everything, run every policy, and return the figures with what they depend on."""
    specs: list[RegionSpec] = args.region
    first = read_intensity(specs[0].carbon, specs[0].name, step=timedelta(minutes=args.step_minutes))
    home_grid = Grid.from_forecast(first)
    start = datetime.fromisoformat(args.start).replace(tzinfo=UTC)
    raw = load_philly(args.trace, home_grid, start, args.days)
    biggest = max(j[2] for j in raw)
    gpus = args.gpus_per_region or max(biggest, math.ceil(peak_busy_gpus(raw) / len(specs)))
    origin = min(j[0] for j in raw)
    regions = build_regions(specs, read_intensity, args, origin, gpus)
    jobs = assign(
        raw,
        [r.name for r in regions],
        home_grid,
        deferrable_share=args.deferrable_share,
        deadline=args.deadline,
        seed=args.seed,
    )
    costs = Costs(args.power_per_gpu, args.checkpoint_minutes * 60, args.restore_minutes * 60, args.data_move_cost)
    settings = RegionSettings(
        cost_slack=args.cost_slack,
        forecast_error=args.forecast_error,
        shift_in_time=not args.no_time_shift,
        min_deferral_saving=args.min_deferral_saving,
    )
    figures = run_policies(regions, jobs, policies(settings), costs)
    return {"inputs": inputs_of(args, regions, len(jobs)), **figures}


def inputs_of(args: argparse.Namespace, regions: Sequence[Region], jobs: int) -> dict[str, Any]:
    return {
        "regions": {
            r.name: {
                "carbon": next(s.carbon.name for s in args.region if s.name == r.name),
                "spot": next(s.spot.name for s in args.region if s.name == r.name),
                "spot_availability": round(r.spot.availability, 4),
                "gpus": r.gpus,
                "on_demand_price": round(r.on_demand_price, 4),
                "spot_price": round(r.spot_price, 4),
            }
            for r in regions
        },
        "trace": args.trace.name,
        "jobs": jobs,
        "start": args.start,
        "days": args.days,
        "deadline": args.deadline,
        "deferrable_share": args.deferrable_share,
        "forecast_error": args.forecast_error,
        "step_minutes": args.step_minutes,
        "power_per_gpu_w": args.power_per_gpu,
        "checkpoint_minutes": args.checkpoint_minutes,
        "restore_minutes": args.restore_minutes,
        "data_move_cost": args.data_move_cost,
        "cost_slack": args.cost_slack,
        "time_shift": not args.no_time_shift,
        "min_deferral_saving": args.min_deferral_saving,
        "seed": args.seed,
    }


def print_table(figures: dict[str, Any]) -> None:
    baseline = figures["baseline_at_arrival_co2_g"]
    print(f"at arrival, home region: {baseline / 1e6:.2f} t CO2eq")
    for name, f in figures["policies"].items():
        print(
            f"{name:>16}  {f['co2_g'] / 1e6:8.2f} t  saved {100 * f['co2_saving']:5.1f}%  ${f['cost']:>11,.0f}"
            f"  misses {f['deadline_misses']:>5}  avg JCT {f['avg_jct_s'] / 3600:6.2f} h"
            f"  spot {100 * f['spot_gpu_share']:4.1f}%  away {f['jobs_away_from_home']}",
            flush=True,
        )


def run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    try:
        figures = simulate(args, args.read_intensity)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print_table(figures)
    print(f"({time.monotonic() - began:.0f} s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0
