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


# Results written before write_figures stamped every file, each not yet rerun, with why. A file rerun
# leaves this list (the test below fails until it does); a new file without provenance fails at once.
NOT_YET_RERUN = {
    "scale.json": "10,000 TrainingJobs on 5,040 KWOK nodes: most of an hour on the 2-core CI machine",
    "scale_own_cpu.json": "the same run with the operator on a CPU of its own",
    "e2e_scale.json": "the large local cluster (1,008 KWOK nodes), as root",
}


def test_every_committed_results_file_names_the_commit_that_produced_it() -> None:
    results = sorted((common.REPO_ROOT / "benchmarks" / "results").glob("*.json"))
    assert results
    for path in results:
        provenance = json.loads(path.read_text()).get("provenance")
        if path.name in NOT_YET_RERUN:
            assert provenance is None, f"{path.name} was rerun: take it off NOT_YET_RERUN"
            continue
        assert isinstance(provenance, dict), f"{path.name} has no provenance: regenerate it with the committed code"
        assert len(str(provenance.get("commit") or "")) == 40, path.name
