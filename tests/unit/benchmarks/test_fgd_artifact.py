"""benchmarks/fgd_artifact.py: reading FGD's simulator log as its authors' analysis does, and the side-by-side table."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.common import InputError
from benchmarks.fgd_artifact import (
    AllocSample,
    allocated_curve,
    allocated_percent_at,
    expected_unallocated,
    mean_curve,
    parse_alloc_lines,
    run_finished,
    side_by_side,
    unallocated_share,
)


def alloc_line(used: int, total: int, arrived: int) -> str:
    return (
        'time="2026-12-02T05:20:52Z" level=info msg="[Alloc]; Used nodes: 112; Used GPUs: 494;'
        f' Used GPU Milli: {used}; Total GPUs: {total}; Arrived GPU Milli: {arrived}\\n"\n'
    )


def test_only_the_six_field_alloc_lines_are_read() -> None:
    lines = [
        'time="t" level=info msg="[612] attempt to create pod(paib-gpu/openb-pod-0814)\\n"\n',
        # The older five-field form (no arrived load), which analysis.py does not use for the curve.
        'time="t" level=info msg="[Alloc]; Used nodes: 52; Used GPUs: 383; Used GPU Milli: 375595;'
        ' Total GPUs: 4933\\n"\n',
        alloc_line(456700, 6212, 456800),
    ]
    assert parse_alloc_lines(lines) == [AllocSample(456700, 6212, 456800)]


def test_the_mark_averages_the_samples_whose_arrived_share_rounds_to_it() -> None:
    total = 1000  # GPUs: 10,000 milli is 1%
    samples = [
        AllocSample(980_000, total, 994_000),  # 99.4% arrived: rounds to 99, left out
        AllocSample(990_000, total, 996_000),  # 99.6% -> 100
        AllocSample(960_000, total, 1_004_000),  # 100.4% -> 100
        AllocSample(961_000, total, 1_006_000),  # 100.6% -> 101, left out
    ]
    assert allocated_percent_at(samples) == 97.5


def test_without_a_sample_at_the_mark_those_within_a_point_count() -> None:
    samples = [AllocSample(950_000, 1000, 990_000), AllocSample(952_000, 1000, 1_010_000)]
    assert allocated_percent_at(samples) == 95.1
    assert allocated_percent_at([AllocSample(500_000, 1000, 500_000)]) is None


def test_a_log_gives_the_unallocated_share_or_says_it_never_reached_full_load(tmp_path: Path) -> None:
    log = tmp_path / "simon.log"
    log.write_text(alloc_line(5_600_000, 6212, 6_212_000))
    assert unallocated_share(log) == pytest.approx(1 - 90.15 / 100)
    log.write_text(alloc_line(100_000, 6212, 100_000))
    with pytest.raises(InputError, match="reaches 100% arrived"):
        unallocated_share(log)


def test_the_artifacts_cached_results_are_read_per_pod_list_and_policy(tmp_path: Path) -> None:
    results = tmp_path / "experiments" / "analysis" / "expected_results"
    results.mkdir(parents=True)
    (results / "analysis_allo_discrete.csv").write_text(
        "workload,sc_policy,tune,seed,total_gpus,99,100\n"
        "openb_pod_list_default,06-FGD,1.3,42,6212,94.0,95.0\n"
        "openb_pod_list_default,06-FGD,1.3,43,6212,94.0,95.5\n"
        "openb_pod_list_default,05-BestFit,1.3,42,6212,90.0,92.0\n"
    )
    fgd = expected_unallocated(tmp_path, "openb_pod_list_default", "FGD")
    assert fgd == {"unallocated_gpu_share_at_full_load": 0.0475, "per_seed": {42: 0.05, 43: 0.045}}
    assert expected_unallocated(tmp_path, "openb_pod_list_gpushare20", "FGD") is None


def test_the_table_puts_ours_beside_the_artifacts_with_the_gap() -> None:
    cell = ("openb_pod_list_default", "FGD")
    table = side_by_side({cell: {42: 0.04, 43: 0.06}}, {cell: {1: 0.10}}, {cell: None})
    row = table["openb_pod_list_default"]["FGD"]
    assert row["artifact"]["unallocated_gpu_share_at_full_load"] == 0.05
    assert row["artifact"]["curve"] == []
    assert row["ours"] == {"policy": "fgd", "unallocated_gpu_share_at_full_load": 0.1, "per_seed": {1: 0.10}}
    assert (row["gap"], row["ratio"]) == (0.05, 2.0)


def test_the_curve_reads_every_mark_the_run_reached_and_averages_over_seeds() -> None:
    samples = [AllocSample(0, 1000, 0), AllocSample(20_000, 1000, 20_000), AllocSample(35_000, 1000, 40_000)]
    curve = allocated_curve(samples)
    assert curve == [[0.0, 0.0], [0.02, 0.02], [0.04, 0.035]]
    assert mean_curve([curve, [[0.0, 0.0], [0.02, 0.01]]]) == [[0.0, 0.0], [0.02, 0.015]]


def test_only_a_log_that_apply_closed_counts_as_a_finished_run(tmp_path: Path) -> None:
    log = tmp_path / "simon.log"
    assert not run_finished(log)
    log.write_text(alloc_line(5_600_000, 6212, 7_000_000))  # past full load, but cut off
    assert not run_finished(log)
    log.write_text(alloc_line(5_600_000, 6212, 8_000_000) + "there are 352 unscheduled pods\nFailed!\n")
    assert run_finished(log)
