"""PyTorchJobs and RayClusters scheduled by aisched, with their projects' real controllers running
(training-operator v1.8.1 and KubeRay v1.5.0, which the test cluster starts: tests/integration/conftest.py),
the chart's workload admission policies in force, and the operator running.

Each is held at creation (suspended, its pods gated), admitted in the one cycle beside every other
kind, charged to the same quota, and preempted as a whole by suspending it again: its own controller
then deletes its pods.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from aisched.policy.workloads.model import PLACEMENT_ANNOTATION, PRIORITY_ANNOTATION, QUEUE_LABEL
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, get_object, wait_for
from aisched.testing.operator import OperatorProcess
from tests.integration.test_frameworks import RAY_IMAGE, pytorch_simple, rayjob_sample
from tests.integration.test_workloads import (
    events_of,
    gated,
    indexed_job,
    pod_spec,
    pods_of,
    running,
    running_pods,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator", "held_kinds")]
PYTORCH_PODS = "training.kubeflow.org/job-name"
RAY_PODS = "ray.io/cluster"


def gpu_pytorchjob(name: str, queue: str, gpus: int, *, workers: int = 1, priority: int = 0) -> dict[str, Any]:
    """training-operator's own example, each replica asking GPUs, labelled for QUEUE."""
    job = pytorch_simple(name)
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    job["metadata"]["annotations"] = {PRIORITY_ANNOTATION: str(priority)}
    for kind, spec in job["spec"]["pytorchReplicaSpecs"].items():
        spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        if kind == "Worker":
            spec["replicas"] = workers
    return job


def gpu_raycluster(name: str, queue: str, workers: int, gpus: int, priority: int = 0) -> dict[str, Any]:
    """A RayCluster as KubeRay's samples write one (a head of no GPU, one worker group), labelled for QUEUE."""
    head = {"name": "ray-head", "image": RAY_IMAGE, "ports": [{"containerPort": 6379, "name": "gcs"}]}
    worker = {"name": "ray-worker", "image": RAY_IMAGE, "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}, "annotations": {PRIORITY_ANNOTATION: str(priority)}},
        "spec": {
            "rayVersion": "2.46.0",
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [head]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [worker]}},
                }
            ],
        },
    }


def test_a_pytorchjob_is_held_then_admitted_and_runs_where_the_operator_placed_it(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    apply(cluster, namespace, gpu_pytorchjob("mnist", kinds_queue, gpus=1, workers=2))
    pods = running_pods(cluster, namespace, f"{PYTORCH_PODS}=mnist", 3)
    job = get_object(cluster, "pytorchjob", "mnist", namespace)
    assert not job["spec"]["runPolicy"].get("suspend")
    assert PLACEMENT_ANNOTATION in job["metadata"]["annotations"]
    assert all(p["spec"]["nodeSelector"]["kubernetes.io/hostname"] == p["spec"]["nodeName"] for p in pods)
    assert not any(gated(p) for p in pods)


def test_a_higher_priority_pytorchjob_preempts_a_rayclusters_workers_as_a_whole(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    apply(cluster, namespace, gpu_raycluster("ray", kinds_queue, workers=2, gpus=2))
    running_pods(cluster, namespace, f"{RAY_PODS}=ray", 3)  # the head and both workers
    apply(cluster, namespace, gpu_pytorchjob("urgent", kinds_queue, gpus=2, workers=1, priority=5))
    running_pods(cluster, namespace, f"{PYTORCH_PODS}=urgent", 2)
    ray = get_object(cluster, "raycluster", "ray", namespace)
    assert ray["spec"]["suspend"] is True
    wait_for(lambda: not pods_of(cluster, namespace, f"{RAY_PODS}=ray"), TIMEOUT, "every pod of the RayCluster to go")


def test_one_queues_quota_holds_across_four_kinds(cluster: LocalCluster, namespace: str, kinds_queue: str) -> None:
    """A Job, a PyTorchJob's master, a RayCluster's worker and a Deployment's replica, 1 GPU each, fill the
    4-GPU queue; a fifth GPU of any kind waits."""
    apply(cluster, namespace, indexed_job("batch", kinds_queue, pods=1, gpus=1))
    pytorch = gpu_pytorchjob("torch", kinds_queue, gpus=1)
    del pytorch["spec"]["pytorchReplicaSpecs"]["Worker"]
    apply(cluster, namespace, pytorch)
    apply(cluster, namespace, gpu_raycluster("ray", kinds_queue, workers=1, gpus=1))
    labels = {"app": "server"}
    server = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "server", "labels": {QUEUE_LABEL: kinds_queue}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(1) | {"restartPolicy": "Always"}},
        },
    }
    running_pods(cluster, namespace, "batch.kubernetes.io/job-name=batch", 1)
    running_pods(cluster, namespace, f"{PYTORCH_PODS}=torch", 1)
    running_pods(cluster, namespace, f"{RAY_PODS}=ray", 2)
    apply(cluster, namespace, server)

    def one_replica_runs_one_waits() -> bool:
        pods = pods_of(cluster, namespace, "app=server")
        return len(pods) == 2 and sum(running([p]) for p in pods) == 1 and sum(gated(p) for p in pods) == 1

    wait_for(one_replica_runs_one_waits, TIMEOUT, "one replica to run in the last GPU and the other to wait")
    late = copy.deepcopy(indexed_job("late", kinds_queue, pods=1, gpus=1))
    apply(cluster, namespace, late)
    wait_for(
        lambda: bool(get_object(cluster, "job", "late", namespace)["spec"].get("suspend")),
        TIMEOUT,
        "the late Job to stay suspended",
    )
    assert not pods_of(cluster, namespace, "batch.kubernetes.io/job-name=late")


@contextmanager
def frozen(cluster: LocalCluster, component: str) -> Iterator[None]:
    """COMPONENT of the local cluster (hack/cluster.sh's process) paused, as if it were not installed."""
    pid = int((cluster.state_dir / "pids" / f"{component}.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_pytorchjob_whose_controller_is_not_running_gives_its_gpus_back(
    cluster: LocalCluster, namespace: str, kinds_queue: str, operator: OperatorProcess
) -> None:
    """Admitted, unsuspended, and no controller makes its pods: past the bound it is stopped, and says why."""
    with operator.restarted_with({"AISCHED_WORKLOAD_PODS_READY_SECONDS": "5"}), frozen(cluster, "training-operator"):
        apply(cluster, namespace, gpu_pytorchjob("orphaned", kinds_queue, gpus=1))

        def stopped_for_its_pods() -> bool:
            reasons = [e.split(":", 1)[0] for e in events_of(cluster, namespace, "orphaned")]
            return "PodsNotReady" in reasons

        wait_for(stopped_for_its_pods, TIMEOUT * 2, "the PyTorchJob to be stopped for pods that never came")
        job = get_object(cluster, "pytorchjob", "orphaned", namespace)
        assert job["spec"]["runPolicy"]["suspend"] is True
        assert PLACEMENT_ANNOTATION not in (job["metadata"].get("annotations") or {})
        # Its GPUs are free again: a Job of the whole queue runs.
        apply(cluster, namespace, indexed_job("whole", kinds_queue, pods=2, gpus=2))
        running_pods(cluster, namespace, "batch.kubernetes.io/job-name=whole", 2)


def test_a_rayjob_as_kuberays_sample_writes_it_is_held_then_its_cluster_placed(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    """The sample with its cluster going when it ends (KubeRay suspends only such RayJobs), a GPU on its worker."""
    job = rayjob_sample("sample", shutdown_after_job_finishes=True)
    job["metadata"]["labels"] = {QUEUE_LABEL: kinds_queue}
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    worker["resources"]["limits"]["nvidia.com/gpu"] = "1"
    apply(cluster, namespace, job)
    # KubeRay names the cluster it makes; its pods carry the RayJob's queue label, copied into its templates.
    pods = running_pods(cluster, namespace, f"{QUEUE_LABEL}={kinds_queue},ray.io/node-type", 2)
    held = get_object(cluster, "rayjob", "sample", namespace)
    # KubeRay writes the spec back without a false suspend: absent or false, it runs.
    assert not held["spec"].get("suspend") and PLACEMENT_ANNOTATION in held["metadata"]["annotations"]
    (gpu_pod,) = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert gpu_pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == gpu_pod["spec"]["nodeName"]
    assert not any(gated(p) for p in pods)


def test_a_rayclusters_workers_resized_while_it_runs_stop_it_and_no_bigger_pod_runs(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    """A tenant raises a running RayCluster's worker GPUs from 1 to 4 (its CRD lets it): its record charges
    1 a worker, so it is stopped to be admitted again at its new size, and no 4-GPU worker runs meanwhile."""
    apply(cluster, namespace, gpu_raycluster("grown", kinds_queue, workers=1, gpus=1))
    running_pods(cluster, namespace, f"{RAY_PODS}=grown", 2)  # the head and the worker
    resized = {"limits": {"nvidia.com/gpu": "4"}}
    path = "/spec/workerGroupSpecs/0/template/spec/containers/0/resources"
    patch = [{"op": "replace", "path": path, "value": resized}]
    edited = cluster.kubectl("patch", "raycluster", "grown", "-n", namespace, "--type=json", "-p", json.dumps(patch))
    assert edited.returncode == 0, edited.stderr

    def stopped_for_its_size() -> bool:
        return any(e.startswith("ResizedWhileRunning") for e in events_of(cluster, namespace, "grown"))

    wait_for(stopped_for_its_size, TIMEOUT, "the RayCluster to be stopped for its resized workers")
    assert get_object(cluster, "raycluster", "grown", namespace)["spec"]["suspend"] is True
    wait_for(lambda: not pods_of(cluster, namespace, f"{RAY_PODS}=grown"), TIMEOUT, "its pods to go")
    # Admitted again at 4 GPUs a worker, within the 4-GPU queue, once its old pods are gone.
    pods = running_pods(cluster, namespace, f"{RAY_PODS}=grown", 2)
    workers = [p for p in pods if p["spec"]["containers"][0].get("resources", {}).get("limits")]
    assert [w["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for w in workers] == ["4"]


def test_a_raycluster_scaled_up_while_it_runs_grows_within_its_queues_quota(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    """Ray's autoscaler grows a running cluster by raising a worker group's `replicas` (here written as it
    writes it). On a 4-GPU queue, a cluster admitted with one 1-GPU worker scaled to 5 runs 4 workers: each new
    one placed as quota allows, none beyond it; the fifth stays gated, pending, as the autoscaler expects."""
    ray = gpu_raycluster("elastic", kinds_queue, workers=1, gpus=1)
    group = ray["spec"]["workerGroupSpecs"][0]
    group["minReplicas"], group["maxReplicas"] = 1, 5
    apply(cluster, namespace, ray)
    running_pods(cluster, namespace, f"{RAY_PODS}=elastic", 2)  # the head and the worker it was admitted with
    patch = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 5}]
    scaled = cluster.kubectl("patch", "raycluster", "elastic", "-n", namespace, "--type=json", "-p", json.dumps(patch))
    assert scaled.returncode == 0, scaled.stderr
    workers = f"{RAY_PODS}=elastic,ray.io/node-type=worker"

    def four_run_and_one_waits() -> list[dict[str, Any]] | None:
        pods = pods_of(cluster, namespace, workers)
        placed = [p for p in pods if not gated(p)]
        return pods if len(pods) == 5 and len(placed) == 4 and running(placed) else None

    wait_for(four_run_and_one_waits, TIMEOUT, "four workers to run and the fifth to wait gated")
    for pod in [p for p in pods_of(cluster, namespace, workers) if not gated(p)]:
        assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == pod["spec"]["nodeName"]
    ray_now = get_object(cluster, "raycluster", "elastic", namespace)
    assert not ray_now["spec"].get("suspend")  # it grew in place: never stopped to be admitted again
    # Still gated cycles later: the quota holds it, it is no pod the operator has yet to reach.
    time.sleep(6)
    assert len([p for p in pods_of(cluster, namespace, workers) if gated(p)]) == 1


def test_a_raycluster_scaled_down_while_it_runs_gives_its_queue_back_what_it_no_longer_wants(
    cluster: LocalCluster, namespace: str, kinds_queue: str
) -> None:
    """On a 4-GPU queue, a cluster of three 1-GPU workers leaves too little for a 2-GPU Job, which waits. Scaled
    down to one worker (KubeRay deletes the other two), its record is rewritten to the one place it still
    wants, and the Job is admitted on the GPUs given back."""
    ray = gpu_raycluster("shrinking", kinds_queue, workers=3, gpus=1)
    ray["spec"]["workerGroupSpecs"][0]["minReplicas"] = 1
    apply(cluster, namespace, ray)
    running_pods(cluster, namespace, f"{RAY_PODS}=shrinking", 4)  # the head and three workers
    apply(cluster, namespace, indexed_job("after", kinds_queue, pods=1, gpus=2))
    time.sleep(6)  # cycles go by: it waits for quota
    assert pods_of(cluster, namespace, "batch.kubernetes.io/job-name=after") == [] or all(
        gated(p) for p in pods_of(cluster, namespace, "batch.kubernetes.io/job-name=after")
    )
    patch = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 1}]
    scaled = cluster.kubectl(
        "patch", "raycluster", "shrinking", "-n", namespace, "--type=json", "-p", json.dumps(patch)
    )
    assert scaled.returncode == 0, scaled.stderr
    running_pods(cluster, namespace, "batch.kubernetes.io/job-name=after", 1)

    def record() -> dict[str, Any]:
        annotations = get_object(cluster, "raycluster", "shrinking", namespace)["metadata"]["annotations"]
        return dict(json.loads(annotations[PLACEMENT_ANNOTATION]))

    assert len(record()["nodes"]) == 1 and record()["generation"] == 1  # the same run, never stopped
    assert any(e.startswith("ScaledDown: ") for e in events_of(cluster, namespace, "shrinking"))
    workers = pods_of(cluster, namespace, f"{RAY_PODS}=shrinking,ray.io/node-type=worker")
    assert len([p for p in workers if not p["metadata"].get("deletionTimestamp")]) == 1
