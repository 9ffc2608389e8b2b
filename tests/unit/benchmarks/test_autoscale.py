"""benchmarks/autoscale.py on a few hours of generated trace: it runs, writes the promised shape, and writes
the committed figures only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import autoscale, common

SHORT = ["--days", "0.25", "--large-scale", "0"]


def test_short_run_writes_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "autoscale.json"
    assert autoscale.main([*SHORT, "--output", str(out)]) == 0
    policies = json.loads(out.read_text())["policies"]
    assert set(policies) == {"aisched", "static_peak", "hpa_default"}
    assert policies["static_peak"]["within_target"] == 1.0
    for figures in policies.values():
        assert 0 <= figures["within_target"] <= 1
        assert figures["gpu_hours"] > 0
    # A quarter-day spans the night trough, so following demand must save GPUs.
    assert policies["aisched"]["gpu_hours"] < policies["static_peak"]["gpu_hours"]


def test_the_committed_figures_are_written_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    committed = tmp_path / "results"
    monkeypatch.setattr(common, "RESULTS_DIR", committed)

    assert autoscale.main(SHORT) == 0
    assert not committed.exists()

    assert autoscale.main([*SHORT, "--update-results"]) == 0
    assert "policies" in json.loads((committed / "autoscale.json").read_text())
