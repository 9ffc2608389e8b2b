"""aisched.sim.spot: reading spot traces (zones, instance counts), and `aisched simulate spot`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisched.cli import main
from aisched.sim.spot.command import load_traces
from aisched.sim.spot.traces import SpotTrace, SpotTraceError
from tests.unit.sim.generated import write_spot_trace


def test_prefix_history_counts_losses_of_spot_and_time_with_it() -> None:
    trace = SpotTrace.build("z", 100.0, [1, 1, 0, 1, 0, 0, 1])
    history = trace.history_before(6)
    assert (history.interruptions, history.exposure_s) == (2.0, 300.0)


def test_the_zone_comes_from_the_metadata_or_the_caller_never_the_file_name(tmp_path: Path) -> None:
    named = write_spot_trace(tmp_path / "us-west-2a_v100_1.json", 0.8, zone="us-west-2b")
    unnamed = write_spot_trace(tmp_path / "aws-02-15-2023_us-east-2a_v100_1.json", 0.8)

    assert SpotTrace.load(named).name == "us-west-2b"
    assert SpotTrace.load(named, zone="mine").name == "mine"
    assert SpotTrace.load(unnamed, zone="us-east-2a").name == "us-east-2a"
    with pytest.raises(SpotTraceError, match="names no zone; say which with --zone"):
        SpotTrace.load(unnamed)


def test_zones_are_given_in_the_order_of_the_traces_and_must_differ(tmp_path: Path) -> None:
    first, second = (write_spot_trace(tmp_path / f"{n}.json", 0.8) for n in ("a", "b"))
    assert [t.name for t in load_traces([first, second], ["za", "zb"], 1)] == ["za", "zb"]
    with pytest.raises(SpotTraceError, match="same zone"):
        load_traces([first, second], ["za", "za"], 1)
    with pytest.raises(SpotTraceError, match="at most one --zone per trace"):
        load_traces([first], ["za", "zb"], 1)


def test_a_job_of_several_instances_runs_on_spot_only_where_a_sample_counts_as_many(tmp_path: Path) -> None:
    counts = [16, 12, 3, 0, 8]
    assert SpotTrace.build("z", 300.0, counts).available == (True, True, True, False, True)
    assert SpotTrace.build("z", 300.0, counts, instances=8).available == (True, True, False, False, True)
    path = tmp_path / "us-east-2b_v100_1.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": counts}))
    with pytest.raises(SpotTraceError, match="never 32 instances at once"):
        SpotTrace.load(path, zone="us-east-2b", instances=32)


def test_simulate_spot_command_prints_and_writes_both_notice_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_spot_trace(tmp_path / "t.json", 0.85, zone="test-zone")
    out = tmp_path / "spot.json"
    small = ["--durations-hours", "2", "--deadline-factors", "2", "--starts", "2"]
    assert main(["simulate", "spot", str(trace), *small, "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert set(results["per_trace"]) == {"test-zone"}
    assert "without_notice_checkpoint" in results
    assert "every notice checkpoint failing" in capsys.readouterr().out


def test_simulate_spot_command_tells_an_unusable_trace_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    assert main(["simulate", "spot", str(trace)]) == 1
    assert capsys.readouterr().err.startswith(f"error: {trace}: not a spot trace")
