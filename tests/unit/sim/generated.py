"""Small inputs that tests of the simulators and benchmarks generate: spot trace, grid intensity, Philly trace."""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


def write_spot_trace(path: Path, availability: float, samples: int = 2000, **metadata: Any) -> Path:
    rng = random.Random(7)
    data, up = [], 1
    for _ in range(samples):
        # Outages and stretches of availability come in runs, as in the real traces.
        if rng.random() < (0.05 if up else 0.05 * availability / (1 - availability)):
            up = 1 - up
        data.append(up)
    path.write_text(json.dumps({"metadata": {"gap_seconds": 195, **metadata}, "data": data}))
    return path


def write_grid_intensity(path: Path) -> None:
    """Ten weeks of half hours: a daily swing and a weekly one, like a grid with solar and weekends."""
    start = datetime(2020, 1, 1, tzinfo=UTC)
    lines = ["Time,Carbon Intensity"]
    for i in range(70 * 48):
        t = start + timedelta(minutes=30 * i)
        hour = t.hour + t.minute / 60
        value = 220 + 80 * math.sin(2 * math.pi * (hour - 9) / 24) - 40 * (t.weekday() >= 5)
        lines.append(f"{t:%Y-%m-%d %H:%M:%S},{value:.2f}")
    path.write_text("\n".join(lines) + "\n")


def write_philly_trace(path: Path) -> None:
    rng = random.Random(3)
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(40):
        submitted = datetime(2017, 9, 4, tzinfo=UTC) + timedelta(hours=rng.uniform(0, 24 * 14))
        duration = rng.choice([30.0, 600.0, 1900.0, 7200.0, 30000.0, 100000.0])
        gpus = rng.choice([1, 1, 1, 2, 8])
        lines.append(f"{submitted:%Y-%m-%d %H:%M:%S},{duration},{gpus},{duration * gpus},c{i % 3}")
    path.write_text("\n".join(lines) + "\n")
