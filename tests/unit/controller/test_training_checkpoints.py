"""What the TrainingJob controller keeps of the checkpoints its workers report (the pure rules: tests/unit/policy)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from aisched.api.training_job import CheckpointRecord, TrainingJobStatus
from aisched.controller.training import TrainingJobController
from aisched.kube import labels
from aisched.kube.inventory import Inventory, PodRecord
from aisched.policy.job_status import WorkerReport, record_checkpoints
from aisched.settings import Settings
from tests.unit.controller.kube_double import KubeDouble

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = ("ns", "llm")


def stopped_worker(rank: int, step: int, generation: int = 1) -> dict[str, Any]:
    """A worker that saved STEP on SIGTERM and exited, as the kubelet reports it."""
    report = json.dumps({"step": step, "path": f"/ckpt/{step}", "time": (T0 + timedelta(seconds=step)).isoformat()})
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"llm-worker-{rank}",
            "labels": {
                labels.JOB_NAME: "llm",
                labels.JOB_KIND: "TrainingJob",
                labels.RANK: str(rank),
                labels.GANG_GENERATION: str(generation),
            },
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "trainer"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {"exitCode": 75, "message": report}}}],
        },
    }


def a_controller(kube: KubeDouble) -> TrainingJobController:
    settings = Settings()
    # The client allows no call: these tests only feed the watch side.
    return TrainingJobController(settings, kube.client, Inventory(settings))


def reports(pods: list[PodRecord]) -> list[WorkerReport]:
    return [(p.labels.get(labels.RANK), p.termination_message) for p in pods]


def deleted(controller: TrainingJobController, pod: dict[str, Any]) -> PodRecord:
    """The watch events of a worker that stops and is deleted before the reconcile loop runs."""
    record = controller.inventory.upsert_pod(pod)
    assert record is not None
    controller.pod_changed(record)
    controller.inventory.delete_pod(record.namespace, record.name)
    controller.pod_changed(record)
    return record


def test_a_worker_deleted_right_after_it_stopped_keeps_its_checkpoint_report(kube: KubeDouble) -> None:
    controller = a_controller(kube)
    record = deleted(controller, stopped_worker(0, 1200))
    assert controller.inventory.pods_of_job(*KEY) == []
    assert controller.departed_workers(KEY, 1) == [record]
    # A new gang makes the reports of the old one moot.
    assert controller.departed_workers(KEY, 2) == []
    assert controller.departed_workers(KEY, 1) == []


def test_the_checkpoint_is_recorded_once_every_rank_has_reported(kube: KubeDouble) -> None:
    controller = a_controller(kube)
    status = TrainingJobStatus(replicas=2, gang_generation=1)
    first = deleted(controller, stopped_worker(0, 1200))
    assert record_checkpoints(status, reports([first])) == status  # rank 1 may still be saving an older step
    second = deleted(controller, stopped_worker(1, 1100))
    recorded = record_checkpoints(status, reports(controller.departed_workers(KEY, 1)))
    assert recorded.last_checkpoint == CheckpointRecord(step=1100, path="/ckpt/1100", time=T0 + timedelta(seconds=1100))
    assert second in controller.departed_workers(KEY, 1)
