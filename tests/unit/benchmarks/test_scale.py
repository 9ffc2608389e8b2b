"""benchmarks/scale.py's pure parts: histogram quantiles, the cycle curve, the preset's first zones, the jobs."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from aisched.metrics import Metrics
from benchmarks import scale
from benchmarks.e2e_measure import BindWatch, BoundPod
from benchmarks.e2e_workloads import GangShape
from benchmarks.scale_plot import plot
from benchmarks.scale_probe import HistogramState, Sample, cycle_curve, operator_reading, percentile

# Ten cycles: four under 0.1 s, five more under 0.5 s, one under 1 s.
CYCLES = HistogramState(((0.1, 4.0), (0.5, 9.0), (1.0, 10.0), (float("inf"), 10.0)), count=10, total=2.6)


def test_quantiles_interpolate_inside_the_bucket_like_histogram_quantile() -> None:
    assert CYCLES.quantile(0.5) == pytest.approx(0.1 + 0.4 * (5 - 4) / 5)
    assert CYCLES.quantile(0.99) == pytest.approx(0.5 + 0.5 * (9.9 - 9) / 1)
    assert HistogramState((), 0, 0).quantile(0.99) == 0.0


def test_the_cycle_its_cpu_time_and_full_collections_are_read_off_the_operators_own_metrics() -> None:
    metrics = Metrics(CollectorRegistry(), process_metrics=False)
    metrics.process.record_scheduling_cycle(0.3, 0.1)
    metrics.process.record_scheduling_cycle(2.0, 0.4)
    metrics.process.record_gc_pause(0, 0.002)  # young collections are not the benchmark's
    metrics.process.record_gc_pause(2, 1.5)
    reading = operator_reading(generate_latest(metrics.registry).decode())
    assert reading.cycle.count == 2
    assert reading.cycle.total == pytest.approx(2.3)
    assert reading.cycle_cpu.count == 2
    assert reading.cycle_cpu.total == pytest.approx(0.5)
    assert reading.cycle.quantile(1.0) == 2.5  # the top of the bucket the slowest cycle is in
    assert reading.cycle_cpu.quantile(1.0) == 0.5
    assert (reading.full_gc.count, reading.full_gc.total) == (1, 1.5)


def test_an_interval_is_what_changed_in_it() -> None:
    before = HistogramState(((0.1, 1.0), (float("inf"), 2.0)), count=2, total=0.3)
    after = HistogramState(((0.1, 4.0), (float("inf"), 6.0)), count=6, total=1.1)
    change = after.since(before)
    assert (change.buckets, change.count) == (((0.1, 3.0), (float("inf"), 4.0)), 4)
    assert change.total == pytest.approx(0.8)


def test_the_curve_pairs_the_backlog_with_the_mean_cycle_of_each_interval() -> None:
    empty = HistogramState((), 0, 0)
    samples = [
        Sample(0, 100, empty, {}),
        Sample(5, 120, HistogramState((), 4, 0.4), {"Queued": 50, "Running": 10}),
        Sample(10, 130, HistogramState((), 4, 0.4), {"Queued": 60}),  # no cycle in this interval
    ]
    assert cycle_curve(samples) == [{"queued_jobs": 50, "running_jobs": 10, "mean_cycle_s": 0.1, "rss_mib": 120}]


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0], 0.99) == pytest.approx(1.99)
    assert percentile([], 0.5) == 0.0


def test_the_first_zone_of_the_preset_holds_the_first_step() -> None:
    description, nodes = scale.first_nodes(1008)
    assert len(nodes) == 5040 and [z["name"] for z in description["zones"]] == ["us-east-1a"]
    assert all(n["metadata"]["labels"]["topology.kubernetes.io/zone"] == "us-east-1a" for n in nodes[:1008])


def test_each_job_runs_for_its_time_then_kwok_ends_it() -> None:
    job = scale.job_with_run_time("j1", GangShape(2, 8), 75)
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"aisched.io/fake-exit": "Succeeded", "aisched.io/fake-exit-after": "75s"}
    assert job["spec"]["template"]["spec"]["containers"]  # the worker is the same as the other benchmarks'


def test_bind_times_count_only_whole_gangs() -> None:
    watched = BindWatch.__new__(BindWatch)
    watched.bound = {
        "a-0": BoundPod("a", 0, "n1", 12.0),
        "a-1": BoundPod("a", 1, "n2", 13.0),
        "b-0": BoundPod("b", 0, "n3", 20.0),  # half a gang: not counted
    }
    watched.created = {"a": 11.0, "b": 19.0}
    figures = scale.bind_figures(watched, {"a": 10.0, "b": 10.0}, {"a": 2, "b": 2})
    assert figures["jobs_bound"] == 1 and figures["bind_p50_s"] == 2.0 and figures["submit_to_bind_p50_s"] == 3.0


def test_the_plot_is_written(tmp_path: Path) -> None:
    figures = {
        "idle_rss_mib": {"1008": 90.0, "2016": 110.0},
        "cycle_against_backlog": [{"queued_jobs": 10, "mean_cycle_s": 0.05}],
        "nodes": 2016,
        "jobs": 100,
        "operator_peak_rss_mib": 150.0,
        "cycle_p99_s": 0.2,
    }
    plot(figures, tmp_path / "scale.png")
    assert (tmp_path / "scale.png").read_bytes().startswith(b"\x89PNG")


def test_the_operator_is_given_some_cpus_never_all() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: nothing to give the operator alone")
    assert scale.cpu_set(str(cpus[-1])) == {cpus[-1]}
    with pytest.raises(argparse.ArgumentTypeError, match="not all of them"):
        scale.cpu_set(",".join(map(str, cpus)))
    with pytest.raises(argparse.ArgumentTypeError):
        scale.cpu_set(str(max(cpus) + 1))  # not this machine's
