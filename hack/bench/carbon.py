"""Carbon-aware deferral benchmark: aisched's planner against "Let's Wait Awhile" on real grid data.

Data (paths are arguments; defaults under ../shared/data):
- carbon: GB grid carbon intensity every 30 minutes (the Let's Wait Awhile data set;
  from 2020-10-31 on it has 15-minute readings, of which the paper, and this benchmark,
  keep those on the half hour); jobs arrive during one calendar year of it (`--year`,
  2020 as in that paper).
- job mix `philly` (`--trace`): `--jobs` jobs sampled (seeded, without replacement) from
  the Philly trace, keeping each job's duration, GPU count, weekday and time of day of
  submission. Jobs shorter than a minute (failed launches) are left out. Each job is
  put in a week of the carbon year drawn uniformly at random (among the weeks where its
  run and its deadline fit in the data), on the same weekday and time of day, rounded
  down to the half hour (the data's resolution; the paper's jobs also arrive on half
  hours). Philly's times are taken as UTC wall-clock times, like the carbon data.
- job mix `paper`: the paper's ML jobs regenerated from its description (durations
  uniform over 4-90 h in half hours, one GPU, submitted uniformly over the workdays of
  the year between 09:00 and 17:00), to check the reimplementation against its figures.

Deadlines:
- "12h": finish at most 12 hours later than starting at once would (arrival + duration + 12 h).
- "next_workday", the paper's definition as its repository's simulator applies it: a job
  whose immediate run would end on a workday between 09:00 and 17:00 must end then (it
  is awaited); one that would end earlier in the morning may end at 09:00; one that
  would end in an evening may end at 09:00 the next day (so Saturday 09:00 after a
  Friday evening), and one ending at a weekend at 09:00 on Monday.

Forecast error, the paper's model: the forecast of every half hour is the actual value
plus Gaussian noise with a standard deviation of `error` times the year's mean intensity,
drawn once per run (`--seeds` runs, averaged); the half hour a decision is made in is
known exactly. Both strategies see the same noisy forecast.

Strategies (a job draws the same power while it runs, whatever the strategy):
- immediate: start at arrival (the baseline every saving is measured against);
- lets_wait_awhile, reimplemented from the paper: at arrival, with whole half-hour steps
  (n = ceil(duration / 30 min)) and a forecast up to the deadline, a job that cannot be
  interrupted starts at the step whose next n steps have the lowest mean forecast; one
  that can be interrupted runs in the n steps with the lowest forecast. Decided once.
- aisched: aisched.policy.carbon.plan_start, exact in continuous time (a run may start
  so that it ends on a step boundary, and the last piece of a split run is priced for
  the time it really runs), told the forecast's error (`forecast_error`, so it shrinks
  forecast extremes by their noise share). It re-plans when the planned start arrives,
  as the operator does on every resync, with the newer forecast (that half hour's
  actual value); an interruptible job re-plans at each chunk's start and end with the
  work still left. `--no-replan` and `--no-shrink` switch those off (ablations).
  With `--resume-overhead-minutes` each resumed chunk first spends that long
  restoring a checkpoint (drawing power, doing no work) for both strategies; aisched
  plans for it, Let's Wait Awhile (which has no such notion) runs over when its steps
  are not enough.

Savings are fractions of the emissions of running every job at once, weighted by energy
(GPUs x duration), so long multi-GPU jobs count for what they emit; `mean_job_saving`
is the unweighted mean over jobs and `by_duration` splits the weighted saving by job
length. Deadline misses count job runs that ended after their deadline, over all seeds.

Reference: the paper's repository reports, for ML jobs (4-90 h, uniform) on this GB data
with 5% error and the next-workday deadline, about 6.6% (not interruptible) and 9.0%
(interruptible) saved.

Usage: .venv/bin/python hack/bench/carbon.py [--job-mix philly,paper] [--jobs 3387] [--seeds 3] ...
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aisched.policy.carbon import Forecast, RunChunk, plan_start
from aisched.sources.carbon import read_intensity_csv

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA = REPO_ROOT.parent / "shared" / "data"
HOUR = 3600.0
DAY = 24 * HOUR
WEEK = 7 * DAY
EPS = 1e-3
# The paper's savings for ML jobs on GB data (5% error, next workday), read off its chart.
PAPER_SAVING = {False: 0.066, True: 0.09}
PAPER_CASE = ("next_workday", 0.05)
TARGET_FACTOR = 1.5
BUCKETS = (("<1h", 0.0, HOUR), ("1h-4h", HOUR, 4 * HOUR), ("4h-1d", 4 * HOUR, DAY), (">=1d", DAY, math.inf))


@dataclass(frozen=True)
class Grid:
    """The actual intensity, in seconds from its first half hour."""

    region: str
    start: datetime
    step: float
    actual: list[float]
    prefix: list[float]

    @classmethod
    def load(cls, path: Path, region: str, step: timedelta) -> Grid:
        fc = read_intensity_csv(path, region, step=step)
        prefix = [0.0]
        for value in fc.values:
            prefix.append(prefix[-1] + value * fc.step_seconds)
        return cls(region, fc.start, fc.step_seconds, list(fc.values), prefix)

    @property
    def end(self) -> float:
        return self.step * len(self.actual)

    def cumulative(self, x: float) -> float:
        i = min(len(self.actual) - 1, int(x // self.step))
        return self.prefix[i] + self.actual[i] * (x - i * self.step)

    def cost(self, runs: Sequence[tuple[float, float]]) -> float:
        """Actual intensity integrated over the runs (g/kWh * s)."""
        return sum(self.cumulative(b) - self.cumulative(a) for a, b in runs)

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    def offset(self, when: datetime) -> float:
        return (when - self.start).total_seconds()

    def noisy(self, error: float, seed: int) -> list[float]:
        if error == 0:
            return self.actual
        rng = random.Random(seed)
        sd = error * sum(self.actual) / len(self.actual)
        return [max(0.0, v + rng.gauss(0.0, sd)) for v in self.actual]


@dataclass(frozen=True)
class Job:
    arrival: float  # seconds from the grid start, on a half hour
    duration: float
    gpus: int


@dataclass
class View:
    """What a strategy knows at a decision: the actual value now, the forecast after."""

    grid: Grid
    forecast_values: list[float]

    def values(self, first: int, last: int) -> list[float]:
        return [self.grid.actual[first], *self.forecast_values[first + 1 : last]]

    def forecast(self, t: float, until: float) -> Forecast:
        first = int(t // self.grid.step)
        last = min(len(self.grid.actual), math.ceil(until / self.grid.step) + 1)
        start = self.grid.at(first * self.grid.step)
        return Forecast(self.grid.region, start, timedelta(seconds=self.grid.step), tuple(self.values(first, last)))


def next_workday_deadline(grid: Grid, arrival: float, duration: float) -> float:
    """The paper's rule, applied to the time the run would end if started at once."""
    finish = grid.at(arrival + duration)
    hour = finish.hour + finish.minute / 60 + finish.second / 3600
    nine = finish.replace(hour=9, minute=0, second=0, microsecond=0)
    if finish.weekday() == 5:  # Saturday: Monday morning
        return grid.offset(nine + timedelta(days=2))
    if finish.weekday() == 6 or hour > 17:  # Sunday, or an evening (a Friday one: Saturday 09:00)
        return grid.offset(nine + timedelta(days=1))
    if hour < 9:
        return grid.offset(nine)
    return arrival + duration  # a workday between 09:00 and 17:00: the result is awaited


DEADLINES: dict[str, Callable[[Grid, float, float], float]] = {
    "12h": lambda grid, arrival, duration: arrival + duration + 12 * HOUR,
    "next_workday": next_workday_deadline,
}


def load_jobs(trace: Path, count: int, seed: int) -> list[tuple[int, float, float, int]]:
    """(weekday, seconds into the day, duration, GPUs) of `count` sampled Philly jobs."""
    rows = []
    with trace.open(newline="") as handle:
        for row in csv.DictReader(handle):
            duration = float(row["duration"])
            if duration < 60:
                continue
            submitted = datetime.fromisoformat(row["timestamp"])
            of_day = submitted.hour * HOUR + submitted.minute * 60 + submitted.second
            rows.append((submitted.weekday(), of_day, duration, int(row["num_gpus"])))
    rng = random.Random(seed)
    return rng.sample(rows, min(count, len(rows)))


def paper_jobs(grid: Grid, year: int, count: int, seed: int) -> list[Job]:
    """The paper's ML job mix, regenerated from its description: 4-90 h in half hours, one
    GPU, submitted uniformly over the workdays of the year between 09:00 and 17:00."""
    rng = random.Random(seed)
    days = [d for d in range(366) if (datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=d)).year == year]
    workdays = [d for d in days if (datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=d)).weekday() < 5]
    base = grid.offset(datetime(year, 1, 1, tzinfo=UTC))
    jobs = []
    for _ in range(count):
        arrival = base + rng.choice(workdays) * DAY + 9 * HOUR + rng.randrange(16) * grid.step
        jobs.append(Job(arrival, (8 + rng.randrange(172)) * grid.step, 1))
    return sorted(jobs, key=lambda job: job.arrival)


def place_jobs(
    sampled: Sequence[tuple[int, float, float, int]], grid: Grid, year: int, deadline: str, seed: int
) -> list[tuple[Job, float]]:
    """Each job in a random week of the year where its deadline still fits in the data."""
    rng = random.Random(seed)
    first_monday = datetime(year, 1, 1, tzinfo=UTC)
    while first_monday.weekday() != 0:
        first_monday += timedelta(days=1)
    base = grid.offset(first_monday)
    weeks = int((grid.offset(datetime(year + 1, 1, 1, tzinfo=UTC)) - base) // WEEK)
    placed = []
    for weekday, of_day, duration, gpus in sampled:
        arrival_of_week = weekday * DAY + math.floor(of_day / grid.step) * grid.step
        fits = [
            w
            for w in range(weeks)
            if DEADLINES[deadline](grid, base + w * WEEK + arrival_of_week, duration) + grid.step <= grid.end
        ]
        if not fits:
            continue
        arrival = base + rng.choice(fits) * WEEK + arrival_of_week
        placed.append((Job(arrival, duration, gpus), DEADLINES[deadline](grid, arrival, duration)))
    return placed


Runs = list[tuple[float, float]]


def lets_wait_awhile(view: View, job: Job, deadline: float, interruptible: bool, overhead: float) -> Runs:
    step = view.grid.step
    first = int(job.arrival // step)
    n = math.ceil(job.duration / step - 1e-9)
    whole_steps = int((deadline - job.arrival + EPS) // step)
    if interruptible:
        if whole_steps < n:
            return [(job.arrival, job.arrival + job.duration)]
        values = view.values(first, first + whole_steps)
        chosen = sorted(sorted(range(whole_steps), key=lambda k: values[k])[:n])
        return run_steps(
            [(job.arrival + k * step, job.arrival + (k + 1) * step) for k in chosen], job.duration, overhead
        )
    latest = int((deadline - job.duration - job.arrival + EPS) // step)
    values = view.values(first, first + latest + n)
    window = sum(values[:n])
    best_k, best = 0, window
    for k in range(1, latest + 1):
        window += values[k + n - 1] - values[k - 1]
        if window < best - 1e-9:
            best_k, best = k, window
    start = job.arrival + best_k * step
    return [(start, start + job.duration)]


def run_steps(steps: Sequence[tuple[float, float]], work: float, overhead: float) -> Runs:
    """Run through reserved steps in time order; a resumed chunk first restores; over-run if short."""
    runs: Runs = []
    left = work
    for a, b in steps:
        resumed = bool(runs) and abs(runs[-1][1] - a) > EPS
        useful = (b - a) - (overhead if resumed else 0.0)
        if useful <= 0:
            continue
        end = b if useful < left else a + (overhead if resumed else 0.0) + left
        left -= min(useful, left)
        runs = [*runs[:-1], (runs[-1][0], end)] if runs and not resumed else [*runs, (a, end)]
        if left <= EPS:
            return runs
    tail = runs[-1][1] if runs else steps[0][0]
    return [*runs[:-1], (runs[-1][0], tail + left)] if runs else [(tail, tail + left)]


@dataclass(frozen=True)
class Knobs:
    overhead: float
    power_w: float
    min_saving: float
    replan: bool
    shrink: bool


def aisched(view: View, job: Job, deadline: float, interruptible: bool, knobs: Knobs, error: float) -> Runs:
    grid = view.grid
    overhead = knobs.overhead
    t, left = job.arrival, job.duration
    runs: Runs = []
    for _ in range(10_000):  # re-plans; bounded because every one either runs or waits for a later start
        running = bool(runs) and runs[-1][1] >= t - EPS
        paused = bool(runs) and not running
        plan = plan_start(
            view.forecast(t, max(deadline, t + left + overhead)),
            grid.at(t),
            timedelta(seconds=left),
            power_w=knobs.power_w * job.gpus,
            deadline=grid.at(deadline),
            interruptible=interruptible,
            min_chunk=timedelta(seconds=grid.step),
            chunk_overhead=timedelta(seconds=overhead),
            min_saving_fraction=knobs.min_saving,
            forecast_error=error if knobs.shrink else 0.0,
            running=running,
            paused=paused,
        )
        if not knobs.replan:
            return follow(plan.chunks, grid, left, overhead)
        first = plan.chunks[0]
        start, end = grid.offset(first.start), grid.offset(first.end)
        if start > t + EPS:
            t = start  # wait, then look again with what is known then
            continue
        left -= (end - t) - (overhead if paused else 0.0)
        runs = [*runs[:-1], (runs[-1][0], end)] if running else [*runs, (t, end)]
        t = end
        if left <= EPS:
            return runs
    raise RuntimeError("re-planning did not converge")


def follow(chunks: Sequence[RunChunk], grid: Grid, work: float, overhead: float) -> Runs:
    """Run a plan as made, without looking again."""
    return run_steps([(grid.offset(c.start), grid.offset(c.end)) for c in chunks], work, overhead)


@dataclass
class Tally:
    baseline: float = 0.0
    emitted: float = 0.0
    misses: int = 0
    job_savings: float = 0.0
    jobs: int = 0

    def add(self, baseline: float, emitted: float, missed: bool) -> None:
        self.baseline += baseline
        self.emitted += emitted
        self.misses += missed
        self.job_savings += 1 - emitted / baseline if baseline > 0 else 0.0
        self.jobs += 1

    @property
    def saving(self) -> float:
        return 1 - self.emitted / self.baseline if self.baseline > 0 else 0.0


def bucket_of(duration: float) -> str:
    return next(name for name, lo, hi in BUCKETS if lo <= duration < hi)


def run_case(
    grid: Grid,
    placed: Sequence[tuple[Job, float]],
    error: float,
    interruptible: bool,
    seeds: int,
    knobs: Knobs,
) -> dict[str, Any]:
    tallies = {name: {"all": Tally(), **{b[0]: Tally() for b in BUCKETS}} for name in ("aisched", "lwa")}
    for seed in range(seeds if error else 1):
        view = View(grid, grid.noisy(error, seed))
        for job, deadline in placed:
            baseline = grid.cost([(job.arrival, job.arrival + job.duration)]) * job.gpus
            outcomes = {
                "aisched": aisched(view, job, deadline, interruptible, knobs, error),
                "lwa": lets_wait_awhile(view, job, deadline, interruptible, knobs.overhead),
            }
            for name, runs in outcomes.items():
                missed = runs[-1][1] > deadline + 1.0
                for key in ("all", bucket_of(job.duration)):
                    tallies[name][key].add(baseline, grid.cost(runs) * job.gpus, missed)
    ours, theirs = tallies["aisched"], tallies["lwa"]
    return {
        "aisched_saving": round(ours["all"].saving, 5),
        "lets_wait_awhile_saving": round(theirs["all"].saving, 5),
        "deadline_misses": ours["all"].misses,
        "lets_wait_awhile_deadline_misses": theirs["all"].misses,
        "aisched_mean_job_saving": round(ours["all"].job_savings / max(1, ours["all"].jobs), 5),
        "lets_wait_awhile_mean_job_saving": round(theirs["all"].job_savings / max(1, theirs["all"].jobs), 5),
        "by_duration": {
            name: {
                "jobs": ours[name].jobs // max(1, seeds if error else 1),
                "aisched_saving": round(ours[name].saving, 5),
                "lets_wait_awhile_saving": round(theirs[name].saving, 5),
            }
            for name, _, _ in BUCKETS
        },
        "runs": seeds if error else 1,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--carbon", type=Path, default=DATA / "carbon" / "gb_ci.csv")
    parser.add_argument("--region", default="GB")
    parser.add_argument(
        "--step-minutes",
        type=int,
        default=30,
        help="the data's step; finer readings are thinned to it, as the paper did",
    )
    parser.add_argument("--trace", type=Path, default=DATA / "traces" / "philly" / "philly-2017-09-04_2017-10-20.csv")
    parser.add_argument("--year", type=int, default=2020)
    parser.add_argument("--jobs", type=int, default=3387, help="jobs sampled from the trace (the paper used 3387)")
    parser.add_argument("--seeds", type=int, default=3, help="forecast-noise runs per case with error")
    parser.add_argument("--errors", default="0,0.05,0.1")
    parser.add_argument("--deadlines", default="12h,next_workday")
    parser.add_argument("--resume-overhead-minutes", type=float, default=0.0)
    parser.add_argument("--power-per-gpu", type=float, default=300.0, help="W; scales grams, not fractions")
    parser.add_argument("--job-mix", default="philly,paper", help="philly, paper, or both (comma-separated)")
    parser.add_argument("--min-saving", type=float, default=0.0, help="aisched's min_saving_fraction")
    parser.add_argument("--no-replan", action="store_true", help="aisched follows its first plan")
    parser.add_argument("--no-shrink", action="store_true", help="aisched is not told the forecast error")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "hack" / "bench" / "results" / "carbon.json")
    args = parser.parse_args(argv)

    began = time.monotonic()
    grid = Grid.load(args.carbon, args.region, timedelta(minutes=args.step_minutes))
    knobs = Knobs(
        args.resume_overhead_minutes * 60,
        args.power_per_gpu,
        args.min_saving,
        not args.no_replan,
        not args.no_shrink,
    )
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
                    result = run_case(grid, placed, error, interruptible, args.seeds, knobs)
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
    report = {
        "benchmark": "carbon-aware deferral (see hack/bench/carbon.py for the method)",
        "inputs": {
            "carbon": args.carbon.name,
            "region": args.region,
            "trace": args.trace.name,
            "year": args.year,
            "job_mix": args.job_mix,
            "jobs": args.jobs,
            "min_saving_fraction": args.min_saving,
            "replan": not args.no_replan,
            "shrink": not args.no_shrink,
            "seeds": args.seeds,
            "resume_overhead_minutes": args.resume_overhead_minutes,
        },
        "reference": {
            "lets_wait_awhile_paper": {
                "deadline": PAPER_CASE[0],
                "forecast_error": PAPER_CASE[1],
                "non_interruptible_saving": PAPER_SAVING[False],
                "interruptible_saving": PAPER_SAVING[True],
            },
            "target_factor": TARGET_FACTOR,
        },
        "cases": cases,
        "elapsed_seconds": round(time.monotonic() - began, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    for case in cases:
        if (case["deadline"], case["forecast_error"]) == PAPER_CASE:
            mix = case["job_mix"]
            paper = PAPER_SAVING[case["interruptible"]]
            print(
                f"vs paper, {mix} mix ({'interruptible' if case['interruptible'] else 'one run'}): aisched "
                f"{case['aisched_saving'] / paper:.2f}x of {100 * paper:.1f}% (target {TARGET_FACTOR}x), "
                f"lets-wait-awhile here {case['lets_wait_awhile_saving'] / paper:.2f}x"
            )
    print(f"wrote {args.output}")
    return report


if __name__ == "__main__":
    main()
