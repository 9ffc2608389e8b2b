"""TrainingJobs and InferenceServices arriving together for one node pool never get a GPU twice,
and the one that outranks the other gets the GPUs first.

Gangs and new replicas are decided in one scheduling cycle (`policy/decision.py`) against one
record of what is promised and not yet written (`controller/in_flight.py`): a gang until its
status holds its placement, a replica until the watch shows its pod. A burst asking half again
what the pool has, applied at once, is watched while the operator places it: no node is ever
promised more GPUs than it has (counted over every pod bound there, anyone's, and the operator's
pinned there), and every pod placed binds.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest
import yaml

from aisched.kube import labels
from aisched.kube.inventory import Inventory
from aisched.kube.serving_builders import SERVICE_NAME
from aisched.settings import Settings
from aisched.testing.cluster import TIMEOUT, LocalCluster, list_objects, wait_for
from aisched.testing.operator import OperatorProcess
from tests.builders import a_training_job, an_inference_service

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
GB200 = "NVIDIA-GB200"  # the small preset's one GB200 rack: 4 nodes x 4 GPUs
GPU = "nvidia.com/gpu"
WAITING = (("trainingjob", "batch"), ("inferenceservice", "chat"))
WATCHED_SECONDS = 20.0
"""How long the burst is watched as it is placed (a window to sample, not a bound on anything)."""


def _held_by_node(cluster: LocalCluster) -> Counter[str]:
    """GPUs every pod holds on its node, as kube-scheduler sums a pod's containers: bound pods, and the
    operator's own pinned to a node and not bound yet (`Inventory.pod_from_object`, `PodRecord.holds_gpus`)."""
    read = Inventory(Settings()).pod_from_object
    pods = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    held: Counter[str] = Counter()
    for record in (read(pod) for pod in pods):
        if record is not None and record.holds_gpus and record.gpu_node is not None:
            held[record.gpu_node] += record.gpus
    return held


def _pool(cluster: LocalCluster) -> dict[str, int]:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {
        n["metadata"]["name"]: int(n["status"]["allocatable"].get(GPU, 0))
        for n in nodes
        if n["metadata"]["labels"].get("nvidia.com/gpu.product") == GB200
    }


def _ours(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    pods = list_objects(cluster, "pods", namespace)
    return [p for p in pods if {labels.JOB_NAME, SERVICE_NAME} & set(p["metadata"].get("labels", {}))]


def test_a_burst_of_training_and_serving_never_gets_a_gpu_twice(cluster: LocalCluster, namespace: str) -> None:
    pool = _pool(cluster)
    assert sum(pool.values()) == 16, pool
    burst = [a_training_job(f"train-{i}").gpu_type(GB200).gpus(2).obj() for i in range(6)]
    burst += [
        an_inference_service(f"serve-{i}").set("gpuType", GB200).replicas(2).set("gpusPerReplica", 2).obj()
        for i in range(3)
    ]  # 12 GPUs of gangs and 12 of replicas for 16
    applied = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(burst))
    assert applied.returncode == 0, applied.stderr
    over: list[dict[str, int]] = []
    watched_until = time.monotonic() + WATCHED_SECONDS
    while time.monotonic() < watched_until:
        held = _held_by_node(cluster)
        if any(held[node] > gpus for node, gpus in pool.items()):
            over.append({node: held[node] for node in pool})
        time.sleep(0.5)
    assert not over, f"GPUs promised twice: {over[:3]}"
    # Everything placed binds; the pool ends full, both kinds holding some of it.
    wait_for(
        lambda: (pods := _ours(cluster, namespace)) and all(p["status"].get("phase") == "Running" for p in pods),
        TIMEOUT,
        "every pod placed to run",
    )
    pods = _ours(cluster, namespace)
    kinds = {"training" if labels.JOB_NAME in p["metadata"]["labels"] else "serving" for p in pods}
    assert kinds == {"training", "serving"}
    held = _held_by_node(cluster)
    assert all(held[node] <= gpus for node, gpus in pool.items()), held


def _wait_pool_free(cluster: LocalCluster, pool: dict[str, int]) -> None:
    wait_for(lambda: not any(_held_by_node(cluster)[n] for n in pool), TIMEOUT, "the pool to be free")


@pytest.mark.parametrize("service_outranks", [True, False], ids=["service-first", "gang-first"])
def test_when_the_pool_frees_up_the_higher_priority_of_a_service_and_a_gang_gets_it(
    cluster: LocalCluster, namespace: str, operator: OperatorProcess, service_outranks: bool
) -> None:
    pool = _pool(cluster)
    _wait_pool_free(cluster, pool)
    # A gang that outranks both holds the whole pool while a service and a whole-pool gang arrive and wait.
    # As its workers go, GPUs free up a few at a time: a service that outranks the gang takes them;
    # one the gang outranks keeps off them (the gang holds them as they free up) until the gang runs.
    blocker = a_training_job("blocker").gpu_type(GB200).gpus(4).replicas(4).priority(100).obj()
    applied = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(blocker))
    assert applied.returncode == 0, applied.stderr
    wait_for(lambda: len(_ours(cluster, namespace)) == 4, TIMEOUT, "the blocker's workers")
    high, low = 50, 0
    gang = a_training_job("batch").gpu_type(GB200).gpus(4).replicas(4).priority(low if service_outranks else high)
    service = (
        an_inference_service("chat")
        .set("gpuType", GB200)
        .replicas(2)
        .set("gpusPerReplica", 2)
        .set("priority", high if service_outranks else low)
    )
    applied = cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all([gang.obj(), service.obj()])
    )
    assert applied.returncode == 0, applied.stderr
    wait_for(
        lambda: (
            _status(cluster, namespace, "trainingjob", "batch").get("phase") == "Queued"
            and _progressing(cluster, namespace) == "InsufficientCapacity"
        ),
        TIMEOUT,
        "both to wait",
    )
    deleted = cluster.kubectl("delete", "trainingjob", "blocker", "-n", namespace, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    if service_outranks:
        wait_for(lambda: _serving_gpus(cluster, namespace) == 4, TIMEOUT, "the service's replicas")
        assert _status(cluster, namespace, "trainingjob", "batch").get("phase") == "Queued"
    else:
        try:
            wait_for(
                lambda: _status(cluster, namespace, "trainingjob", "batch").get("phase") == "Running",
                TIMEOUT,
                "the gang to run",
            )
        except TimeoutError as late:
            batch, chat = (_status(cluster, namespace, kind, name) for kind, name in WAITING)
            raise AssertionError(f"{late}\nbatch: {batch}\nchat: {chat}\n{operator.log_tail()}") from late
        assert _serving_gpus(cluster, namespace) == 0
        assert _progressing(cluster, namespace) == "InsufficientCapacity"


def _status(cluster: LocalCluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    found = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json")
    status: dict[str, Any] = json.loads(found.stdout).get("status", {}) if found.returncode == 0 else {}
    return status


def _progressing(cluster: LocalCluster, namespace: str) -> str | None:
    conditions = _status(cluster, namespace, "inferenceservice", "chat").get("conditions", [])
    return next((c.get("reason") for c in conditions if c["type"] == "Progressing"), None)


def _serving_gpus(cluster: LocalCluster, namespace: str) -> int:
    return sum(
        int(c["resources"]["limits"].get(GPU, 0))
        for p in _ours(cluster, namespace)
        if SERVICE_NAME in p["metadata"]["labels"] and not p["metadata"].get("deletionTimestamp")
        for c in p["spec"]["containers"]
    )
