"""aisched.testing.examples: the examples as the real nodes run them, and when each is done."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from aisched.testing.examples import (
    CHECKPOINT_CLAIM,
    REAL_NODE_GPU_PRODUCT,
    REAL_NODE_TAINT_KEY,
    checkpoint_storage,
    failure,
    for_real_nodes,
    load_examples,
    reached,
)

EXAMPLES = Path(__file__).parents[3] / "manifests" / "examples"
EXAMPLE_IMAGES = {"aisched.local/torch-training:dev", "aisched.local/training:dev", "aisched.local/model-server:dev"}
REAL_NODE_GPUS = 2  # hack/real-nodes.sh: AISCHED_REAL_NODE_GPUS


def workloads() -> list[dict[str, Any]]:
    return [d for d in load_examples(EXAMPLES) if d["kind"] in {"TrainingJob", "InferenceService"}]


def test_every_example_workload_runs_an_image_built_here_and_fits_a_real_node() -> None:
    found = workloads()
    assert {d["kind"] for d in found} == {"TrainingJob", "InferenceService"}
    for example in found:
        containers = example["spec"]["template"]["spec"]["containers"]
        assert {c["image"] for c in containers} <= EXAMPLE_IMAGES, example["metadata"]["name"]
        assert example["spec"]["gpusPerReplica"] <= REAL_NODE_GPUS, example["metadata"]["name"]
        # Written for any cluster: what only the local one needs is added by for_real_nodes.
        assert "gpuType" not in example["spec"]
        assert "tolerations" not in example["spec"]["template"]["spec"]


def test_examples_that_checkpoint_mount_the_claim_that_checkpoint_storage_makes() -> None:
    checkpointing = [d for d in workloads() if "checkpoint" in d["spec"]]
    assert checkpointing
    for example in checkpointing:
        pod = example["spec"]["template"]["spec"]
        claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        assert claims == {CHECKPOINT_CLAIM}
        mounts = [m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])]
        assert any(example["spec"]["checkpoint"]["path"].startswith(mount + "/") for mount in mounts)
    volume, claim = checkpoint_storage("team-a", "/var/tmp/ckpt")
    assert claim["metadata"] == {"name": CHECKPOINT_CLAIM, "namespace": "team-a"}
    assert volume["spec"]["claimRef"] == {"namespace": "team-a", "name": CHECKPOINT_CLAIM}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"] == "team-a-checkpoints"


def test_for_real_nodes_adds_the_product_the_toleration_and_spot_and_leaves_the_example_alone() -> None:
    job = {
        "kind": "TrainingJob",
        "metadata": {"name": "j"},
        "spec": {"gpusPerReplica": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }
    original = copy.deepcopy(job)

    local = for_real_nodes(job)

    assert job == original
    assert local["spec"]["gpuType"] == REAL_NODE_GPU_PRODUCT
    assert local["spec"]["spot"] == {"policy": "Only"}
    assert local["spec"]["template"]["spec"]["tolerations"] == [
        {"key": REAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert for_real_nodes(local) == local  # applied twice, one toleration


@pytest.mark.parametrize("policy", ["Prefer", "Only"])
def test_for_real_nodes_keeps_a_spot_policy_that_already_runs_on_spot(policy: str) -> None:
    job = {"kind": "TrainingJob", "spec": {"spot": {"policy": policy}, "template": {"spec": {}}}}
    assert for_real_nodes(job)["spec"]["spot"] == {"policy": policy}


def test_for_real_nodes_leaves_a_service_spot_policy_and_queues_as_written() -> None:
    service = {"kind": "InferenceService", "spec": {"spot": {"policy": "Never"}, "template": {"spec": {}}}}
    queue = {"kind": "Queue", "metadata": {"name": "q"}, "spec": {"nominalGPUs": 1}}
    assert for_real_nodes(service)["spec"]["spot"] == {"policy": "Never"}
    assert for_real_nodes(queue) == queue


def test_each_kind_reaches_its_expected_state() -> None:
    assert reached({"kind": "TrainingJob", "status": {"phase": "Succeeded"}})
    assert not reached({"kind": "TrainingJob", "status": {"phase": "Running"}})
    assert not reached({"kind": "TrainingJob"})
    service = {"kind": "InferenceService", "spec": {"replicas": 2}, "status": {"readyReplicas": 1}}
    assert not reached(service)
    assert reached({**service, "status": {"readyReplicas": 2}})
    assert reached({"kind": "Queue", "metadata": {"generation": 3}, "status": {"observedGeneration": 3}})
    assert not reached({"kind": "Queue", "metadata": {"generation": 3}, "status": {"observedGeneration": 2}})
    with pytest.raises(ValueError, match="no expected state"):
        reached({"kind": "ConfigMap", "metadata": {"name": "x"}})


def test_a_failed_job_says_why_and_others_have_not_failed() -> None:
    condition = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "3 restarts"}
    failed = {
        "kind": "TrainingJob",
        "metadata": {"name": "j"},
        "status": {"phase": "Failed", "conditions": [condition]},
    }
    assert failure(failed) == "TrainingJob j failed: Failed=True BackoffLimitExceeded: 3 restarts"
    assert failure({"kind": "TrainingJob", "status": {"phase": "Running"}}) is None
    assert failure({"kind": "InferenceService", "status": {}}) is None


def test_every_example_kind_has_an_expected_state_and_queues_come_first() -> None:
    kinds = [example["kind"] for example in load_examples(EXAMPLES)]
    assert "Queue" in kinds
    assert kinds == sorted(kinds, key=lambda kind: kind != "Queue")
    for example in load_examples(EXAMPLES):
        reached(example)  # raises for a kind the e2e test could not wait for
