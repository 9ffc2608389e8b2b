"""benchmarks.common: what every results file carries."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import common


def test_every_file_written_names_the_code_that_produced_it(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    common.write_figures({"ratio": 1.5}, out, update_results=False, results_name="unused.json")
    written = json.loads(out.read_text())
    assert written["ratio"] == 1.5
    assert set(written["provenance"]) >= {"commit", "dirty", "dirty_paths", "measured_code_sha256"}
    assert len(written["provenance"]["measured_code_sha256"]) == 64


def test_a_benchmarks_own_provenance_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    own = {"commit": "abc", "dirty": False, "dirty_paths": [], "measured_code_sha256": "0" * 64}
    common.write_figures({"provenance": own}, out, update_results=False, results_name="unused.json")
    assert json.loads(out.read_text())["provenance"] == own
