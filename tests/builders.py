"""Fluent builders of test objects, so tests say what matters and nothing else.

a_training_job("llm").replicas(4).gpus(8).required_level("Rack").obj()
"""

from __future__ import annotations

import copy
from typing import Any, Self

DEFAULT_TEMPLATE: dict[str, Any] = {
    "spec": {"containers": [{"name": "trainer", "image": "python:3.11-slim", "command": ["sleep", "inf"]}]}
}


class _Builder:
    def __init__(self, kind: str, name: str, spec: dict[str, Any]) -> None:
        self._object: dict[str, Any] = {
            "apiVersion": "aisched.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": spec,
        }

    def namespace(self, namespace: str) -> Self:
        self._object["metadata"]["namespace"] = namespace
        return self

    def annotate(self, key: str, value: str) -> Self:
        self._object["metadata"].setdefault("annotations", {})[key] = value
        return self

    def set(self, path: str, value: Any) -> Self:
        """Set a dotted spec path, e.g. .set("carbon.deferrable", True)."""
        *parents, leaf = path.split(".")
        node = self._object["spec"]
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
        return self

    def gpu_share(self, **share: Any) -> Self:
        """Part of one GPU: computePercent / memoryMiB / migProfile, e.g. .gpu_share(computePercent=25)."""
        return self.set("gpuShare", share)

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._object)


class TrainingJobBuilder(_Builder):
    def replicas(self, n: int) -> Self:
        return self.set("replicas", n)

    def gpus(self, per_replica: int) -> Self:
        return self.set("gpusPerReplica", per_replica)

    def elastic(self, minimum: int, maximum: int) -> Self:
        return self.set("minReplicas", minimum).set("maxReplicas", maximum)

    def gpu_type(self, product: str) -> Self:
        return self.set("gpuType", product)

    def queue(self, name: str) -> Self:
        return self.set("queue", name)

    def priority(self, value: int) -> Self:
        return self.set("priority", value)

    def required_level(self, level: str) -> Self:
        return self.set("topology.requiredLevel", level)

    def preferred_level(self, level: str) -> Self:
        return self.set("topology.preferredLevel", level)

    def spot(self, policy: str) -> Self:
        return self.set("spot.policy", policy)

    def suspend(self, value: bool = True) -> Self:
        return self.set("suspend", value)


class InferenceServiceBuilder(_Builder):
    def replicas(self, n: int) -> Self:
        return self.set("replicas", n)

    def autoscale(self, minimum: int, maximum: int, target: float) -> Self:
        return self.set(
            "autoscaling",
            {"minReplicas": minimum, "maxReplicas": maximum, "metric": {"targetPerReplica": target}},
        )


class QueueBuilder(_Builder):
    def weight(self, value: int) -> Self:
        return self.set("weight", value)

    def cohort(self, name: str) -> Self:
        return self.set("cohort", name)

    def time_slicing(self, min_run_seconds: int, *, enabled: bool = True) -> Self:
        return self.set("timeSlicing", {"enabled": enabled, "minRunSeconds": min_run_seconds})


def a_training_job(name: str = "job") -> TrainingJobBuilder:
    return TrainingJobBuilder(
        "TrainingJob", name, {"replicas": 1, "gpusPerReplica": 1, "template": copy.deepcopy(DEFAULT_TEMPLATE)}
    )


def an_inference_service(name: str = "svc") -> InferenceServiceBuilder:
    return InferenceServiceBuilder(
        "InferenceService", name, {"gpusPerReplica": 1, "template": copy.deepcopy(DEFAULT_TEMPLATE)}
    )


def a_queue(name: str = "team", nominal_gpus: int = 8) -> QueueBuilder:
    builder = QueueBuilder("Queue", name, {"nominalGPUs": nominal_gpus})
    return builder
