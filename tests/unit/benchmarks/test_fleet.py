"""benchmarks/fleet.py: a tiny run writes every arm's figures with the targets judged; the judging itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import fleet
from benchmarks.trace import PHILLY, PLACEMENT, POLLUX
from tests.unit.sim.generated import write_spot_trace

KEYS = {"gpu_hours_cost", "node_hours", "avg_jct_s", "p95_jct_s", "partial_gangs", "partial_gang_node_hours"}


def write_data_dir(root: Path) -> Path:
    philly = root / PHILLY
    philly.parent.mkdir(parents=True)
    rows = "".join(
        f"2017-10-01 10:{i // 60:02d}:{i % 60:02d},{600 + 37 * i}.0,{[1, 8, 4, 16][i % 4]}\n" for i in range(86)
    )
    philly.write_text("timestamp,duration,num_gpus\n" + rows)
    for index, path in enumerate(POLLUX):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        jobs = "".join(
            f"j{i},{i * 60},{['bert', 'cifar10'][i % 2]},{[1, 4, 8][(i + index) % 3]},64\n" for i in range(4)
        )
        (root / path).write_text("name,time,application,num_replicas,batch_size\n" + jobs)
    placement = root / PLACEMENT
    placement.mkdir(parents=True)
    (placement / "bert.csv").write_text("placement,local_bsz,step_time,sync_time\n2,4,1.0,0.1\n11,4,2.0,0.1\n")
    (placement / "cifar10.csv").write_text("placement,local_bsz,step_time,sync_time\n2,4,1.0,0.1\n11,4,1.1,0.1\n")
    for zone in fleet.ZONES:
        spot = root / fleet.SPOT_FILE.format(zone=zone)
        spot.parent.mkdir(parents=True, exist_ok=True)
        write_spot_trace(spot, availability=0.9)
    return root


def test_a_tiny_run_writes_every_arm_of_every_trace_with_its_targets(tmp_path: Path) -> None:
    output = tmp_path / "fleet.json"
    data = write_data_dir(tmp_path / "data")
    assert fleet.main(["--data-dir", str(data), "--pollux-gap", "600", "--output", str(output)]) == 0
    results = json.loads(output.read_text())
    assert set(results["traces"]) == {"philly", "pollux"}
    for trace in results["traces"].values():
        assert set(trace["arms"]) == {"static_peak", "static_mean", "karpenter_alone", "aisched_karpenter"}
        for figures in trace["arms"].values():
            assert set(figures) >= KEYS and figures["deadline_misses"] >= 0
            assert figures["finished"] == figures["jobs"]
        assert trace["targets"]["no_partial_gang"] is True
        assert set(trace["variants"]["provisioning_delay_600s"]) == {"karpenter_alone", "aisched_karpenter"}


def test_a_missing_spot_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fleet.main(["--data-dir", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and "--data-dir" in error


def arm(cost: float, jct: float, partial: int = 0) -> dict[str, Any]:
    return {"gpu_hours_cost": cost, "avg_jct_s": jct, "partial_gangs": partial, "partial_gang_node_hours": 0.0}


def test_the_targets_are_judged_on_the_figures() -> None:
    arms = {"static_peak": arm(100.0, 1000.0), "karpenter_alone": arm(60.0, 1200.0, partial=3)}
    met = fleet.judge({**arms, "aisched_karpenter": arm(50.0, 1100.0)})
    assert met["cost_vs_static_peak"] == 0.5 and met["avg_jct_vs_static_peak"] == 1.1
    assert all(value is True for key, value in met.items() if not key.endswith("static_peak"))
    missed = fleet.judge({**arms, "aisched_karpenter": arm(61.0, 1201.0, partial=1)})
    assert not any(value is True for key, value in missed.items() if not key.endswith("static_peak"))
