"""benchmarks/regions.py on generated data laid out as ../shared/data is: it runs, its report has the keys the
targets are read by, and a missing input is told in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import regions
from tests.unit.sim.generated import write_grid_intensity, write_philly_trace, write_spot_trace
from tests.unit.sim.test_regions import write_scaled_grid

KEYS = {"co2_g", "cost", "deadline_misses", "avg_jct_s"}


def write_shared_data(root: Path) -> Path:
    (root / "carbon").mkdir(parents=True)
    (root / "spot").mkdir()
    (root / "traces" / "philly").mkdir(parents=True)
    write_grid_intensity(root / "carbon" / "gb_ci.csv")
    write_scaled_grid(root / "carbon" / "gb_ci.csv", root / "carbon" / "fr_ci.csv", 0.25)
    write_philly_trace(root / "traces" / "philly" / "philly-2017-09-04_2017-10-20.csv")
    for _, _, zone in regions.ZONES:
        write_spot_trace(root / "spot" / f"aws-02-15-2023_{zone}_v100_1.json", 0.8, samples=8000)
    return root


def test_a_tiny_benchmark_run_reports_every_policy_and_variant(tmp_path: Path) -> None:
    data = write_shared_data(tmp_path / "data")
    out = tmp_path / "regions.json"
    assert regions.main([f"--data={data}", "--start=2020-01-06", f"--output={out}"]) == 0
    report = json.loads(out.read_text())
    assert report["baseline_at_arrival_co2_g"] > 0
    assert set(report["policies"]) == {"aisched", "time_only", "cheapest_first", "lowest_intensity", "first_to_admit"}
    assert all(figures.keys() >= KEYS for figures in report["policies"].values())
    assert set(report["variants"]) == set(regions.VARIANTS)
    assert set(report["against_targets"]) == {
        "carbon_saving_vs_time_only",
        "cost_vs_cheapest_first",
        "deadline_misses",
        "avg_jct_vs_first_to_admit",
    }
    assert report["variants"]["space_only"]["policies"]["aisched"]["co2_g"] > 0
    assert len(report["provenance"]["commit"] or "") in (0, 40)


def test_a_missing_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert regions.main([f"--data={tmp_path}"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and "no such file" in error and error.count("\n") == 1
