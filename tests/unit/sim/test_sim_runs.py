"""The simulator end to end on tiny traces whose outcome can be worked out by hand; smoke runs of the commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisched.cli import main
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.scheduler import ADMISSIONS_PER_CYCLE
from aisched.sim.clusters import GridSpec, generated_cluster
from aisched.sim.engine import SimOptions, simulate
from aisched.sim.jobs import DurationKnowledge, SimJob, gangs
from aisched.sim.policies import AischedPolicy
from aisched.sim.traces import TraceJob

REPO = Path(__file__).resolve().parents[3]
BASELINES = ["aisched", "fifo_first_fit", "fifo_spread"]
# Whole-node pods and true durations: the hand-worked cases below are about gangs and backfill.
TOLD = SimOptions(knowledge=DurationKnowledge.TRUTH, gpus_per_pod=8)
FOUR_NODES = generated_cluster(GridSpec(nodes=4, gpus_per_node=8, nodes_per_rack=2, racks_per_zone=2))

# t=0: A takes a rack for 100 s and B a node for 1000 s; t=1: C wants all four nodes;
# t=2: D wants one node for 50 s while one node is idle.
TRACE = [
    TraceJob("A", 0.0, 100.0, 16),
    TraceJob("B", 0.0, 1000.0, 8),
    TraceJob("C", 1.0, 10.0, 32),
    TraceJob("D", 2.0, 50.0, 8),
]


def test_backfill_runs_the_short_job_without_delaying_the_big_one() -> None:
    report = simulate(TRACE, FOUR_NODES, policies=BASELINES, options=TOLD)
    aisched, fifo, spread = (report.policies[p] for p in ("aisched", "fifo_first_fit", "fifo_spread"))
    # aisched: C waits for B (starts at 1000); D fits on the idle node and ends long before that.
    assert aisched.avg_queue_s == pytest.approx((0 + 0 + 999 + 0) / 4)
    assert aisched.avg_jct_s == pytest.approx((100 + 1000 + 1009 + 50) / 4)
    assert aisched.p95_jct_s == 1009
    # strict FIFO: D waits behind C until C has run (1000..1010).
    assert fifo.avg_queue_s == pytest.approx((999 + 1008) / 4)
    # kube-scheduler alone: C binds a pod on the idle node at once and holds it, so D waits as long.
    assert spread.avg_queue_s == pytest.approx((999 + 1008) / 4)
    for policy in (aisched, fifo, spread):
        assert policy.finished_jobs == 4
        assert policy.gpu_utilization == pytest.approx(24 / 32)  # A and B busy from 0 to the last arrival
    assert aisched.in_smallest_domain == 1.0
    assert aisched.avg_jct_multi_gpu_s == pytest.approx((100 + 1000 + 1009 + 50) / 4)
    assert report.to_json()["policies"]["aisched"]["avg_queue_s"] == 249.8


def test_pods_placed_one_by_one_strand_gpus_a_gang_would_leave_free() -> None:
    # Three nodes; X1 and X2 hold two of them. Y (two nodes) arrives: the spread baseline binds
    # one pod on the idle node and holds it; aisched keeps Y waiting whole and lets W run there.
    nodes = generated_cluster(GridSpec(nodes=3, nodes_per_rack=3))
    trace = [
        TraceJob("X1", 0.0, 100.0, 8),
        TraceJob("X2", 0.0, 50.0, 8),
        TraceJob("Y", 1.0, 10.0, 16),
        TraceJob("W", 2.0, 20.0, 8),
    ]
    report = simulate(trace, nodes, policies=["aisched", "fifo_spread"], options=TOLD)
    assert report.policies["aisched"].avg_queue_s == pytest.approx((0 + 0 + 49 + 0) / 4)
    assert report.policies["fifo_spread"].avg_queue_s == pytest.approx((0 + 0 + 49 + 58) / 4)


def test_jobs_bigger_than_a_node_become_gangs_and_impossible_ones_are_left_out() -> None:
    assert gangs([TraceJob("a", 0, 1, 16), TraceJob("b", 0, 1, 12), TraceJob("c", 0, 1, 3)], 8, gpus_per_pod=8) == [
        SimJob("a", 0, 1, 2, 8),
        SimJob("b", 0, 1, 2, 6),
        SimJob("c", 0, 1, 1, 3),
    ]
    # Pods below a node's size: a 4-GPU job of 1-GPU pods is four pods the scheduler may spread.
    assert gangs([TraceJob("d", 0, 1, 4)], 8, gpus_per_pod=1) == [SimJob("d", 0, 1, 4, 1)]
    report = simulate([*TRACE, TraceJob("huge", 3.0, 1.0, 64)], FOUR_NODES, policies=["fifo_first_fit"])
    assert report.too_big_jobs == 1
    assert report.jobs == 4


def test_simulate_command_prints_the_tables_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text(
        "timestamp,duration,num_gpus\n"
        + "".join(f"2017-10-01 10:{i:02d}:00,{300 + 60 * i}.0,{[1, 2, 8, 16][i % 4]}\n" for i in range(40))
    )
    output = tmp_path / "out" / "sim.json"
    code = main(
        ["simulate", "trace", str(trace), "--cluster", str(REPO / "hack/clusters/small.yaml"), "--json", str(output)]
    )
    assert code == 0
    printed = capsys.readouterr()
    assert "smallest dom" in printed.out
    assert "durations known: none" in printed.out
    assert "events" in printed.err  # the progress line
    figures = json.loads(output.read_text())
    assert set(figures["policies"]) == {"aisched", "kueue", "volcano", "tiresias", "fifo_first_fit", "fifo_spread"}
    assert figures["jobs"] == 40
    for policy in figures["policies"].values():
        assert {"avg_jct_s", "p95_jct_s", "effective_utilization", "in_smallest_domain", "p99_slowdown"} <= set(policy)


def test_aisched_in_the_simulator_has_another_cycle_at_once_for_the_jobs_a_full_cycle_did_not_reach() -> None:
    jobs = ADMISSIONS_PER_CYCLE + 10
    policy = AischedPolicy(ClusterSnapshot(generated_cluster(GridSpec(nodes=(jobs + 7) // 8, gpus_per_node=8))))
    for i in range(jobs):
        policy.submit(SimJob(f"j{i:04d}", 0.0, 100.0, 1, 1), 0.0)
    first = policy.cycle(0.0)
    assert (len(first.started), first.wake_at) == (ADMISSIONS_PER_CYCLE, 0.0)
    second = policy.cycle(0.0)
    assert len(second.started) == 10 and second.wake_at != 0.0
