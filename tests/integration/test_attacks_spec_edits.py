"""Issue 37's spec edits under running workloads, against the real API server and operator: what a
running worker holds (gpusPerReplica, gpuShare, gpuType) cannot be edited under it, and its queue's
quota holds. Before the CRD's transition rules (`aisched.api.running_shape`), lowering a running
8-GPU job to 1 let a 7-GPU job in beside it (15 GPUs on a quota of 8), and a share added to running
whole-GPU jobs had them charged 1% of a GPU each."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aisched.api.crd import all_crds
from aisched.api.running_shape import (
    TRAINING_JOB_SHAPE_RULES,
    inference_service_shape_message,
    training_job_shape_message,
)
from aisched.policy.queueing import QUOTA_EXCEEDED
from aisched.testing.cluster import (
    TIMEOUT,
    LocalCluster,
    apply,
    get_object,
    job,
    wait_for,
    wait_phase,
    workers,
)
from tests.builders import a_queue, a_training_job, an_inference_service

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
A100 = "NVIDIA-A100-SXM4-40GB"
GPU = "nvidia.com/gpu"


def a_queue_of(cluster: LocalCluster, namespace: str, gpus: int) -> str:
    name = f"edits-{uuid.uuid4().hex[:6]}"
    queue = a_queue(name, nominal_gpus=gpus).obj()
    queue["spec"]["namespaces"] = [namespace]
    apply(cluster, "default", queue)
    return name


@pytest.fixture
def queue_of_8(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    name = a_queue_of(cluster, namespace, 8)
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")


@pytest.fixture
def queue_of_2(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    name = a_queue_of(cluster, namespace, 2)
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")


@pytest.fixture
def shape_rules_off(cluster: LocalCluster) -> Iterator[None]:
    """The TrainingJob CRD without its shape rules, as if the API server did not enforce them; put back after."""
    crd = next(c for c in all_crds() if c["spec"]["names"]["kind"] == "TrainingJob")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["x-kubernetes-validations"] = [
        rule for rule in schema["x-kubernetes-validations"] if rule not in TRAINING_JOB_SHAPE_RULES
    ]
    applied = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(crd))
    assert applied.returncode == 0, applied.stderr
    try:
        yield
    finally:
        crds = Path(__file__).resolve().parents[2] / "crds" / "trainingjobs.aisched.io.yaml"
        restored = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
        assert restored.returncode == 0, restored.stderr


def patch_spec(cluster: LocalCluster, kind: str, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    return cluster.kubectl("patch", kind, name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}))


def gpus_in_pods(cluster: LocalCluster, namespace: str, name: str) -> int:
    """GPUs the job's live workers ask of kube-scheduler, as the API server holds them."""
    return sum(
        int((c.get("resources", {}).get("limits") or {}).get(GPU, 0))
        for pod in workers(cluster, namespace, name)
        if pod["status"].get("phase") not in ("Succeeded", "Failed")
        for c in pod["spec"]["containers"]
    )


def waits_for_quota(cluster: LocalCluster, namespace: str, name: str) -> bool:
    status = job(cluster, namespace, name).get("status", {})
    return bool(status.get("phase") == "Queued" and status.get("reason") == QUOTA_EXCEEDED)


def test_lowering_gpus_per_replica_of_a_running_job_is_refused_and_the_quota_holds(
    cluster: LocalCluster, namespace: str, queue_of_8: str
) -> None:
    apply(cluster, namespace, a_training_job("big").queue(queue_of_8).gpu_type(A100).gpus(8).obj())
    wait_phase(cluster, namespace, "big", "Running")

    lowered = patch_spec(cluster, "tj", namespace, "big", {"gpusPerReplica": 1})
    assert lowered.returncode != 0
    assert training_job_shape_message("gpusPerReplica") in lowered.stderr, lowered.stderr
    assert job(cluster, namespace, "big")["spec"]["gpusPerReplica"] == 8
    assert gpus_in_pods(cluster, namespace, "big") == 8

    # The 7-GPU job that got in beside it before: the queue's 8 GPUs are held, so it waits.
    apply(cluster, namespace, a_training_job("next").queue(queue_of_8).gpu_type(A100).gpus(7).obj())
    wait_for(lambda: waits_for_quota(cluster, namespace, "next"), TIMEOUT, "next to wait for its queue's quota")
    assert not workers(cluster, namespace, "next")

    # What the message says to do works: suspended, the job's shape may change, and it runs with it.
    assert patch_spec(cluster, "tj", namespace, "big", {"suspend": True}).returncode == 0
    wait_phase(cluster, namespace, "big", "Suspended")
    wait_for(lambda: not workers(cluster, namespace, "big"), TIMEOUT, "big's workers to go")
    resized = patch_spec(cluster, "tj", namespace, "big", {"gpusPerReplica": 1})
    assert resized.returncode == 0, resized.stderr


def test_a_share_added_to_running_whole_gpu_jobs_is_refused_and_the_quota_holds(
    cluster: LocalCluster, namespace: str, queue_of_2: str
) -> None:
    for name in ("w1", "w2"):
        apply(cluster, namespace, a_training_job(name).queue(queue_of_2).gpu_type(A100).gpus(1).obj())
    for name in ("w1", "w2"):
        wait_phase(cluster, namespace, name, "Running")

    for name in ("w1", "w2"):
        shared = patch_spec(cluster, "tj", namespace, name, {"gpuShare": {"computePercent": 1}})
        assert shared.returncode != 0
        assert training_job_shape_message("gpuShare") in shared.stderr, shared.stderr
        assert "gpuShare" not in job(cluster, namespace, name)["spec"]
    assert patch_spec(cluster, "tj", namespace, "w1", {"gpuType": "NVIDIA-H100-80GB-HBM3"}).returncode != 0

    apply(cluster, namespace, a_training_job("w3").queue(queue_of_2).gpu_type(A100).gpus(1).obj())
    wait_for(lambda: waits_for_quota(cluster, namespace, "w3"), TIMEOUT, "w3 to wait for its queue's quota")
    assert gpus_in_pods(cluster, namespace, "w1") + gpus_in_pods(cluster, namespace, "w2") == 2
    assert not workers(cluster, namespace, "w3")


def test_a_share_added_to_a_service_with_replicas_is_refused(
    cluster: LocalCluster, namespace: str, queue_of_2: str
) -> None:
    service = an_inference_service("chat").replicas(1).obj()
    service["spec"].update(queue=queue_of_2, gpuType=A100)
    apply(cluster, namespace, service)
    wait_for(
        lambda: (get_object(cluster, "inferenceservice", "chat", namespace).get("status") or {}).get("replicas") == 1,
        TIMEOUT,
        "chat to run its replica",
    )
    shared = patch_spec(cluster, "inferenceservice", namespace, "chat", {"gpuShare": {"computePercent": 1}})
    assert shared.returncode != 0
    assert inference_service_shape_message("gpuShare") in shared.stderr, shared.stderr


@pytest.mark.usefixtures("shape_rules_off")
def test_with_the_rules_off_the_edits_land_and_still_no_gang_runs_uncharged(
    cluster: LocalCluster, namespace: str, queue_of_8: str
) -> None:
    apply(cluster, namespace, a_training_job("big").queue(queue_of_8).gpu_type(A100).gpus(8).obj())
    wait_phase(cluster, namespace, "big", "Running")
    lowered = wait_for(
        lambda: patch_spec(cluster, "tj", namespace, "big", {"gpusPerReplica": 1}).returncode == 0,
        TIMEOUT,
        "the CRD without its rules to take the edit",
    )
    assert lowered and job(cluster, namespace, "big")["spec"]["gpusPerReplica"] == 1
    assert gpus_in_pods(cluster, namespace, "big") == 8

    # Charged the 8 GPUs it was admitted with and its pod holds, not the 1 its spec says now.
    apply(cluster, namespace, a_training_job("next").queue(queue_of_8).gpu_type(A100).gpus(7).obj())
    wait_for(lambda: waits_for_quota(cluster, namespace, "next"), TIMEOUT, "next to wait for its queue's quota")
    assert not workers(cluster, namespace, "next")
    assert gpus_in_pods(cluster, namespace, "big") == 8
