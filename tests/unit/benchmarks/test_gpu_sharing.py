"""benchmarks/gpu_sharing.py: the pure parts (summary over seeds, targets, the MIG figures)."""

from __future__ import annotations

from aisched.sim.mig import MigRun
from aisched.sim.sharing import SharingRun
from benchmarks.gpu_sharing import mig_figures, summarise, targets


def one(policy: str, seed: int, unallocated: float, shares: list[float]) -> SharingRun:
    curve = tuple((round(0.5 * i, 1), share, 0.01) for i, share in enumerate(shares))
    return SharingRun(policy, seed, curve, unallocated, 0.01, 3, 10)


def test_summary_is_the_mean_over_seeds_with_its_spread() -> None:
    summary = summarise([one("fgd", 1, 0.10, [0.0, 0.5, 0.8]), one("fgd", 2, 0.20, [0.0, 0.5, 0.9])])
    assert summary["unallocated_gpu_share_at_full_load"] == 0.15
    assert summary["unallocated_gpu_share_at_full_load_min_max"] == [0.1, 0.2]
    assert summary["curve"] == [[0.0, 0.0], [0.5, 0.5], [1.0, 0.85]]


def test_targets_compare_aisched_with_fgd_at_full_load_and_along_the_curve() -> None:
    fgd = summarise([one("fgd", 1, 0.10, [0.0, 0.5, 0.85])])
    ahead = summarise([one("aisched", 1, 0.05, [0.0, 0.5, 0.9])])
    behind = summarise([one("aisched", 1, 0.095, [0.0, 0.45, 0.9])])
    assert targets({"aisched": ahead, "fgd": fgd}) == {
        "unallocated_ratio_to_fgd": 0.5,
        "ratio_met": True,
        "loads_behind_fgd": [],
    }
    missed = targets({"aisched": behind, "fgd": fgd})
    assert not missed["ratio_met"] and missed["loads_behind_fgd"] == [0.5]


def test_the_mig_figures_name_the_best_static_partition_and_compare_per_seed() -> None:
    def runs(ours: int, one_g: int, balanced: int) -> dict[str, MigRun]:
        admitted = {"aisched": ours, "all_1g": one_g, "all_balanced": balanced, "whole_gpu": 5}
        return {name: MigRun(name, count, 100 - count, 1.0, 0) for name, count in admitted.items()}

    figures = mig_figures({1: runs(90, 40, 80), 2: runs(70, 50, 75)})
    assert figures["best_static"] == "all_balanced"
    assert (figures["aisched_jobs_admitted"], figures["best_static_jobs_admitted"]) == (80.0, 77.5)
    assert figures["aisched_ahead_of_every_static_on_every_seed"] is False
