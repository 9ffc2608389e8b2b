"""The scaling model: per-GPU efficiency read from Pollux-format step times, and the pace of resized jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from aisched.sim.scaling import ScalingModel, efficiencies, per_gpu_efficiency


def test_efficiency_is_per_gpu_throughput_on_the_most_consolidated_placement_over_one_gpus() -> None:
    step_times = {
        "1": {4: 1.0, 8: 2.0},
        "2": {4: 1.25, 8: 2.0},  # batch 4: 0.8, batch 8: 1.0 -> median 0.9
        "11": {4: 5.0, 8: 9.0},  # spread: the consolidated "2" is the one read
        "4": {4: 2.0},  # 0.5
        "44": {4: 1.0, 16: 1.0},  # measured faster per GPU than 4 GPUs: held at 0.5, never rising
    }
    assert per_gpu_efficiency(step_times) == {1: 1.0, 2: 0.9, 4: 0.5, 8: 0.5}
    assert per_gpu_efficiency({"2": {4: 1.0}}) == {}  # nothing to compare with


def test_curves_come_from_each_models_csv(tmp_path: Path) -> None:
    (tmp_path / "toy.csv").write_text("placement,local_bsz,step_time,sync_time\n1,4,1.0,0\n2,4,1.25,0.1\n")
    (tmp_path / "lonely.csv").write_text("placement,local_bsz,step_time,sync_time\n2,4,1.0,0\n")
    assert efficiencies(tmp_path) == {"toy": {1: 1.0, 2: 0.8}}


CURVE = {1: 1.0, 2: 0.9, 4: 0.8, 8: 0.5, 16: 0.4}


def test_throughput_interpolates_between_measured_sizes_and_keeps_falling_beyond_them() -> None:
    model = ScalingModel({"m": CURVE})
    assert model.throughput("m", 4) == pytest.approx(3.2)
    assert model.throughput("m", 6) == pytest.approx(6 * 0.65)  # halfway between 4 and 8
    # Beyond 16 GPUs: each doubling loses what 8 -> 16 lost (0.4 / 0.5 per GPU).
    assert model.throughput("m", 32) == pytest.approx(32 * 0.4 * 0.8)
    assert model.throughput("m", 64) == pytest.approx(64 * 0.4 * 0.8**2)
    assert model.throughput("unknown", 64) == 64  # no measurements: linear


def test_growth_turns_a_share_of_the_extra_throughput_into_progress() -> None:
    model = ScalingModel({"m": CURVE}, growth_efficiency=0.5)
    assert model.pace("m", 4, 4) == 1.0
    assert model.pace("m", 1, 2) == pytest.approx(1 + 0.5 * (1.8 - 1))
    assert model.pace("m", 8, 16) == pytest.approx(1 + 0.5 * (6.4 / 4 - 1))
    assert ScalingModel(growth_efficiency=0.25).pace("", 2, 4) == pytest.approx(1.25)


def test_fewer_gpus_lose_all_their_throughput_and_never_run_faster() -> None:
    model = ScalingModel({"m": CURVE, "odd": {1: 1.0, 2: 0.3}})
    assert model.pace("m", 2, 1) == pytest.approx(1 / 1.8)
    # Two GPUs measured slower than one: shrinking to one is not credited as a speed-up,
    # and growing to two is slower (the scheduler does not know how a job scales).
    assert model.pace("odd", 2, 1) == 1.0
    assert model.pace("odd", 1, 2) == pytest.approx(0.6)


def test_the_model_is_written_into_the_results() -> None:
    assert ScalingModel({"m": {1: 1.0, 2: 0.91234}}, growth_efficiency=0.5).to_json() == {
        "growth_efficiency": 0.5,
        "per_gpu_efficiency": {"m": {1: 1.0, 2: 0.912}},
    }
