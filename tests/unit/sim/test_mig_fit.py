"""The static MIG partition fitted to a past window: valid layouts, sized to the demand, and run as a fixed arm."""

from __future__ import annotations

from collections import Counter

import pytest

from aisched.policy.sharing.mig import MIG_MODELS, is_valid, maximal_layouts
from aisched.sim.mig import FITTED_STATIC, MigJob, erlang_b, fit_static_partition, mig_jobs, simulate_mig

MODELS = ["H100-80GB"] * 4 + ["A100-40GB"] * 4


def held(partition: tuple[tuple[tuple[str, int], ...], ...]) -> Counter[str]:
    return Counter(kind for layout in partition for kind, _ in layout)


def test_erlang_b_matches_the_closed_forms() -> None:
    # One server: a / (1 + a); two: a^2/2 / (1 + a + a^2/2); no server refuses everything.
    assert erlang_b(1, 1.0) == pytest.approx(0.5)
    assert erlang_b(2, 1.0) == pytest.approx(0.2)
    assert erlang_b(0, 3.0) == 1.0
    assert erlang_b(40, 1.0) < 1e-40


def test_every_gpu_gets_a_valid_maximal_layout_of_its_own_model() -> None:
    past = mig_jobs(400, {"1g": 0.3, "3g": 0.4, "7g": 0.3}, gpus=len(MODELS), load=1.1, mean_duration_h=2.0, seed=5)
    partition = fit_static_partition(MODELS, past)
    assert len(partition) == len(MODELS)
    for model, layout in zip(MODELS, partition, strict=True):
        assert is_valid(layout, MIG_MODELS[model])
        assert layout in maximal_layouts(model)


@pytest.mark.parametrize(("kind", "per_gpu"), [("7g", 1), ("3g", 2), ("1g", 7)])
def test_demand_for_one_profile_lays_every_gpu_out_for_it(kind: str, per_gpu: int) -> None:
    past = mig_jobs(300, {kind: 1.0}, gpus=len(MODELS), load=1.1, mean_duration_h=2.0, seed=2)
    assert held(fit_static_partition(MODELS, past)) == {kind: per_gpu * len(MODELS)}


def test_light_demand_leaves_no_asked_for_profile_without_an_instance() -> None:
    past = mig_jobs(200, {"1g": 0.5, "4g": 0.3, "7g": 0.2}, gpus=len(MODELS), load=0.3, mean_duration_h=1.0, seed=3)
    counts = held(fit_static_partition(MODELS, past))
    assert all(counts[kind] >= 1 for kind in ("1g", "4g", "7g"))


def test_the_fit_depends_only_on_the_past_window() -> None:
    mix = {"1g": 0.2, "2g": 0.2, "3g": 0.3, "4g": 0.2, "7g": 0.1}
    past = mig_jobs(500, mix, gpus=len(MODELS), load=1.1, mean_duration_h=2.0, seed=8)
    assert fit_static_partition(MODELS, past) == fit_static_partition(MODELS, list(past))
    other = mig_jobs(500, {"7g": 1.0}, gpus=len(MODELS), load=1.1, mean_duration_h=2.0, seed=8)
    assert fit_static_partition(MODELS, past) != fit_static_partition(MODELS, other)


@pytest.mark.parametrize("seed", [1, 2])
def test_fitted_on_a_past_window_it_admits_at_least_the_stock_layouts(seed: int) -> None:
    mix = {"1g": 0.15, "2g": 0.05, "3g": 0.55, "4g": 0.15, "7g": 0.10}
    past = mig_jobs(1500, mix, gpus=len(MODELS), load=1.1, mean_duration_h=2.0, seed=seed + 100)
    evaluated = mig_jobs(1500, mix, gpus=len(MODELS), load=1.1, mean_duration_h=2.0, seed=seed)
    partition = fit_static_partition(MODELS, past)
    fitted = simulate_mig(MODELS, evaluated, FITTED_STATIC, partition=partition)
    stock = max(simulate_mig(MODELS, evaluated, name).admitted for name in ("all_1g", "all_balanced", "whole_gpu"))
    assert fitted.admitted >= stock
    assert fitted.partition == partition and fitted.repartitions == 0


def test_the_fitted_arm_needs_one_layout_per_gpu() -> None:
    jobs = [MigJob(0.0, 1.0, "1g")]
    with pytest.raises(ValueError, match="one layout per GPU"):
        simulate_mig(MODELS, jobs, FITTED_STATIC, partition=())
    with pytest.raises(ValueError, match="no past jobs"):
        fit_static_partition(MODELS, [])


def test_a_fixed_partition_refuses_a_profile_it_does_not_hold() -> None:
    partition = ((("7g", 0),),)
    run = simulate_mig(
        ["H100-80GB"], [MigJob(0.0, 1.0, "1g"), MigJob(0.5, 1.0, "7g")], FITTED_STATIC, partition=partition
    )
    assert (run.admitted, run.refused) == (1, 1)
