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
    assert results["options"]["duration_knowledge"] == "estimate"
    assert len(results["provenance"]["commit"] or "0" * 40) == 40 and "dirty" in results["provenance"]
    growing = {"karpenter_alone", "gang_karpenter", "aisched_karpenter"}
    for trace in results["traces"].values():
        assert set(trace["arms"]) == {"static_peak", "static_mean", *growing}
        for figures in trace["arms"].values():
            assert set(figures) >= KEYS and figures["deadline_misses"] >= 0
            assert figures["finished"] == figures["jobs"]
        knew = {arm: figures["knew"]["durations"] for arm, figures in trace["arms"].items()}
        assert knew == {
            "static_peak": "estimate",
            "static_mean": "estimate",
            "karpenter_alone": "none",
            "gang_karpenter": "none",
            "aisched_karpenter": "estimate",
        }
        assert all(f["assumptions"]["elastic_share"] == 0.0 for f in trace["arms"].values())
        assert trace["arms"]["gang_karpenter"]["partial_gangs"] == 0
        assert trace["targets"]["no_partial_gang"] is True
        assert "cost_vs_gang_karpenter" in trace["targets"]
        assert set(trace["variants"]["provisioning_delay_600s"]) == growing
        assert set(trace["variants"]["spot_price_1"]) == {"gang_karpenter", "aisched_karpenter"}


def test_inputs_are_options_spot_traces_are_named_by_their_files(tmp_path: Path) -> None:
    data = write_data_dir(tmp_path / "data")
    mine = tmp_path / "mine"
    mine.mkdir()
    spot = [write_spot_trace(mine / f"pool-{i}.json", availability=0.8) for i in range(2)]
    philly = mine / "philly.csv"
    philly.write_text((data / PHILLY).read_text())
    (data / PHILLY).unlink()  # the default is not read
    output = tmp_path / "fleet.json"
    argv = ["--data-dir", str(data), "--traces", "philly", "--philly", str(philly), "--spot", *map(str, spot)]
    assert fleet.main([*argv, "--spot-price-sweep", "", "--output", str(output)]) == 0
    results = json.loads(output.read_text())
    assert results["spot_zones"] == ["pool-0", "pool-1"]
    assert results["traces"]["philly"]["taken"]["file"].endswith("philly.csv")
    assert set(results["traces"]["philly"]["variants"]) == {"provisioning_delay_600s"}


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


def test_the_gang_peer_target_needs_the_cost_and_no_worse_jct() -> None:
    arms = {"static_peak": arm(100.0, 1000.0), "karpenter_alone": arm(60.0, 1200.0), "gang_karpenter": arm(80.0, 900.0)}
    met = fleet.judge({**arms, "aisched_karpenter": arm(56.0, 900.0)})
    assert met["cost_vs_gang_karpenter"] == 0.7 and met["cost_at_most_of_gang_karpenter_met"] is True
    slower = fleet.judge({**arms, "aisched_karpenter": arm(40.0, 901.0)})
    assert slower["cost_at_most_of_gang_karpenter_met"] is False
