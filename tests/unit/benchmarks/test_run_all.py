"""benchmarks/run_all.py: it knows every benchmark, and refuses names it does not know."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

import benchmarks
from benchmarks import run_all

HELPERS = {
    "common",
    "e2e_measure",
    "e2e_workloads",
    # Needs FGD's simulator built (hack/build-fgd-simulator.sh) and takes ~25 min a run here: run by hand.
    "fgd_artifact",
    "fleet_plot",
    "fleet_report",
    "headline",
    "measured_code",
    "run_all",
    "regions_plot",
    "scale_plot",
    "scale_probe",
    "trace_report",
}


def test_every_module_of_the_package_but_its_helpers_is_a_benchmark_it_runs() -> None:
    modules = {module.name for module in pkgutil.iter_modules([str(Path(benchmarks.__file__).parent)])}
    assert set(run_all.BENCHMARKS) == modules - HELPERS


def test_an_unknown_name_is_refused_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_all.main(["placement", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: no benchmark nope")
