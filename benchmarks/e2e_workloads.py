"""What the end-to-end benchmark submits: gang shapes, and each gang as a TrainingJob, as the plain
pods the operator would create, and as what people run without aisched (an Indexed Job with a
headless Service), so that every arm runs the same workers.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aisched.api import GROUP, VERSION, TrainingJob
from aisched.kube import labels
from aisched.kube.builders import GangLaunch, WorkerSlot, build_worker_pod

NAMESPACE = "e2e-scale"
# Most jobs on shared GPU clusters are small; a few are multi-node gangs.
DEFAULT_MIX = "1x1=30,1x2=15,1x4=15,2x4=10,1x8=12,2x8=10,4x8=8"
TEMPLATE: dict[str, Any] = {
    "spec": {"containers": [{"name": "trainer", "image": "python:3.11-slim", "command": ["sleep", "infinity"]}]}
}
# KWOK ends a Job's pods at once (hack/kwok/stages.yaml) unless they carry this: the Indexed Job
# arm's workers hold their GPUs as the other arms' do.
KEEP_RUNNING = f"{labels.PREFIX}/kwok-keep-running"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True, order=True)
class GangShape:
    replicas: int
    gpus_per_replica: int

    @property
    def label(self) -> str:
        return f"{self.replicas}x{self.gpus_per_replica}"


def parse_mix(text: str) -> dict[GangShape, float]:
    """'1x1=30,4x8=8' -> {GangShape(1, 1): 30.0, GangShape(4, 8): 8.0}."""
    mix: dict[GangShape, float] = {}
    for item in text.split(","):
        shape, _, weight = item.strip().partition("=")
        replicas, _, gpus = shape.partition("x")
        mix[GangShape(int(replicas), int(gpus))] = float(weight or 1)
    if not mix or min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise ValueError(f"a mix needs positive weights: {text!r}")
    return mix


def job_mix(count: int, mix: Mapping[GangShape, float], seed: int) -> list[GangShape]:
    """COUNT gang shapes in MIX's proportions (largest remainder), in a seeded random order."""
    total = sum(mix.values())
    exact = {shape: count * weight / total for shape, weight in mix.items()}
    counts = {shape: int(share) for shape, share in exact.items()}
    by_remainder = sorted(exact, key=lambda s: (exact[s] - counts[s], s), reverse=True)
    for shape in by_remainder[: count - sum(counts.values())]:
        counts[shape] += 1
    shapes = [shape for shape in sorted(counts) for _ in range(counts[shape])]
    random.Random(seed).shuffle(shapes)
    return shapes


def training_job(name: str, shape: GangShape) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicas": shape.replicas, "gpusPerReplica": shape.gpus_per_replica, "template": TEMPLATE},
    }


def plain_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods the operator would create for JOB, as plain pods: no gate, no node pin, no owner."""
    model = TrainingJob.model_validate({**job, "metadata": {**job["metadata"], "uid": "none"}})
    replicas = model.spec.replicas
    launch = GangLaunch(0, replicas, tuple(WorkerSlot(rank, "") for rank in range(replicas)))
    pods = []
    for slot in launch.slots:
        pod = build_worker_pod(model, launch, slot)
        pod["spec"].pop("schedulingGates", None)  # a lone worker has none
        del pod["spec"]["nodeSelector"], pod["metadata"]["ownerReferences"]
        pods.append(pod)
    return pods


def indexed_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """JOB's gang as people run it without aisched: a headless Service and an Indexed Job.

    parallelism = completions = replicas; the pod template is the operator's worker (same
    container, GPUs and tolerations) without rank, gate, pin or owner; each pod learns its rank
    from its completion index and finds its peers through the Service (the pods' subdomain).
    """
    name = job["metadata"]["name"]
    worker = plain_pods(job)[0]
    pod_labels = {k: v for k, v in worker["metadata"].get("labels", {}).items() if k != labels.RANK}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"clusterIP": "None", "selector": {"batch.kubernetes.io/job-name": name}},
    }
    replicas = int(job["spec"]["replicas"])
    batch_job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "completionMode": "Indexed",
            "completions": replicas,
            "parallelism": replicas,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {KEEP_RUNNING: "true"}},
                "spec": {**worker["spec"], "subdomain": name, "restartPolicy": "Never"},
            },
        },
    }
    return [service, batch_job]


def rank_of(pod: dict[str, Any]) -> int:
    """A worker's rank: the operator's label, or an Indexed Job's completion index."""
    metadata = pod["metadata"]
    found = metadata.get("labels", {}).get(labels.RANK) or metadata.get("annotations", {}).get(COMPLETION_INDEX)
    return int(found)
