"""A tiny run of hack/bench/carbon.py on generated data: it runs, and its report has the promised shape."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "hack" / "bench" / "carbon.py"


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("carbon_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def write_grid(path: Path) -> None:
    """Ten weeks of half hours: a daily swing and a weekly one, like a grid with solar and weekends."""
    start = datetime(2020, 1, 1, tzinfo=UTC)
    lines = ["Time,Carbon Intensity"]
    for i in range(70 * 48):
        t = start + timedelta(minutes=30 * i)
        hour = t.hour + t.minute / 60
        value = 220 + 80 * math.sin(2 * math.pi * (hour - 9) / 24) - 40 * (t.weekday() >= 5)
        lines.append(f"{t:%Y-%m-%d %H:%M:%S},{value:.2f}")
    path.write_text("\n".join(lines) + "\n")


def write_trace(path: Path) -> None:
    rng = random.Random(3)
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for i in range(40):
        submitted = datetime(2017, 9, 4, tzinfo=UTC) + timedelta(hours=rng.uniform(0, 24 * 14))
        duration = rng.choice([30.0, 600.0, 1900.0, 7200.0, 30000.0, 100000.0])
        gpus = rng.choice([1, 1, 1, 2, 8])
        lines.append(f"{submitted:%Y-%m-%d %H:%M:%S},{duration},{gpus},{duration * gpus},c{i % 3}")
    path.write_text("\n".join(lines) + "\n")


def test_a_tiny_benchmark_run_reports_every_case(tmp_path: Path) -> None:
    write_grid(tmp_path / "ci.csv")
    write_trace(tmp_path / "trace.csv")
    out = tmp_path / "carbon.json"
    bench = load_bench()
    bench.main(
        [
            f"--carbon={tmp_path / 'ci.csv'}",
            f"--trace={tmp_path / 'trace.csv'}",
            "--jobs=25",
            "--seeds=1",
            "--errors=0,0.1",
            f"--output={out}",
        ]
    )
    report = json.loads(out.read_text())
    cases = report["cases"]
    assert len(cases) == 2 * 2 * 2 * 2  # job mixes x deadlines x (non-)interruptible x errors
    required = {"deadline", "forecast_error", "interruptible", "aisched_saving", "lets_wait_awhile_saving"}
    for case in cases:
        assert required | {"deadline_misses"} <= case.keys()
        assert case["deadline_misses"] == 0
        assert case["lets_wait_awhile_deadline_misses"] == 0
        assert -1 < case["lets_wait_awhile_saving"] < 1
        if case["forecast_error"] == 0:  # with a perfect forecast no plan emits more than running at once
            assert case["aisched_saving"] >= 0
            assert case["aisched_saving"] >= case["lets_wait_awhile_saving"] - 1e-9
