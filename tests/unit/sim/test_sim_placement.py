"""The simulator end to end where placement and time-slicing matter: small cases worked out by hand."""

from __future__ import annotations

import pytest

from aisched.sim.clusters import GridSpec, generated_cluster
from aisched.sim.engine import SimOptions, simulate
from aisched.sim.speed import SpeedModel
from aisched.sim.traces import TraceJob

ONE_NODE = generated_cluster(GridSpec(nodes=1, gpus_per_node=8))


def test_a_long_job_gives_way_to_a_short_one_after_its_minimum_run_and_resumes_where_it_stopped() -> None:
    # long: 8 GPUs for 2 h (band 1 after 450 s); short arrives at 1000 s and runs 100 s.
    trace = [TraceJob("long", 0.0, 7200.0, 8), TraceJob("short", 1000.0, 100.0, 8)]
    options = SimOptions(gpus_per_pod=8, restart_overhead_s=60.0)
    aisched = simulate(trace, ONE_NODE, policies=["aisched"], options=options).policies["aisched"]
    assert aisched.preemptions == 1
    # short runs 1000..1100; long resumes at 1100, pays 60 s of restart and finishes its 6200 s left.
    assert aisched.avg_jct_s == pytest.approx((100 + (1100 + 60 + 6200)) / 2)
    assert aisched.lost_gpu_seconds_per_job == pytest.approx(60 * 8 / 2)
    assert aisched.max_slowdown == pytest.approx((1100 + 60 + 6200) / 7200)
    fifo = simulate(trace, ONE_NODE, policies=["fifo_first_fit"], options=options).policies["fifo_first_fit"]
    assert fifo.avg_jct_s == pytest.approx((7200 + 6300) / 2)  # short waits for all of long
    assert fifo.p99_slowdown == pytest.approx(6300 / 100)


def test_a_job_spread_over_nodes_it_did_not_need_runs_slower() -> None:
    nodes = generated_cluster(GridSpec(nodes=2, gpus_per_node=8, nodes_per_rack=2))
    # Two 4-GPU jobs of a model spreading does not slow, then an 8-GPU bert job; every pod 1 GPU.
    trace = [
        TraceJob("a", 0.0, 1000.0, 4, "cifar10"),
        TraceJob("b", 0.0, 1000.0, 4, "cifar10"),
        TraceJob("c", 1.0, 100.0, 8, "bert"),
    ]
    options = SimOptions(speed=SpeedModel({"bert": 2.0, "cifar10": 1.0}), gpus_per_pod=1)
    report = simulate(trace, nodes, policies=["aisched", "fifo_spread"], options=options)
    spread, aisched = report.policies["fifo_spread"], report.policies["aisched"]
    # kube-scheduler sends each pod to the emptiest node: every job ends up over both nodes.
    assert spread.in_smallest_domain == 0.0
    assert spread.avg_jct_s == pytest.approx((1000 + 1000 + 200) / 3)  # bert at half speed
    assert spread.avg_placement_slowdown == pytest.approx((4 + 4 + 8 * 2) / 16)
    # aisched puts a and b on one node and c whole on the other.
    assert aisched.in_smallest_domain == 1.0
    assert aisched.avg_jct_s == pytest.approx((1000 + 1000 + 100) / 3)
    assert aisched.avg_placement_slowdown == 1.0
