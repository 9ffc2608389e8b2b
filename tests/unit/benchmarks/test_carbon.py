"""benchmarks/carbon.py on generated data: it runs, its report has the promised shape, the paper's figures
are those of their region, and a missing input is told in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import carbon
from tests.unit.sim.generated import write_grid_intensity, write_philly_trace


def test_a_tiny_benchmark_run_reports_every_case(tmp_path: Path) -> None:
    write_grid_intensity(tmp_path / "ci.csv")
    write_philly_trace(tmp_path / "trace.csv")
    out = tmp_path / "carbon.json"
    code = carbon.main(
        [
            f"--carbon={tmp_path / 'ci.csv'}",
            f"--trace={tmp_path / 'trace.csv'}",
            "--jobs=25",
            "--seeds=1",
            "--errors=0,0.1",
            f"--output={out}",
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["reference"]["lets_wait_awhile_paper"]["region"] == "GB"
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


def test_another_regions_run_is_not_compared_with_the_papers_gb_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_grid_intensity(tmp_path / "ci.csv")
    out = tmp_path / "carbon.json"
    arguments = ["--job-mix=paper", "--jobs=5", "--errors=0", "--deadlines=12h", "--region=DE"]
    assert carbon.main([f"--carbon={tmp_path / 'ci.csv'}", *arguments, f"--output={out}"]) == 0
    assert "lets_wait_awhile_paper" not in json.loads(out.read_text())["reference"]
    assert "vs paper" not in capsys.readouterr().out


def test_a_missing_input_is_one_line_naming_the_file_and_its_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.csv"
    assert carbon.main([f"--carbon={missing}", f"--output={tmp_path / 'out.json'}"]) == 2
    error = capsys.readouterr().err
    assert error == f"error: {missing}: no such file (set it with --carbon)\n"
    assert not (tmp_path / "out.json").exists()
