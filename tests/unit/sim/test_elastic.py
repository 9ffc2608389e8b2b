"""Elastic jobs in the simulator: which jobs are elastic, how aisched's resizes are carried out and
accounted, and that the peers never resize anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisched.cli import main
from aisched.policy.cluster import ClusterSnapshot
from aisched.sim.clusters import GridSpec, generated_cluster
from aisched.sim.engine import SimOptions, simulate
from aisched.sim.jobs import SimJob, at, gangs
from aisched.sim.policies import AischedPolicy
from aisched.sim.traces import TraceJob

ONE_NODE = generated_cluster(GridSpec(nodes=1, gpus_per_node=8))
ALL_ELASTIC = SimOptions(elastic_share=1.0, gpus_per_pod=4, restart_overhead_s=60.0)


def test_a_seeded_share_of_jobs_is_elastic_from_half_to_twice_their_replicas() -> None:
    trace = [TraceJob(f"j{i}", float(i), 100.0, gpus) for i, gpus in enumerate([1, 2, 4, 16] * 50)]
    none, half, every = (gangs(trace, 8, gpus_per_pod=4, elastic_share=share) for share in (0.0, 0.5, 1.0))
    assert not any(j.elastic for j in none)
    assert all(j.elastic for j in every)
    assert 0.35 < sum(j.elastic for j in half) / len(half) < 0.65
    assert gangs(trace, 8, gpus_per_pod=4, elastic_share=0.5) == half  # seeded
    assert {(j.gpus, j.replicas, j.min_replicas, j.max_replicas) for j in every} == {
        (1, 1, 1, 2),  # one 1-GPU pod, may grow to two
        (2, 1, 1, 2),
        (4, 1, 1, 2),  # one 4-GPU pod: never below it
        (16, 4, 2, 8),
    }
    # A larger share keeps the jobs a smaller one made elastic; nothing else about a job changes.
    assert all(b.elastic for a, b in zip(half, every, strict=True) if a.elastic)
    assert [(j.key, j.replicas, j.estimate) for j in none] == [(j.key, j.replicas, j.estimate) for j in every]


def test_aisched_grows_into_idle_gpus_and_carries_attained_service_across_the_resize() -> None:
    snapshot = ClusterSnapshot(ONE_NODE)
    policy = AischedPolicy(snapshot)
    a, b = SimJob("A", 0.0, 3000.0, 1, 4, min_replicas=1, max_replicas=2), SimJob("B", 10.0, 690.0, 1, 4)
    policy.submit(a, 0.0)
    assert [s.job.key for s in policy.cycle(0.0).started] == ["A"]
    policy.submit(b, 10.0)
    assert [s.job.key for s in policy.cycle(10.0).started] == ["B"]
    policy.finish(b, 700.0)
    outcome = policy.cycle(700.0)
    assert [(r.job.key, len(r.nodes)) for r in outcome.resized] == [("A", 2)]
    request = policy.running["A"]
    assert request.started == at(700.0)
    assert request.attained_gpu_seconds == 4 * 700.0  # the 4-GPU run that ended at the resize
    assert request.placement is not None and request.placement.total_gpus == 8
    assert snapshot.used_total == 8


def test_a_resize_restarts_the_job_at_the_pace_of_its_new_size_and_counts_as_its_own_figure() -> None:
    # A (4 GPUs, 3000 s) runs from 0; B takes the other 4 GPUs from 10 to 700. At 700 A has run its
    # queue's minimum run (600 s) and grows to 8 GPUs: a 60 s restart, then linear scaling at growth
    # efficiency 0.5 (pace 1.5). C (4 GPUs, 100 s) arrives at 1000 and takes the growth back: 240 s
    # at 1.5 done (360 s of work), another restart, pace 1 from 1060. C ends at 1100, but A has run
    # only 100 s since its last resize; the policy asks for a cycle at 1600, when it has run 600 s,
    # and A grows again there: 540 s done, a restart, and the last 1400 s of work at pace 1.5.
    trace = [TraceJob("A", 0.0, 3000.0, 4), TraceJob("B", 10.0, 690.0, 4), TraceJob("C", 1000.0, 100.0, 4)]
    report = simulate(trace, ONE_NODE, policies=["aisched"], options=ALL_ELASTIC).policies["aisched"]
    a_ends = 1660.0 + 1400.0 / 1.5
    assert report.avg_jct_s == pytest.approx((a_ends + 690.0 + 100.0) / 3)
    assert report.resizes_per_job == pytest.approx(3 / 3)
    assert report.preemptions == 0
    assert report.lost_gpu_seconds_per_job == pytest.approx(60.0 * (8 + 4 + 8) / 3)
    assert report.in_smallest_domain == 1.0  # the grown gang stayed on its node
    assert report.makespan_s == pytest.approx(a_ends)  # the ends of runs cut short are no events
    # Useful work is the jobs' own GPU-time, whatever they held: 4 x (3000 + 690 + 100).
    assert report.effective_utilization_until_done * 8 * a_ends == pytest.approx(4 * 3790.0)


def test_without_elastic_jobs_nothing_is_resized() -> None:
    trace = [TraceJob("A", 0.0, 1000.0, 4), TraceJob("B", 10.0, 100.0, 4)]
    report = simulate(trace, ONE_NODE, policies=["aisched"], options=SimOptions(gpus_per_pod=4))
    assert report.policies["aisched"].resizes_per_job == 0
    assert report.policies["aisched"].avg_jct_s == pytest.approx((1000.0 + 100.0) / 2)


def test_peers_run_elastic_jobs_at_their_requested_size() -> None:
    nodes = generated_cluster(GridSpec(nodes=4, gpus_per_node=8, nodes_per_rack=2, racks_per_zone=2))
    trace = [TraceJob(f"j{i}", 30.0 * i, 200.0 + 97.0 * (i % 7), [1, 2, 4, 8, 16][i % 5]) for i in range(40)]
    peers = ["kueue", "volcano", "tiresias", "fifo_first_fit", "fifo_spread"]
    fixed = simulate(trace, nodes, policies=peers, options=SimOptions(gpus_per_pod=4))
    elastic = simulate(trace, nodes, policies=peers, options=ALL_ELASTIC)
    for name in peers:
        assert elastic.policies[name].resizes_per_job == 0
        assert elastic.policies[name].to_json() == fixed.policies[name].to_json()


def test_the_simulate_command_takes_the_elastic_share_and_the_scaling_data(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text(
        "timestamp,duration,num_gpus\n"
        + "".join(f"2017-10-01 10:{i:02d}:00,{900 + 60 * i}.0,{[1, 2, 4][i % 3]}\n" for i in range(12))
    )
    placement = tmp_path / "placement"
    placement.mkdir()
    (placement / "toy.csv").write_text("placement,local_bsz,step_time,sync_time\n1,4,1.0,0\n2,4,1.25,0\n11,4,2.0,0\n")
    output = tmp_path / "sim.json"
    arguments = ["simulate", "trace", str(trace), "--nodes", "2", "--policies", "aisched", "--json", str(output)]
    elastic = ["--elastic-share", "1", "--growth-efficiency", "0.25", "--placement-data", str(placement)]
    assert main([*arguments, *elastic]) == 0
    options = json.loads(output.read_text())["options"]
    assert options["elastic_share"] == 1.0
    assert options["scaling"] == {"growth_efficiency": 0.25, "per_gpu_efficiency": {"toy": {"1": 1.0, "2": 0.8}}}
