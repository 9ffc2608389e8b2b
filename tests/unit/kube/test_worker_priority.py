"""Workers and replicas run at the operator's priority, never at their template's."""

from __future__ import annotations

from typing import Any

import pytest

from aisched.api import InferenceService, TrainingJob
from aisched.api.common import CapacityType
from aisched.kube.builders import GangLaunch, WorkerSlot, build_worker_pod
from aisched.kube.serving_builders import ReplicaSlot, build_replica_pod
from tests.builders import a_training_job, an_inference_service

# What an object stored before the CRD refused these fields may still carry.
TEMPLATE_PRIORITY = {
    "priorityClassName": "system-node-critical",
    "priority": 2_000_001_000,
    "preemptionPolicy": "PreemptLowerPriority",
}
SLOT = WorkerSlot(0, "n1")


def a_job_asking_priority() -> TrainingJob:
    obj = a_training_job("llm").gpus(8).namespace("team").obj()
    obj["metadata"]["uid"] = "uid-1"
    job = TrainingJob.model_validate(obj)
    job.spec.template["spec"].update(TEMPLATE_PRIORITY)
    return job


def a_service_asking_priority() -> InferenceService:
    obj = an_inference_service("chat").namespace("ml").obj()
    obj["metadata"]["uid"] = "uid-7"
    service = InferenceService.model_validate(obj)
    service.spec.template["spec"].update(TEMPLATE_PRIORITY)
    return service


def worker(class_name: str) -> dict[str, Any]:
    launch = GangLaunch(generation=1, world_size=1, slots=(SLOT,), priority_class_name=class_name)
    spec: dict[str, Any] = build_worker_pod(a_job_asking_priority(), launch, SLOT)["spec"]
    return spec


def replica(class_name: str) -> dict[str, Any]:
    slot = ReplicaSlot("chat-abc-0", "n1", CapacityType.ON_DEMAND, "abc")
    spec: dict[str, Any] = build_replica_pod(a_service_asking_priority(), slot, priority_class_name=class_name)["spec"]
    return spec


@pytest.mark.parametrize("build", [worker, replica], ids=["worker", "replica"])
def test_the_templates_priority_never_reaches_the_pod(build: Any) -> None:
    unset = build("")
    assert not set(TEMPLATE_PRIORITY) & set(unset)  # the cluster's default class, if any, applies
    configured = build("aisched-workers")
    assert configured["priorityClassName"] == "aisched-workers"
    assert not {"priority", "preemptionPolicy"} & set(configured)  # the class decides both
