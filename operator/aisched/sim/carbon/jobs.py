"""The job mixes: jobs sampled from the Philly trace and placed in the carbon year, or the paper's ML jobs."""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aisched.sim.carbon.grid import DAY, DEADLINES, HOUR, WEEK, Grid, Job


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
