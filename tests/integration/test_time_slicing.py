"""Time-slicing on the local GPU cluster: a long job is checkpointed and set aside for a short one,
then resumed from its step.

The small preset has 4 on-demand H100 nodes x 8 GPUs; a 32-GPU gang fills them. The operator runs
with a first band of attained service of 320 GPU-seconds (the setting; 1 GPU-hour by default), which
the gang passes after ten seconds of running.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from aisched.testing.cluster import (
    TIMEOUT,
    LocalCluster,
    apply,
    job,
    make_pod_exit,
    running_pods,
    wait_for,
    wait_phase,
)
from aisched.testing.operator import OperatorProcess
from tests.builders import a_queue, a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("short_bands")]
H100 = "NVIDIA-H100-80GB-HBM3"
GANG_GPUS = 32
FIRST_BAND_GPU_SECONDS = 320.0
CHECKPOINT = {"step": 1200, "path": "/ckpt/step-1200", "time": "2026-01-01T00:00:00Z"}


@pytest.fixture
def short_bands(operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """The session operator restarted with a first band of FIRST_BAND_GPU_SECONDS."""
    with operator.restarted_with({"AISCHED_FIRST_SERVICE_BAND_GPU_SECONDS": str(FIRST_BAND_GPU_SECONDS)}):
        yield operator


@pytest.fixture
def slicing_queue(cluster: LocalCluster) -> Iterator[str]:
    """A Queue that time-slices after a 5-second minimum run, deleted afterwards."""
    name = f"slice-{uuid.uuid4().hex[:6]}"
    apply(cluster, "default", a_queue(name, nominal_gpus=64).time_slicing(5).obj())
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")


def condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), None)


def test_a_long_job_is_checkpointed_and_set_aside_for_a_short_one_then_resumed_from_its_step(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient, slicing_queue: str
) -> None:
    long = a_training_job("long").queue(slicing_queue).gpu_type(H100).replicas(4).gpus(8)
    apply(cluster, namespace, long.set("checkpoint.path", "/ckpt").obj())
    wait_phase(cluster, namespace, "long", "Running")
    # The workers save on SIGTERM and report the step in their termination message: KWOK plays
    # that when a pod annotated so is deleted.
    for pod in running_pods(cluster, namespace, "long"):
        cluster.kubectl(
            "annotate",
            "pod",
            "-n",
            namespace,
            pod["metadata"]["name"],
            "aisched.io/fake-exit-code=75",
            f"aisched.io/fake-termination-message={json.dumps(CHECKPOINT)}",
        )
    apply(cluster, namespace, a_training_job("short").queue(slicing_queue).gpu_type(H100).replicas(2).gpus(8).obj())

    # The short job waits while both are in the first band, then the long one, past a GPU-hour, gives way.
    first_band_seconds = FIRST_BAND_GPU_SECONDS / GANG_GPUS
    wait_phase(cluster, namespace, "short", "Running", timeout=first_band_seconds + 3 * TIMEOUT)
    set_aside = wait_for(
        lambda: (s := job(cluster, namespace, "long")["status"]).get("lastCheckpoint", {}).get("step") == 1200 and s,
        TIMEOUT,
        "the long job's checkpoint to be recorded",
    )
    assert set_aside["phase"] in ("Queued", "Placing")
    assert condition(set_aside, "Preempted") is not None
    assert set_aside["attainedGpuSeconds"] >= FIRST_BAND_GPU_SECONDS

    for pod in running_pods(cluster, namespace, "short"):
        make_pod_exit(api_client, pod["metadata"]["name"], namespace, "Succeeded")
    resumed = wait_for(
        lambda: (
            (s := job(cluster, namespace, "long")["status"]).get("phase") == "Running"
            and (s.get("gangGeneration") or 0) >= 2
            and s
        ),
        2 * TIMEOUT,
        "the long job to run again",
    )
    assert resumed["lastCheckpoint"]["step"] == 1200
    env = {e["name"]: e["value"] for e in running_pods(cluster, namespace, "long")[0]["spec"]["containers"][0]["env"]}
    assert env["AISCHED_RESUME_STEP"] == "1200"
    assert env["AISCHED_RESUME_PATH"] == "/ckpt/step-1200"
