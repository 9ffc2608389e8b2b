"""benchmarks.common: what every results file carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import common
from benchmarks.measured_code import changed_since, measured_files


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


# The benchmark module that writes each results file: its import closure is the code the figures measure.
PRODUCED_BY = {
    "autoscale.json": "benchmarks.autoscale",
    "serving.json": "benchmarks.serving",
    "spot.json": "benchmarks.spot",
    "tenants.json": "benchmarks.tenants",
    "carbon.json": "benchmarks.carbon",
    "fgd_artifact.json": "benchmarks.fgd_artifact",
    "fleet.json": "benchmarks.fleet",
    "gpu_sharing.json": "benchmarks.gpu_sharing",
    "placement.json": "benchmarks.placement",
    "regions.json": "benchmarks.regions",
    "tenant_objects.json": "benchmarks.tenant_objects",
    "tenant_records.json": "benchmarks.tenant_records",
    "trace_alibaba.json": "benchmarks.trace",
    "trace_philly.json": "benchmarks.trace",
    "trace_pollux.json": "benchmarks.trace",
    "workloads.json": "benchmarks.workloads.bench",
}
# Results whose measured code changed after the commit that produced them, as found when this check was
# written (2026-12-04): their figures may no longer be what that code gives. Each is to be rerun in the
# commit that changes its code; one rerun must leave this list (the test fails until it does), and a
# file not listed whose code changes fails at once. The closure errs wide (every import counts), so a
# listed file's figures may well stand: rerunning is how to know.
WHAT_MOVED = "only an import moved since (benchmarks/headline.py takes pinned_version from aisched.testing.versions)"
START_WAIT = "only hack/cluster.sh's wait for a started component changed since (no figure it measures)"
STALE = {
    "fgd_artifact.json": "benchmarks/common.py (provenance) changed since bddf51b",
    "fleet.json": WHAT_MOVED,
    "tenants.json": WHAT_MOVED,
    "trace_alibaba.json": WHAT_MOVED,
    "trace_philly.json": WHAT_MOVED,
    "trace_pollux.json": WHAT_MOVED,
    "tenant_objects.json": START_WAIT,
    "tenant_records.json": START_WAIT,
    "workloads.json": START_WAIT,
}


def test_each_results_file_maps_to_the_benchmark_that_writes_it() -> None:
    results = {p.name for p in (common.REPO_ROOT / "benchmarks" / "results").glob("*.json")}
    assert results - set(NOT_YET_RERUN) == set(PRODUCED_BY)
    for module in set(PRODUCED_BY.values()):
        assert measured_files(module)[0:1], module


def test_no_results_file_is_older_than_the_code_it_measures() -> None:
    """The commit a results file names must touch none of its measured code up to HEAD."""
    fresh: list[str] = []
    stale: list[str] = []
    unknown: list[str] = []
    for name, module in sorted(PRODUCED_BY.items()):
        provenance = json.loads((common.REPO_ROOT / "benchmarks" / "results" / name).read_text())["provenance"]
        changed = changed_since(provenance["commit"], measured_files(module))
        if changed is None:
            unknown.append(name)  # git does not know its commit (a shallow clone): nothing to compare
            continue
        (stale if changed or provenance.get("dirty") else fresh).append(name)
        if name not in STALE:
            assert not changed, f"{name}: {changed[:5]} changed since {provenance['commit'][:7]}; rerun its benchmark"
            assert not provenance.get("dirty"), f"{name} was written from uncommitted code: rerun it on a clean tree"
    assert not set(STALE) & set(fresh), f"rerun and fresh again, take off STALE: {sorted(set(STALE) & set(fresh))}"
    if unknown and not (fresh or stale):
        pytest.skip(f"git knows none of the results' commits (a shallow clone): {unknown}")


def test_a_module_measures_what_it_imports_through_others() -> None:
    files = {str(p) for p in measured_files("benchmarks.placement")}
    assert "benchmarks/placement.py" in files
    assert "operator/aisched/policy/placement/__init__.py" in files or "operator/aisched/policy/placement.py" in files
    assert "operator/aisched/__init__.py" in files  # a package runs before its modules
    assert "benchmarks/serving.py" not in files


def test_a_benchmark_that_starts_the_operator_and_the_cluster_measures_them() -> None:
    """No import leads from a benchmark to the operator it starts as a process or the scripts and chart its
    cluster is made from: `RUNS` does."""
    files = {str(p) for p in measured_files("benchmarks.workloads.bench")}
    assert {"operator/aisched/cli.py", "operator/aisched/controller/workloads/cycle.py"} <= files
    assert {"hack/cluster.sh", "helm/aisched"} <= files
    simulated = {str(p) for p in measured_files("benchmarks.trace")}
    assert "operator/aisched/cli.py" not in simulated and "hack/cluster.sh" not in simulated
