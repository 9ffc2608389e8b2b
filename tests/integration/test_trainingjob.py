"""TrainingJobs end to end: the operator against the local GPU cluster (small preset)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from aisched.testing.cluster import (
    TIMEOUT,
    LocalCluster,
    apply,
    get_object,
    job,
    make_pod_exit,
    node_labels,
    phase_of,
    running_pods,
    taint_for_interruption,
    wait_for,
    wait_phase,
    workers,
)
from aisched.testing.operator import OperatorProcess
from tests.builders import a_queue, a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]


def test_a_gang_runs_on_the_nodes_it_was_placed_on(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, a_training_job("ddp").replicas(2).gpus(4).obj())
    status = wait_phase(cluster, namespace, "ddp", "Running")["status"]
    pods = running_pods(cluster, namespace, "ddp")
    assert len(pods) == 2
    by_rank = {int(p["metadata"]["labels"]["aisched.io/rank"]): p for p in pods}
    assert [by_rank[r]["spec"]["nodeName"] for r in (0, 1)] == status["placement"]["nodes"]
    # 2 x 4 GPUs fit one 8-GPU node: the tightest domain there is.
    assert status["placement"]["level"] == "Node"
    env = {e["name"]: e["value"] for e in by_rank[1]["spec"]["containers"][0]["env"]}
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["MASTER_ADDR"]) == ("2", "1", "ddp-worker-0.ddp")
    assert env["WORLD_SIZE"] == "8"  # processes: 2 pods x 4 GPUs
    service = get_object(cluster, "service", "ddp", namespace)
    assert service["spec"]["clusterIP"] == "None"


def test_required_rack_keeps_the_gang_in_one_rack(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, a_training_job("racked").replicas(2).gpus(8).required_level("Rack").obj())
    wait_phase(cluster, namespace, "racked", "Running")
    racks = {
        node_labels(cluster, p["spec"]["nodeName"])["aisched.io/rack"]
        for p in running_pods(cluster, namespace, "racked")
    }
    assert len(racks) == 1


def test_a_gang_too_big_for_its_topology_stays_queued_and_says_why(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, a_training_job("huge").replicas(16).gpus(8).required_level("Rack").obj())
    status = wait_phase(cluster, namespace, "huge", "Queued")["status"]
    wait_for(lambda: job(cluster, namespace, "huge")["status"].get("reason") == "TopologyTooSmall", TIMEOUT, "reason")
    message = job(cluster, namespace, "huge")["status"]["message"]
    assert "needs 128 GPUs" in message and "Rack" in message, status
    assert workers(cluster, namespace, "huge") == []


def test_a_failed_worker_restarts_the_whole_gang(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient
) -> None:
    apply(cluster, namespace, a_training_job("flaky").replicas(2).gpus(1).obj())
    wait_phase(cluster, namespace, "flaky", "Running")
    victim = running_pods(cluster, namespace, "flaky")[0]["metadata"]["name"]
    make_pod_exit(api_client, victim, namespace, "Failed", exit_code=1)
    wait_for(lambda: job(cluster, namespace, "flaky")["status"].get("restarts") == 1, TIMEOUT, "a restart")
    status = wait_phase(cluster, namespace, "flaky", "Running")["status"]
    assert status["gangGeneration"] == 2
    pods = running_pods(cluster, namespace, "flaky")
    assert {p["metadata"]["labels"]["aisched.io/gang-generation"] for p in pods} == {"2"}


def test_a_job_succeeds_when_every_worker_does(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient
) -> None:
    apply(cluster, namespace, a_training_job("done").replicas(2).gpus(1).obj())
    wait_phase(cluster, namespace, "done", "Running")
    for pod in running_pods(cluster, namespace, "done"):
        make_pod_exit(api_client, pod["metadata"]["name"], namespace, "Succeeded")
    status = wait_phase(cluster, namespace, "done", "Succeeded")["status"]
    assert status["completionTime"]


def test_suspend_stops_the_gang_and_resume_runs_it_again(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, a_training_job("pausable").replicas(2).gpus(2).obj())
    wait_phase(cluster, namespace, "pausable", "Running")
    cluster.kubectl("patch", "tj", "pausable", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_phase(cluster, namespace, "pausable", "Suspended")
    wait_for(lambda: not workers(cluster, namespace, "pausable"), TIMEOUT, "the workers to go")
    cluster.kubectl("patch", "tj", "pausable", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_phase(cluster, namespace, "pausable", "Running")
    assert len(running_pods(cluster, namespace, "pausable")) == 2


def test_deleting_a_job_removes_its_pods_and_service(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, a_training_job("brief").replicas(2).gpus(1).obj())
    wait_phase(cluster, namespace, "brief", "Running")
    assert cluster.kubectl("delete", "tj", "brief", "-n", namespace, "--wait=true").returncode == 0
    wait_for(lambda: not workers(cluster, namespace, "brief"), TIMEOUT, "owner references to remove the pods")
    wait_for(lambda: not get_object(cluster, "service", "brief", namespace), TIMEOUT, "the Service to go")


def test_operator_killed_mid_placement_never_duplicates_pods(
    cluster: LocalCluster, namespace: str, operator: OperatorProcess
) -> None:
    apply(cluster, namespace, a_training_job("survivor").replicas(4).gpus(1).obj())
    wait_for(lambda: phase_of(cluster, namespace, "survivor") in ("Placing", "Running"), TIMEOUT, "admission")
    operator.kill()
    operator.start()
    wait_phase(cluster, namespace, "survivor", "Running")
    pods = workers(cluster, namespace, "survivor")
    assert len(pods) == 4
    assert len({p["metadata"]["labels"]["aisched.io/rank"] for p in pods}) == 4


def test_spot_interruption_checkpoints_and_resumes_elsewhere(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient
) -> None:
    apply(
        cluster,
        namespace,
        a_training_job("spotty").replicas(2).gpus(1).spot("Only").set("checkpoint.path", "/ckpt").obj(),
    )
    status = wait_phase(cluster, namespace, "spotty", "Running")["status"]
    first_nodes = set(status["placement"]["nodes"])
    assert status["placement"]["capacityType"] == "Spot"
    # The workers save on SIGTERM and report the step in their termination message.
    report = json.dumps({"step": 1200, "path": "/ckpt/step-1200", "time": "2026-01-01T00:00:00Z"})
    for pod in running_pods(cluster, namespace, "spotty"):
        make_pod_exit(api_client, pod["metadata"]["name"], namespace, "Failed", message=report, exit_code=75)
    wait_for(
        lambda: job(cluster, namespace, "spotty")["status"].get("lastCheckpoint", {}).get("step") == 1200,
        TIMEOUT,
        "the checkpoint to be recorded",
    )
    for node in first_nodes:
        taint_for_interruption(api_client, node, "aws")
    try:
        status = wait_for(
            lambda: (
                (s := job(cluster, namespace, "spotty")["status"]).get("phase") == "Running"
                and (s.get("gangGeneration") or 0) >= 2
                and s
            ),
            TIMEOUT * 2,
            "the gang to run again",
        )
        assert status["interruptions"] >= 1
        assert not set(status["placement"]["nodes"]) & first_nodes
        env = {
            e["name"]: e["value"] for e in running_pods(cluster, namespace, "spotty")[0]["spec"]["containers"][0]["env"]
        }
        assert env["AISCHED_RESUME_STEP"] == "1200"
        assert env["AISCHED_RESUME_PATH"] == "/ckpt/step-1200"
    finally:
        for node in first_nodes:
            cluster.kubectl("taint", "node", node, "aws-node-termination-handler/spot-itn-")
            cluster.kubectl("uncordon", node)


@pytest.fixture
def queue(cluster: LocalCluster) -> Iterator[str]:
    """A Queue of 8 GPUs of its own (no cohort to borrow from), deleted afterwards."""
    name = f"q-{uuid.uuid4().hex[:6]}"
    apply(cluster, "default", a_queue(name, nominal_gpus=8).obj())
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")


def test_a_queue_never_runs_more_than_its_quota(cluster: LocalCluster, namespace: str, queue: str) -> None:
    apply(cluster, namespace, a_training_job("first").queue(queue).replicas(2).gpus(4).obj())
    wait_phase(cluster, namespace, "first", "Running")
    apply(cluster, namespace, a_training_job("second").queue(queue).replicas(1).gpus(4).obj())
    wait_for(
        lambda: job(cluster, namespace, "second").get("status", {}).get("reason") == "QuotaExceeded",
        TIMEOUT,
        "the second job to wait for quota",
    )
    assert "quota" in job(cluster, namespace, "second")["status"]["message"]
    wait_for(
        lambda: get_object(cluster, "queue", queue, "").get("status", {}).get("usedGPUs") == 8, TIMEOUT, "queue status"
    )


def test_higher_priority_preempts_a_whole_lower_priority_gang(
    cluster: LocalCluster, namespace: str, queue: str
) -> None:
    apply(cluster, namespace, a_training_job("low").queue(queue).replicas(2).gpus(4).obj())
    wait_phase(cluster, namespace, "low", "Running")
    apply(cluster, namespace, a_training_job("high").queue(queue).priority(100).replicas(2).gpus(4).obj())
    wait_phase(cluster, namespace, "high", "Running")
    low = wait_phase(cluster, namespace, "low", "Queued")["status"]
    preempted = next(c for c in low["conditions"] if c["type"] == "Preempted")
    assert preempted["reason"] == "Preempted"
    assert "preempted by" in preempted["message"]
    assert "/high" in preempted["message"]
    assert running_pods(cluster, namespace, "low") == []
