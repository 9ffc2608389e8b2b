"""`aisched simulate carbon`: the simulation from the command line, with the source's CSV reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisched.cli import main
from tests.unit.sim.generated import write_grid_intensity


def test_simulate_carbon_command_writes_every_case(tmp_path: Path) -> None:
    write_grid_intensity(tmp_path / "ci.csv")
    out = tmp_path / "carbon.json"
    arguments = ["--job-mix=paper", "--jobs=5", "--errors=0", "--deadlines=12h,next_workday", "--json", str(out)]
    assert main(["simulate", "carbon", "--carbon", str(tmp_path / "ci.csv"), *arguments]) == 0
    report = json.loads(out.read_text())
    assert report["inputs"]["region"] == "GB"
    assert len(report["cases"]) == 2 * 2  # deadlines x (non-)interruptible


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--job-mix=philly"], "the philly job mix needs --trace"),
        (["--job-mix=paper", "--deadlines=someday"], "unknown deadline someday"),
    ],
)
def test_simulate_carbon_command_tells_what_is_wrong_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    write_grid_intensity(tmp_path / "ci.csv")
    assert main(["simulate", "carbon", "--carbon", str(tmp_path / "ci.csv"), *arguments]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: ") and message in error and error.count("\n") == 1


def test_an_unreadable_carbon_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "carbon", "--carbon", str(tmp_path / "none.csv"), "--job-mix=paper"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: ") and "none.csv" in error and error.count("\n") == 1
