"""Real training jobs on the real nodes, as the e2e tests build and watch them."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch

from aisched.testing.cluster import LocalCluster, list_objects, wait_for
from tests.e2e.conftest import CHECKPOINTING_QUEUE, REAL_NODE_TOLERATION, TRAINING_IMAGE

GPU_PRODUCT = "Fake-GPU"  # what hack/real-nodes.sh labels its nodes' GPUs
CHECKPOINTED_EXIT_CODE = 75  # aisched.workload.contract: saved on SIGTERM, to be resumed
STEPS = 600
SEED = 11
STEP_SECONDS = 0.1
MOUNT = "/checkpoints"

_STEP_LINE = re.compile(r"step (\d+) loss")


def training_pod_spec(checkpoint_root: Path, args: list[str], image: str = TRAINING_IMAGE) -> dict[str, Any]:
    return {
        "tolerations": [REAL_NODE_TOLERATION],
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "trainer",
                "image": image,
                "imagePullPolicy": "Never",
                "args": args,
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "checkpoints", "mountPath": MOUNT}],
            }
        ],
        "volumes": [{"name": "checkpoints", "hostPath": {"path": str(checkpoint_root), "type": "Directory"}}],
    }


def train_args(*, seed: int = SEED, steps: int = STEPS, step_seconds: float = STEP_SECONDS) -> list[str]:
    return ["--steps", str(steps), "--seed", str(seed), "--step-seconds", str(step_seconds)]


def training_job(name: str, namespace: str, checkpoint_root: Path, *, replicas: int = 1) -> dict[str, Any]:
    """A TrainingJob of train.py on the real nodes' fake GPUs, checkpointing under CHECKPOINT_ROOT/NAMESPACE/NAME."""
    return {
        "apiVersion": "aisched.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "queue": CHECKPOINTING_QUEUE,  # its podPolicy allows the checkpoint directory's hostPath
            "gpusPerReplica": 1,
            "gpuType": GPU_PRODUCT,
            "spot": {"policy": "Only"},
            "checkpoint": {"path": f"{MOUNT}/{namespace}/{name}", "intervalSeconds": 30, "costSeconds": 1},
            "template": {"spec": training_pod_spec(checkpoint_root, train_args())},
        },
    }


def reference_run(api: client.ApiClient, namespace: str, node: str, checkpoint_root: Path, rank: int) -> dict[str, Any]:
    """The same training, uninterrupted, as a plain pod on NODE; returns its final.json."""
    name = f"reference-{rank}"
    args = [*train_args(step_seconds=0), "--output-dir", f"{MOUNT}/{namespace}/{name}"]
    spec = {**training_pod_spec(checkpoint_root, args), "nodeName": node, "restartPolicy": "Never"}
    spec["containers"][0]["env"] = [{"name": "RANK", "value": str(rank)}]
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})

    def finished() -> str | None:
        phase: str | None = core.read_namespaced_pod(name, namespace).status.phase
        assert phase != "Failed", core.read_namespaced_pod_log(name, namespace)[-2000:]
        return phase if phase == "Succeeded" else None

    wait_for(finished, 180, f"the reference run {name}")
    return final_result(checkpoint_root / namespace / name / f"rank-{rank}")


def final_result(directory: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((directory / "final.json").read_text())
    return result


def workers(cluster: LocalCluster, namespace: str, job: str) -> list[dict[str, Any]]:
    return list_objects(cluster, "pods", namespace, f"aisched.io/job-name={job}")


def running_workers(cluster: LocalCluster, namespace: str, job: str, count: int) -> list[dict[str, Any]] | None:
    pods = [p for p in workers(cluster, namespace, job) if p["status"].get("phase") == "Running"]
    return pods if len(pods) == count else None


def last_step(cluster: LocalCluster, namespace: str, pod: str) -> int:
    logs = cluster.kubectl("logs", "-n", namespace, pod, "--tail", "5").stdout
    steps = [int(m.group(1)) for m in _STEP_LINE.finditer(logs)]
    return max(steps, default=-1)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def apply(cluster: LocalCluster, obj: dict[str, Any]) -> None:
    result = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    assert result.returncode == 0, result.stderr


class PodHistory:
    """Every state the pods of a namespace pass through, from a watch: a deleted pod's last status included."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._api, self._namespace = api, namespace
        self.events: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodHistory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        core = client.CoreV1Api(self._api)
        while not self._stop.is_set():
            stream = watch.Watch().stream(core.list_namespaced_pod, self._namespace, timeout_seconds=2)
            for event in stream:
                self.events.append(self._api.sanitize_for_serialization(event["object"]))

    def terminations(self, pod: str, uid: str | None = None) -> list[dict[str, Any]]:
        """The `terminated` states POD's containers reported; only those of the pod UID, when given.

        A PyTorchJob's pods keep their names across restarts, so a name alone mixes generations.
        """
        found = []
        for obj in list(self.events):
            if obj["metadata"]["name"] != pod or uid not in {None, obj["metadata"].get("uid")}:
                continue
            for status in obj.get("status", {}).get("containerStatuses") or []:
                terminated = status.get("state", {}).get("terminated")
                if terminated and terminated not in found:
                    found.append(terminated)
        return found

    def deletion_grace(self, pod: str) -> int | None:
        """The grace period POD was deleted with (what the kubelet gave its containers before SIGKILL)."""
        for obj in self.events:
            if obj["metadata"]["name"] == pod and obj["metadata"].get("deletionGracePeriodSeconds") is not None:
                return int(obj["metadata"]["deletionGracePeriodSeconds"])
        return None
