"""Real PyTorch, elastic: a torchrun job grown and shrunk on the real nodes keeps training from its checkpoint.

The job asks for one to two pods of a whole real node each and runs the torch image's
`torchrun /app/train.py` unchanged: the operator gives elastic jobs a c10d rendezvous on pod 0
(`PET_RDZV_*`) and `PET_NNODES` of the generation. Another user's pod holds the second node, so
the job starts on one; that pod goes and the operator grows the job to two (a relaunch of the
whole gang from the step it saved with torch.distributed.checkpoint on its way out). Then a job
of higher priority in the same queue wants a node: the operator shrinks the elastic job back to
one pod rather than preempt it, and that generation too resumes from the step saved on the way
out. The job ends at its last step, at the world size of its last generation, with a loss below
where it began.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from aisched.testing.cluster import LocalCluster, job, wait_for
from tests.e2e.conftest import CHECKPOINTING_QUEUE, REAL_NODE_TOLERATION, TORCH_IMAGE, TRAINING_IMAGE, chart_values
from tests.e2e.test_torch import torchrun_job
from tests.e2e.test_training import RUN_TIMEOUT, wait_succeeded
from tests.e2e.training import (
    GPU_PRODUCT,
    apply,
    env_of,
    final_result,
    last_step,
    running_workers,
    train_args,
    training_pod_spec,
    workers,
)

STEPS = 1200  # at 0.1 s a step: outlasts a growth and a shrink with their relaunches
SEED = 9
STEPS_PER_GENERATION = 40
_RESUMED_LINE = re.compile(r"rank \d+ resumed from step (\d+)")
_LOSS_LINE = re.compile(r"step (\d+) loss ([0-9.eE+-]+|nan|inf)")


def node_gpus(api: client.ApiClient, node: str) -> int:
    return int(client.CoreV1Api(api).read_node(node).status.allocatable["nvidia.com/gpu"])


@pytest.fixture
def growing_queue(cluster: LocalCluster, checkpoint_root: Path, namespace: str) -> Iterator[str]:
    """The checkpointing queue with a 5-second minimum run: its elastic jobs grow (and are shrunk) after
    seconds, not the default 10 minutes that keeps a gang that just started from paying a relaunch."""
    (checkpointing,) = (q for q in chart_values(checkpoint_root)["queues"] if q["name"] == CHECKPOINTING_QUEUE)
    name = f"grow-{namespace}"
    spec = {**checkpointing, "timeSlicing": {"enabled": True, "minRunSeconds": 5}}
    del spec["name"]
    apply(cluster, {"apiVersion": "aisched.io/v1alpha1", "kind": "Queue", "metadata": {"name": name}, "spec": spec})
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")


def elastic_job(name: str, namespace: str, checkpoint_root: Path, gpus: int, queue: str) -> dict[str, Any]:
    """test_torch's torchrun job made elastic: one to two pods of a whole real node each."""
    obj = torchrun_job(name, namespace, checkpoint_root)
    obj["spec"].update(replicas=2, minReplicas=1, maxReplicas=2, gpusPerReplica=gpus, queue=queue)
    obj["spec"]["template"]["spec"] = training_pod_spec(
        checkpoint_root, train_args(seed=SEED, steps=STEPS), TORCH_IMAGE
    )
    return obj


def hold_node(api: client.ApiClient, namespace: str, node: str, gpus: int) -> str:
    """Another user's plain pod bound to NODE, holding all its GPUs; returns its name."""
    name = "holder"
    spec = {
        "nodeName": node,
        "tolerations": [REAL_NODE_TOLERATION],
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "idle",
                "image": TRAINING_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["python3", "-c", "import time; time.sleep(3600)"],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    client.CoreV1Api(api).create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})
    return name


def urgent_job(name: str, checkpoint_root: Path, gpus: int, queue: str) -> dict[str, Any]:
    """A one-pod job of higher priority in QUEUE wanting a whole real node, and idle once it has one."""
    spec = training_pod_spec(checkpoint_root, [], TRAINING_IMAGE)
    spec["containers"][0]["command"] = ["python3", "-c", "import time; time.sleep(3600)"]
    return {
        "apiVersion": "aisched.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "queue": queue,
            "priority": 100,
            "gpusPerReplica": gpus,
            "gpuType": GPU_PRODUCT,  # the real nodes' GPUs: the KWOK nodes beside them have others
            "spot": {"policy": "Only"},
            "template": {"spec": spec},
        },
    }


def generation(cluster: LocalCluster, namespace: str, name: str, replicas: int, after: int) -> list[dict[str, Any]]:
    """The job's workers once REPLICAS of a generation later than AFTER run, and no others."""

    def current() -> list[dict[str, Any]] | None:
        pods = running_workers(cluster, namespace, name, replicas)
        if not pods or any(int(env_of(p)["AISCHED_GANG_GENERATION"]) <= after for p in pods):
            return None
        return pods

    try:
        return wait_for(current, RUN_TIMEOUT, f"{replicas} worker(s) of {name} after generation {after}")
    except TimeoutError as error:
        pods = [
            (p["metadata"]["name"], p["status"].get("phase"), p["spec"].get("nodeName"))
            for p in workers(cluster, namespace, name)
        ]
        events = cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp").stdout[-3000:]
        status = json.dumps(job(cluster, namespace, name).get("status"), indent=1)[-3000:]
        raise AssertionError(f"{error}\nstatus: {status}\npods: {pods}\nevents:\n{events}") from error


def trained(cluster: LocalCluster, namespace: str, pods: list[dict[str, Any]], beyond: int) -> None:
    names = [p["metadata"]["name"] for p in pods]
    wait_for(
        lambda: all(last_step(cluster, namespace, pod) >= beyond for pod in names),
        RUN_TIMEOUT,
        f"{', '.join(names)} past step {beyond}",
    )


def saved_past(cluster: LocalCluster, namespace: str, name: str, step: int) -> int:
    """The checkpoint step the job's status records once past STEP: the generation a resize replaced
    saved it on SIGTERM on its way out, and the operator read it from its workers' reports."""

    def recorded() -> int | None:
        checkpoint = job(cluster, namespace, name)["status"].get("lastCheckpoint") or {}
        return checkpoint["step"] if checkpoint.get("step", -1) > step else None

    return wait_for(recorded, RUN_TIMEOUT, f"a checkpoint of {name} past step {step}")


def resumed_from(cluster: LocalCluster, namespace: str, pod: str) -> int:
    """The step POD's training resumed from, as the script logs it (every rank loads the newest save)."""

    def logged() -> int | None:
        found = _RESUMED_LINE.search(cluster.kubectl("logs", "-n", namespace, pod).stdout)
        return int(found.group(1)) if found else None

    # Once every rank has joined the rendezvous and loaded the save: `is not None`, step 0 is one too.
    return wait_for(lambda: (step,) if (step := logged()) is not None else None, RUN_TIMEOUT, f"{pod} to resume")[0]


def first_loss(cluster: LocalCluster, namespace: str, pod: str) -> float:
    logs = cluster.kubectl("logs", "-n", namespace, pod).stdout
    losses = [(int(m.group(1)), float(m.group(2))) for m in _LOSS_LINE.finditer(logs)]
    assert losses and losses[0][0] == 0, logs[-2000:]
    return losses[0][1]


def admitted_reason(cluster: LocalCluster, namespace: str, name: str) -> str:
    conditions = job(cluster, namespace, name)["status"].get("conditions") or []
    return next((c.get("reason", "") for c in conditions if c["type"] == "Admitted"), "")


def test_an_elastic_torchrun_job_grown_and_shrunk_keeps_training_from_its_checkpoint(  # noqa: PLR0917
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    checkpoint_root: Path,
    real_nodes: list[str],
    growing_queue: str,
) -> None:
    name = "stretchy"
    gpus = node_gpus(api_client, real_nodes[1])
    holder = hold_node(api_client, namespace, real_nodes[1], gpus)
    apply(cluster, elastic_job(name, namespace, checkpoint_root, gpus, growing_queue))

    # One node free: the job starts at its minimum, a one-node rendezvous.
    (alone,) = generation(cluster, namespace, name, 1, after=0)
    first = int(env_of(alone)["AISCHED_GANG_GENERATION"])
    assert env_of(alone)["PET_NNODES"] == "1" and env_of(alone)["PET_RDZV_BACKEND"] == "c10d"
    assert alone["spec"]["nodeName"] == real_nodes[0]
    trained(cluster, namespace, [alone], STEPS_PER_GENERATION)
    start_loss = first_loss(cluster, namespace, alone["metadata"]["name"])

    # The other user's pod goes: the job grows to two pods, resumed from the step it saved.
    client.CoreV1Api(api_client).delete_namespaced_pod(holder, namespace, grace_period_seconds=0)
    grown = generation(cluster, namespace, name, 2, after=first)
    saved_before_growth = saved_past(cluster, namespace, name, STEPS_PER_GENERATION - 1)
    assert {resumed_from(cluster, namespace, p["metadata"]["name"]) for p in grown} == {saved_before_growth}
    assert {env_of(p)["PET_NNODES"] for p in grown} == {"2"}
    assert sorted(env_of(p)["PET_NODE_RANK"] for p in grown) == ["0", "1"]
    assert admitted_reason(cluster, namespace, name) == "Grown"
    trained(cluster, namespace, grown, saved_before_growth + STEPS_PER_GENERATION)
    second = int(env_of(grown[0])["AISCHED_GANG_GENERATION"])

    # A job of higher priority wants a node: the elastic job shrinks to one pod rather than stop.
    urgent = urgent_job("urgent", checkpoint_root, gpus, growing_queue)
    urgent["metadata"]["namespace"] = namespace
    apply(cluster, urgent)
    (shrunk,) = generation(cluster, namespace, name, 1, after=second)
    saved_before_shrink = saved_past(cluster, namespace, name, saved_before_growth + STEPS_PER_GENERATION - 1)
    assert resumed_from(cluster, namespace, shrunk["metadata"]["name"]) == saved_before_shrink
    assert env_of(shrunk)["PET_NNODES"] == "1"
    assert admitted_reason(cluster, namespace, name) == "Shrunk"
    (urgent_pod,) = wait_for(lambda: running_workers(cluster, namespace, "urgent", 1), RUN_TIMEOUT, "the urgent job")
    assert urgent_pod["spec"]["nodeName"] != shrunk["spec"]["nodeName"]

    wait_succeeded(cluster, namespace, name)
    result = final_result(checkpoint_root / namespace / name)
    assert result["step"] == STEPS - 1
    assert result["resumedFrom"] == saved_before_shrink
    assert result["worldSize"] == gpus  # torchrun runs a process per GPU of the one pod left
    assert math.isfinite(result["loss"]) and result["loss"] < start_loss, (start_loss, result)
