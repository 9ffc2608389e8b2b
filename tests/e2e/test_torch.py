"""Real PyTorch on the real nodes: a torchrun DDP job survives a spot notice with exactly its weights.

Two pods, one process each, `torchrun /app/train.py` with nothing but the PET_* variables
the operator sets; the workers rendezvous through the job's headless Service (the
cluster's CoreDNS) and train with gloo on CPU. A notice on one node makes the operator
stop the gang: torchrun forwards the kubelet's SIGTERM, the ranks agree on one step
(aisched.workload.distributed), save it with torch.distributed.checkpoint and report it.
The next generation resumes on the other node from that step and finishes with the
SHA-256 of the weights of the same script run uninterrupted (torchrun --standalone, one pod).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client

from aisched.testing.cluster import LocalCluster, wait_for
from tests.e2e.conftest import CHECKPOINTING_QUEUE, TORCH_IMAGE
from tests.e2e.test_training import RUN_TIMEOUT, STEPS_BEFORE_NOTICE, interrupt_and_resume, wait_succeeded
from tests.e2e.training import GPU_PRODUCT, MOUNT, apply, final_result, train_args, training_pod_spec

STEPS = 300
SEED = 5


def torchrun_job(name: str, namespace: str, checkpoint_root: Path) -> dict[str, Any]:
    """Two one-GPU pods running the image's entrypoint (torchrun train.py), checkpointing under CHECKPOINT_ROOT."""
    return {
        "apiVersion": "aisched.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 2,
            "queue": CHECKPOINTING_QUEUE,
            "gpusPerReplica": 1,
            "gpuType": GPU_PRODUCT,
            "spot": {"policy": "Only"},
            "checkpoint": {"path": f"{MOUNT}/{namespace}/{name}", "intervalSeconds": 30, "costSeconds": 2},
            "template": {"spec": training_pod_spec(checkpoint_root, train_args(seed=SEED, steps=STEPS), TORCH_IMAGE)},
        },
    }


def start_reference(api: client.ApiClient, namespace: str, node: str, checkpoint_root: Path) -> str:
    """The same training uninterrupted, two ranks in one plain pod (torchrun --standalone); returns its pod."""
    name = "torch-reference"
    args = [*train_args(seed=SEED, steps=STEPS, step_seconds=0), "--output-dir", f"{MOUNT}/{namespace}/{name}"]
    spec = {**training_pod_spec(checkpoint_root, args, TORCH_IMAGE), "nodeName": node, "restartPolicy": "Never"}
    spec["containers"][0]["command"] = ["torchrun", "--standalone", "--nproc-per-node", "2", "/app/train.py"]
    client.CoreV1Api(api).create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})
    return name


def reference_result(api: client.ApiClient, namespace: str, pod: str, checkpoint_root: Path) -> dict[str, Any]:
    core = client.CoreV1Api(api)

    def finished() -> bool:
        phase = core.read_namespaced_pod(pod, namespace).status.phase
        assert phase != "Failed", core.read_namespaced_pod_log(pod, namespace)[-3000:]
        return bool(phase == "Succeeded")

    wait_for(finished, RUN_TIMEOUT, f"the reference run {pod}")
    return final_result(checkpoint_root / namespace / pod)


def assert_the_reference_weights(
    api: client.ApiClient, namespace: str, job: str, reference: str, checkpoint_root: Path, *, resumed_from: int
) -> None:
    """JOB, resumed from RESUMED_FROM, finished with the weights and loss of the uninterrupted REFERENCE run."""
    result = final_result(checkpoint_root / namespace / job)
    expected = reference_result(api, namespace, reference, checkpoint_root)
    assert result["resumedFrom"] == resumed_from
    assert result["worldSize"] == expected["worldSize"] == 2
    assert result["weightsSha256"] == expected["weightsSha256"]
    assert result["loss"] == expected["loss"]


def test_torchrun_gang_saves_one_step_with_dcp_and_resumes_with_the_uninterrupted_weights(  # noqa: PLR0917
    cluster: LocalCluster,
    api_client: client.ApiClient,
    namespace: str,
    checkpoint_root: Path,
    real_nodes: list[str],
    interrupted: list[str],
) -> None:
    name = "ddp"
    # Started first, it trains beside the job: the reference costs no wall time of its own.
    reference = start_reference(api_client, namespace, real_nodes[-1], checkpoint_root)
    apply(cluster, torchrun_job(name, namespace, checkpoint_root))
    terminations, _, recorded = interrupt_and_resume(
        cluster, api_client, namespace, name, replicas=2, interrupted=interrupted
    )
    assert STEPS_BEFORE_NOTICE <= recorded < STEPS - 1
    # Both pods' workers reported the one step they agreed on, saved as a DCP checkpoint.
    reports = [json.loads(t["message"]) for t in terminations if t.get("message")]
    assert len(reports) == 2, terminations
    assert {r["step"] for r in reports} == {recorded}, reports
    for report in reports:
        assert report["path"] == f"{MOUNT}/{namespace}/{name}/step-{recorded:09d}", report
    assert (checkpoint_root / namespace / name / f"step-{recorded:09d}" / ".metadata").is_file()
    wait_succeeded(cluster, namespace, name)

    assert_the_reference_weights(api_client, namespace, name, reference, checkpoint_root, resumed_from=recorded)
