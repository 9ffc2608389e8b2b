"""benchmarks/tenants.py: a tiny run of two teams gives every arm's figures per queue; a missing input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import tenants, trace

RAMP = 70


def write_tiny_inputs(directory: Path) -> list[str]:
    # Team "big" floods the cluster with long jobs from the start; team "small" comes ten minutes later.
    philly = directory / "philly.csv"
    ramp = "".join(f"2017-10-01 09:{i // 60:02d}:{i % 60:02d},60.0,1,60.0,big\n" for i in range(RAMP))
    big = "".join(f"2017-10-01 10:00:{i:02d},20000.0,8,160000.0,big\n" for i in range(6))
    small = "".join(f"2017-10-01 10:{10 + i}:00,15000.0,8,120000.0,small\n" for i in range(6))
    philly.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + ramp + big + small)
    placement = directory / "placement"
    placement.mkdir()
    (placement / "bert.csv").write_text("placement,local_bsz,step_time,sync_time\n2,4,1.0,0.1\n11,4,2.0,0.1\n")
    # An hour of ramp in a trace of two is no ramp to the daily rule: skipped by count.
    return ["--philly", str(philly), "--placement", str(placement), "--philly-skip", str(RAMP)]


def test_a_tiny_run_gives_each_arm_per_queue_and_quotas_keep_their_promise(tmp_path: Path) -> None:
    out = tmp_path / "tenants.json"
    assert tenants.main([*write_tiny_inputs(tmp_path), "--output", str(out), "--load", "3.0"]) == 0
    figures = json.loads(out.read_text())
    assert set(figures["arms"]) == {"aisched_queues", "aisched_one_queue", *tenants.PEERS}
    assert figures["skip"] == RAMP and figures["skipped"] == "--philly-skip"
    assert set(figures["queues"]) == {"big", "small"}
    assert sum(figures["queues"].values()) == figures["cluster"]["gpus"]
    assert figures["queues"]["small"] > 0
    for arm in figures["arms"].values():
        assert set(arm["by_queue"]) == {"big", "small"}
        assert arm["finished_jobs"] == 12
    # With quotas the small team takes its share back from the big one (a reclaim); with one queue,
    # or under a peer with no quotas, it goes short of its guarantee for longer.
    queues, one, kueue = (figures["arms"][arm] for arm in ("aisched_queues", "aisched_one_queue", "kueue"))
    assert queues["preemptions"] >= 1
    small = [arm["by_queue"]["small"]["shortfall_gpu_hours"] for arm in (queues, one, kueue)]
    assert small[0] < small[1] and small[0] < small[2]
    assert queues["shortfall_gpu_hours"] < min(one["shortfall_gpu_hours"], kueue["shortfall_gpu_hours"])


def test_a_missing_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tenants.main(["--data-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / trace.PHILLY}: no such file")
