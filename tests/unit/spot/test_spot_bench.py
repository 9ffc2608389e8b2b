"""A tiny run of hack/bench/spot.py on a generated trace: the benchmark works and keeps its shape."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).parents[3] / "hack" / "bench" / "spot.py"
POLICIES = {"aisched", "on_demand", "greedy_spot", "uniform_progress"}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spot_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["spot_bench"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def generated_trace(path: Path, availability: float, samples: int = 2000) -> Path:
    rng = random.Random(7)
    data, up = [], 1
    for _ in range(samples):
        # Outages and stretches of availability come in runs, as in the real traces.
        if rng.random() < (0.05 if up else 0.05 * availability / (1 - availability)):
            up = 1 - up
        data.append(up)
    path.write_text(json.dumps({"metadata": {"gap_seconds": 195}, "data": data}))
    return path


def test_a_small_run_writes_every_policy_with_no_missed_deadline(bench: ModuleType, tmp_path: Path) -> None:
    trace = generated_trace(tmp_path / "aws-02-15-2023_test-zone_v100_1.json", availability=0.85)
    output = tmp_path / "spot.json"
    arguments = ["--traces", str(trace), "--durations-hours", "2,6", "--deadline-factors", "1.5,2.5"]
    assert bench.main([*arguments, "--starts", "3", "--output", str(output)]) == 0

    results = json.loads(output.read_text())
    for scenario in (results, results["without_notice_checkpoint"]):
        assert set(scenario["policies"]) == POLICIES
        assert scenario["policies"]["on_demand"]["cost_vs_on_demand"] == 1.0
        for name, row in scenario["policies"].items():
            assert row["deadline_misses"] == 0, name
            assert row["cost_vs_on_demand"] >= scenario["clairvoyant_lower_bound_cost_vs_on_demand"], name
        assert scenario["policies"]["aisched"]["cost_vs_on_demand"] < 0.8
        assert set(scenario["per_trace"]) == {"test-zone"}
    assert results["without_notice_checkpoint"]["policies"]["aisched"]["lost_work_hours"] > 0
    assert results["policies"]["aisched"]["lost_work_hours"] == 0


def test_prefix_history_counts_losses_of_spot_and_time_with_it(bench: ModuleType) -> None:
    trace = bench.SpotTrace.build("z", 100.0, [1, 1, 0, 1, 0, 0, 1])
    history = trace.history_before(6)
    assert (history.interruptions, history.exposure_s) == (2.0, 300.0)
