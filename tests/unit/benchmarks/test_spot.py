"""benchmarks/spot.py on a generated trace: the benchmark works, keeps its shape, and names zones by argument."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import spot
from tests.unit.sim.generated import write_spot_trace

POLICIES = {"aisched", "on_demand", "greedy_spot", "uniform_progress"}
SMALL = ["--durations-hours", "2,6", "--deadline-factors", "1.5,2.5", "--starts", "3"]


def test_a_small_run_told_true_durations_writes_every_policy_with_no_missed_deadline(tmp_path: Path) -> None:
    # In the publisher's own naming: the file name says nothing the reader may rely on.
    trace = write_spot_trace(tmp_path / "us-east-2a_v100_1.json", availability=0.85)
    output = tmp_path / "spot.json"
    told = ["--estimate-sigma", "0"]
    assert spot.main(["--traces", str(trace), "--zone", "test-zone", *SMALL, *told, "--output", str(output)]) == 0

    results = json.loads(output.read_text())
    assert results["knew"]["aisched"]["durations"] == "truth"
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


def test_every_policy_reads_the_same_estimate_and_says_so(tmp_path: Path) -> None:
    trace = write_spot_trace(tmp_path / "us-east-2a_v100_1.json", availability=0.85)
    output = tmp_path / "spot.json"
    assert spot.main(["--traces", str(trace), "--zone", "z", *SMALL, "--output", str(output)]) == 0
    results = json.loads(output.read_text())
    assert results["parameters"]["duration_knowledge"] == "estimate"
    assert {results["knew"][p]["durations"] for p in ("aisched", "greedy_spot", "uniform_progress")} == {"estimate"}
    assert results["knew"]["clairvoyant_lower_bound"]["durations"] == "truth"
    assert results["assumptions"]["spot_price_ratio"] == round(1 / 3, 4)
    assert "commit" in results["provenance"]
    # Short estimates can make any deadline policy late; the truth, beside it, misses none.
    truth = results["with_true_durations"]["policies"]
    assert all(row["deadline_misses"] == 0 for row in truth.values())


def test_traces_without_a_zone_are_named_by_their_files(tmp_path: Path) -> None:
    traces = [write_spot_trace(tmp_path / f"pool-{i}.json", availability=0.85) for i in range(3)]
    output = tmp_path / "spot.json"
    argv = ["--traces", *map(str, traces), "--zone", "first", *SMALL, "--output", str(output)]
    assert spot.main(argv) == 0
    assert set(json.loads(output.read_text())["per_trace"]) == {"first", "pool-1", "pool-2"}


def test_a_missing_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert spot.main(["--data-dir", str(tmp_path), *SMALL]) == 2
    first_default = tmp_path / spot.DEFAULT_TRACES[0][1]
    assert capsys.readouterr().err == f"error: {first_default}: no such file (set it with --traces or --data-dir)\n"
