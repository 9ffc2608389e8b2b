"""What the TrainingJob controller learns from the checkpoints its workers report, and what an interruption cost."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from aisched.api import ConditionStatus
from aisched.api.common import set_condition
from aisched.api.training_job import CheckpointRecord, TrainingJob, TrainingJobPhase, TrainingJobStatus
from aisched.controller.training import (
    TrainingJobController,
    _apply_step,
    _record_checkpoints,
    interruption_lost_work,
)
from aisched.kube import labels
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory, PodRecord
from aisched.policy.lifecycle import Step, Verb
from aisched.settings import Settings
from tests.builders import a_training_job

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


def a_controller() -> TrainingJobController:
    settings = Settings()
    # The client is never called: these tests only feed the watch side.
    return TrainingJobController(settings, KubeClient(client.ApiClient()), Inventory(settings))


def deleted(controller: TrainingJobController, pod: dict[str, Any]) -> PodRecord:
    """The watch events of a worker that stops and is deleted before the reconcile loop runs."""
    record = controller.inventory.upsert_pod(pod)
    controller.pod_changed(record)
    controller.inventory.delete_pod(record.namespace, record.name)
    controller.pod_changed(record)
    return record


def test_a_worker_deleted_right_after_it_stopped_keeps_its_checkpoint_report() -> None:
    controller = a_controller()
    record = deleted(controller, stopped_worker(0, 1200))
    assert controller.inventory.pods_of_job(*KEY) == []
    assert controller.departed_workers(KEY, 1) == [record]
    # A new gang makes the reports of the old one moot.
    assert controller.departed_workers(KEY, 2) == []
    assert controller.departed_workers(KEY, 1) == []


def test_the_checkpoint_is_recorded_once_every_rank_has_reported() -> None:
    controller = a_controller()
    status = TrainingJobStatus(replicas=2, gang_generation=1)
    first = deleted(controller, stopped_worker(0, 1200))
    assert _record_checkpoints(status, [first]) == status  # rank 1 may still be saving an older step
    second = deleted(controller, stopped_worker(1, 1100))
    recorded = _record_checkpoints(status, controller.departed_workers(KEY, 1))
    assert recorded.last_checkpoint == CheckpointRecord(step=1100, path="/ckpt/1100", time=T0 + timedelta(seconds=1100))
    assert second in controller.departed_workers(KEY, 1)


def interrupted(admitted: datetime, notice: datetime, checkpoint: datetime | None) -> TrainingJobStatus:
    """A gang admitted, running, then stopped by a notice; CHECKPOINT is the last one it reported."""
    conditions = set_condition([], "Admitted", ConditionStatus.TRUE, "Admitted", "", now=admitted, generation=1)
    conditions = set_condition(
        conditions, "Running", ConditionStatus.TRUE, "GangRunning", "", now=admitted, generation=1
    )
    conditions = set_condition(
        conditions, "Running", ConditionStatus.FALSE, "CapacityInterrupted", "", now=notice, generation=1
    )
    last = CheckpointRecord(step=1, time=checkpoint) if checkpoint else None
    return TrainingJobStatus(conditions=conditions, last_checkpoint=last)


def test_a_checkpoint_saved_on_the_notice_loses_no_work_however_long_the_gang_ran() -> None:
    notice = T0 + timedelta(hours=5)
    assert interruption_lost_work(interrupted(T0, notice, notice + timedelta(seconds=20))) == 0.0


def test_without_a_notice_save_the_work_since_the_last_checkpoint_is_lost() -> None:
    notice = T0 + timedelta(hours=5)
    assert interruption_lost_work(interrupted(T0, notice, notice - timedelta(minutes=10))) == 600.0


def test_a_checkpoint_of_an_earlier_gang_counts_only_this_gangs_run() -> None:
    admitted = T0 + timedelta(hours=1)
    assert interruption_lost_work(interrupted(admitted, admitted + timedelta(minutes=3), T0)) == 180.0
    assert interruption_lost_work(interrupted(admitted, admitted + timedelta(minutes=3), None)) == 180.0


def test_a_gang_interrupted_before_it_ran_loses_only_the_time_to_place_it() -> None:
    conditions = set_condition([], "Admitted", ConditionStatus.TRUE, "Admitted", "", now=T0, generation=1)
    placing = T0 + timedelta(seconds=1)
    conditions = set_condition(conditions, "Running", ConditionStatus.FALSE, "Placing", "", now=placing, generation=1)
    # The notice, an hour later, leaves Running as it was: False since the gang was placed.
    conditions = set_condition(
        conditions,
        "Running",
        ConditionStatus.FALSE,
        "CapacityInterrupted",
        "",
        now=T0 + timedelta(hours=1),
        generation=1,
    )
    assert interruption_lost_work(TrainingJobStatus(conditions=conditions)) == 1.0
    assert interruption_lost_work(TrainingJobStatus()) == 0.0


def gang_stops(status: TrainingJobStatus) -> TrainingJobStatus:
    """The interrupted gang's last worker is gone: the job goes back to the queue."""
    job = TrainingJob.model_validate(a_training_job("llm").namespace("ns").obj())
    checkpointing = status.model_copy(update={"phase": TrainingJobPhase.CHECKPOINTING})
    return _apply_step(job, checkpointing, Step(Verb.NOTHING, TrainingJobPhase.QUEUED), T0 + timedelta(hours=6))


def test_a_checkpoint_written_in_the_notice_window_counts_as_saved_on_notice() -> None:
    notice = T0 + timedelta(hours=5)
    saved = gang_stops(interrupted(T0, notice, notice + timedelta(seconds=20)))
    assert saved.saved_on_notice == 1
    assert saved.lost_work_seconds == 0.0
    missed = gang_stops(interrupted(T0, notice, notice - timedelta(minutes=10)))
    assert not missed.saved_on_notice
    assert missed.lost_work_seconds == 600.0
