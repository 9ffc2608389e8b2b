"""The speed model: factors read from Pollux-format step times, slowdowns of placements, the model mix."""

from __future__ import annotations

from pathlib import Path

import pytest

from aisched.policy.cluster import ClusterSnapshot
from aisched.sim.clusters import GridSpec, generated_cluster
from aisched.sim.speed import Geometry, ModelMix, SpeedModel, cross_node_factor, cross_node_factors

# Two racks of two 8-GPU nodes, one zone each.
GEOMETRY = Geometry(ClusterSnapshot(generated_cluster(GridSpec(nodes=4, nodes_per_rack=2, racks_per_zone=1))))
R1 = ("zone-0-r01-n01", "zone-0-r01-n02")
R2 = ("zone-1-r01-n01", "zone-1-r01-n02")


def test_the_factor_is_the_median_of_spread_over_consolidated_step_times() -> None:
    step_times = {
        "2": {4: 1.0, 8: 2.0},
        "11": {4: 1.5, 8: 4.0},  # 1.5x and 2x
        "4": {4: 1.0},
        "22": {4: 3.0, 8: 9.0},  # 3x; batch 8 has no consolidated twin
        "44": {4: 9.0},  # more GPUs than were measured on one node: left out
    }
    assert cross_node_factor(step_times) == 2.0
    assert cross_node_factor({"1": {1: 1.0}}) is None


def test_factors_come_from_each_models_csv(tmp_path: Path) -> None:
    (tmp_path / "toy.csv").write_text("placement,local_bsz,step_time,sync_time\n2,4,1.0,0.1\n11,4,1.25,0.1\n")
    assert cross_node_factors(tmp_path) == {"toy": 1.25}
    with pytest.raises(ValueError, match="no Pollux placement CSVs"):
        cross_node_factors(tmp_path / "missing")


def test_a_job_runs_slower_only_when_spread_beyond_what_it_needs() -> None:
    speed = SpeedModel({"bert": 2.0}, rack_factor=1.1, zone_factor=1.5)
    assert speed.slowdown("bert", (R1[0], R1[0]), 8, GEOMETRY) == 1.0
    assert speed.slowdown("bert", R1, 8, GEOMETRY) == 2.0  # one node would have held it
    assert speed.slowdown("bert", R1, 16, GEOMETRY) == 1.0  # it needs both nodes
    assert speed.slowdown("bert", (*R1, R2[0]), 16, GEOMETRY) == pytest.approx((1 + 1 / 3) * 1.1 * 1.5)
    assert speed.slowdown("unknown", R1, 8, GEOMETRY) == 1.0
    assert SpeedModel.uniform().slowdown("bert", (R1[0], R2[0]), 2, GEOMETRY) == 1.0


def test_the_model_mix_is_seeded() -> None:
    first = [ModelMix(("a", "b", "c"), seed=3).draw() for _ in range(1)]
    mix, again = ModelMix(("a", "b", "c"), seed=3), ModelMix(("c", "b", "a"), seed=3)
    assert [mix.draw() for _ in range(20)] == [again.draw() for _ in range(20)]
    assert first[0] in {"a", "b", "c"}
    assert ModelMix(()).draw() == ""
