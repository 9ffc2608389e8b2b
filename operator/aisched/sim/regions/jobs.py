"""The jobs: the Philly trace by arrival, moved onto the carbon year, each with a home region and maybe a deadline."""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aisched.sim.carbon.grid import DEADLINES, Grid


@dataclass(frozen=True)
class RegionalJob:
    """A job as submitted to the manager: seconds on the grid's clock. `home` is the region its data lives in;
    `deadline` None: it may not be deferred."""

    index: int
    arrival: float
    duration: float
    gpus: int
    home: str
    deadline: float | None


def load_philly(trace: Path, grid: Grid, start: datetime, days: float | None) -> list[tuple[float, float, int]]:
    """(arrival, duration, GPUs) of the trace's jobs in submit order, moved by whole weeks so that the first
    lands in the week of START on the same weekday and time of day; jobs shorter than a minute (failed
    launches) are left out, and with DAYS only the first DAYS of submissions are kept."""
    rows: list[tuple[datetime, float, int]] = []
    with trace.open(newline="") as handle:
        for row in csv.DictReader(handle):
            duration = float(row["duration"])
            if duration < 60:
                continue
            submitted = datetime.fromisoformat(row["timestamp"]).replace(tzinfo=UTC)
            rows.append((submitted, duration, int(row["num_gpus"])))
    if not rows:
        raise ValueError(f"{trace}: no jobs of a minute or more")
    rows.sort(key=lambda r: r[0])
    first = rows[0][0]
    weeks = round((start - first).total_seconds() / timedelta(weeks=1).total_seconds())
    shift = timedelta(weeks=weeks)
    kept = [r for r in rows if days is None or r[0] - first < timedelta(days=days)]
    jobs = [(grid.offset(submitted + shift), duration, gpus) for submitted, duration, gpus in kept]
    late = [j for j in jobs if j[0] < 0 or j[0] + j[1] > grid.end]
    if late:
        raise ValueError(f"{len(late)} jobs would run outside the carbon data; choose another --start")
    return jobs


def assign(
    jobs: Sequence[tuple[float, float, int]],
    regions: Sequence[str],
    grid: Grid,
    *,
    deferrable_share: float,
    deadline: str,
    seed: int,
) -> list[RegionalJob]:
    """Each job a home region (uniformly, seeded: the trace does not say where data lives) and, for the
    DEFERRABLE_SHARE of jobs drawn at random, the carbon benchmark's deadline rule DEADLINE."""
    rng = random.Random(seed)
    rule = DEADLINES[deadline]
    placed = []
    for index, (arrival, duration, gpus) in enumerate(jobs):
        home = rng.choice(list(regions))
        deferrable = rng.random() < deferrable_share
        due = rule(grid, arrival, duration) if deferrable else None
        placed.append(RegionalJob(index, arrival, duration, gpus, home, due))
    return placed
