"""benchmarks/gpu_sharing.py: the pure parts (summary over seeds, targets, the MIG figures)."""

from __future__ import annotations

import json
from pathlib import Path

from aisched.sim.mig import MigRun
from aisched.sim.sharing import SharingRun
from benchmarks.gpu_sharing import artifact_figures, mig_figures, summarise, targets


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
        "ratio_against": "fgd",
        "loads_behind_fgd": [],
    }
    missed = targets({"aisched": behind, "fgd": fgd})
    assert not missed["ratio_met"] and missed["loads_behind_fgd"] == [0.5]


def test_targets_hold_aisched_to_the_artifact_where_it_is_there_and_say_how_far_ours_is() -> None:
    fgd = summarise([one("fgd", 1, 0.06, [0.0, 0.5, 0.85])])
    ours = summarise([one("aisched", 1, 0.045, [0.0, 0.5, 0.9])])
    artifact = {"unallocated_gpu_share_at_full_load": 0.05}
    figures = targets({"aisched": ours, "fgd": fgd, "fgd_artifact": artifact})
    # 0.045 / 0.06 = 0.75 would meet the bar against ours; against the artifact 0.9 just does.
    assert figures["unallocated_ratio_to_fgd_artifact"] == 0.9 and figures["ratio_met"]
    assert figures["ratio_against"] == "fgd_artifact"
    assert (figures["fgd_to_fgd_artifact"], figures["fgd_minus_fgd_artifact"]) == (1.2, 0.01)
    worse = summarise([one("aisched", 1, 0.046, [0.0, 0.5, 0.9])])
    assert not targets({"aisched": worse, "fgd": fgd, "fgd_artifact": artifact})["ratio_met"]


def test_artifact_figures_take_the_authors_cached_mean_and_keep_our_rerun(tmp_path: Path) -> None:
    fgd = {
        "artifact": {"unallocated_gpu_share_at_full_load": 0.0486, "per_seed": {"42": 0.0486}, "curve": []},
        "artifact_cached_results": {
            "unallocated_gpu_share_at_full_load": 0.047,
            "per_seed": {"42": 0.048, "43": 0.046},
        },
    }
    results = {"artifact": "the simulator", "nodes": "n.csv", "pod_lists": {"openb_pod_list_default": {"FGD": fgd}}}
    path = tmp_path / "fgd_artifact.json"
    path.write_text(json.dumps(results))
    figures = artifact_figures(path)
    assert figures["unallocated_gpu_share_at_full_load"] == 0.047
    assert figures["per_seed"] == {"42": 0.048, "43": 0.046} and figures["our_rerun_per_seed"] == {"42": 0.0486}
    assert "2 cached seeds" in figures["unallocated_gpu_share_at_full_load_is"] and "curve" not in figures


def test_the_mig_figures_name_the_best_static_partition_and_compare_per_seed() -> None:
    def runs(ours: int, one_g: int, balanced: int) -> dict[str, MigRun]:
        admitted = {"aisched": ours, "all_1g": one_g, "all_balanced": balanced, "whole_gpu": 5}
        return {name: MigRun(name, count, 100 - count, 1.0, 0) for name, count in admitted.items()}

    figures = mig_figures({1: runs(90, 40, 80), 2: runs(70, 50, 75)})
    assert figures["best_static"] == "all_balanced"
    assert (figures["aisched_jobs_admitted"], figures["best_static_jobs_admitted"]) == (80.0, 77.5)
    assert figures["aisched_ahead_of_every_static_on_every_seed"] is False
