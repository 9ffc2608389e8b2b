"""The end-to-end benchmark's pure parts: the job mix, each arm's workers, the figures of one arm, the costs."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from benchmarks import e2e_scale as bench
from benchmarks import e2e_workloads as workloads
from benchmarks.e2e_measure import Costs, arm_figures, process_cpu_seconds


def test_the_mix_has_the_count_asked_in_the_weights_proportions() -> None:
    mix = workloads.parse_mix("1x1=50,2x8=30,4x8=20")
    shapes = workloads.job_mix(7, mix, seed=3)

    # 3.5, 2.1, 1.4 jobs: the largest remainders (0.5, then 0.4) get the two jobs left over.
    assert Counter(s.label for s in shapes) == {"1x1": 4, "2x8": 2, "4x8": 1}


def test_the_mix_is_shuffled_by_its_seed_and_only_by_it() -> None:
    mix = workloads.parse_mix(workloads.DEFAULT_MIX)

    assert workloads.job_mix(400, mix, seed=1) == workloads.job_mix(400, mix, seed=1)
    assert workloads.job_mix(400, mix, seed=1) != workloads.job_mix(400, mix, seed=2)
    assert sorted(workloads.job_mix(400, mix, seed=1)) == sorted(workloads.job_mix(400, mix, seed=2))


@pytest.mark.parametrize("text", ["1x1=0", "1x1=0,2x8=0", "1x1=-1,2x8=3"])
def test_a_mix_without_positive_weights_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="positive weights"):
        workloads.parse_mix(text)


def test_the_rate_counts_from_the_first_submission_to_the_last_bind() -> None:
    # Four pods submitted at 10 s and 11 s, bound 1, 2, 3 and 5 s after.
    figures = arm_figures([(10.0, 11.0), (10.0, 12.0), (11.0, 14.0), (11.0, 16.0)])

    assert figures.span_s == 6.0
    assert figures.pods_per_s == pytest.approx(4 / 6)
    assert figures.bind_p50_s == pytest.approx(2.5)
    assert 4.9 < figures.bind_p99_s <= 5.0


def test_baseline_pods_are_the_workers_without_gate_pin_or_owner() -> None:
    job = workloads.training_job("llm", workloads.GangShape(replicas=4, gpus_per_replica=8))
    pods = workloads.plain_pods(job)

    assert [p["metadata"]["name"] for p in pods] == [f"llm-g0-w{rank}" for rank in range(4)]
    for pod in pods:
        assert "schedulingGates" not in pod["spec"]
        assert "nodeSelector" not in pod["spec"]
        assert "ownerReferences" not in pod["metadata"]
        assert pod["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": 8}


def test_the_indexed_job_arm_runs_the_same_workers_with_a_headless_service() -> None:
    job = workloads.training_job("llm", workloads.GangShape(replicas=4, gpus_per_replica=8))
    service, batch_job = workloads.indexed_job(job)
    worker = workloads.plain_pods(job)[0]

    assert service["spec"] == {"clusterIP": "None", "selector": {"batch.kubernetes.io/job-name": "llm"}}
    spec = batch_job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    pod_spec = spec["template"]["spec"]
    assert pod_spec["containers"] == worker["spec"]["containers"] and pod_spec["subdomain"] == "llm"
    assert "aisched.io/rank" not in spec["template"]["metadata"]["labels"]
    assert spec["template"]["metadata"]["annotations"] == {workloads.KEEP_RUNNING: "true"}
    # Its pods' ranks are their completion indexes.
    indexed_pod = {"metadata": {"labels": {}, "annotations": {workloads.COMPLETION_INDEX: "3"}}}
    assert workloads.rank_of(indexed_pod) == 3 and workloads.rank_of(worker) == 0


def test_a_gang_is_known_by_its_job_and_a_lone_object_by_its_name() -> None:
    job = workloads.training_job("llm", workloads.GangShape(replicas=2, gpus_per_replica=8))
    assert bench.name_of(workloads.indexed_job(job)) == "llm" == bench.name_of(job)


def test_costs_of_an_arm_are_what_changed_during_it() -> None:
    before = Costs({"etcd": 1.0, "aisched": 2.0}, {"POST pods": 10.0}, {"POST pods": 0.5})
    after = Costs(
        {"etcd": 1.5, "aisched": 6.04}, {"POST pods": 16.0, "PATCH pods": 3.0}, {"POST pods": 0.8, "PATCH pods": 0.1}
    )
    assert after.since(before) == {
        "cpu_s": {"aisched": 4.0, "etcd": 0.5},  # largest first
        "api_writes": {"POST pods": 6.0, "PATCH pods": 3.0},
        "api_write_s": {"POST pods": 0.3, "PATCH pods": 0.1},
    }


def test_cpu_seconds_of_a_process_grow_and_a_gone_one_reads_zero() -> None:
    assert process_cpu_seconds(os.getpid()) > 0
    assert process_cpu_seconds(2**22 + 12345) == 0.0  # above pid_max: never a live process


def test_a_cluster_dir_without_a_cluster_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--cluster-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'admin.kubeconfig'}: no such file")
