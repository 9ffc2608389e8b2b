"""What the TrainingJob controller keeps of the checkpoints its workers report, restarts included.

Workers keep their pods (the report finalizer) until the job's status holds what they
reported; the pure rules are in tests/unit/policy/test_report_tracking.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from aisched.controller.cluster_state import ClusterState
from aisched.controller.training import TrainingJobController
from aisched.kube import labels
from aisched.kube.inventory import Inventory
from aisched.settings import Settings
from tests.builders import a_training_job
from tests.unit.controller.kube_double import KubeDouble

pytestmark = pytest.mark.asyncio

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = ("ns", "llm")


def a_worker(rank: int, *, step: int | None = None, phase: str = "Failed", generation: int = 1) -> dict[str, Any]:
    """A worker of the gang, deleted for a notice; with STEP, it saved that step on SIGTERM and exited."""
    status: dict[str, Any] = {"phase": phase}
    if step is not None:
        saved = (T0 - timedelta(hours=1) + timedelta(seconds=step)).isoformat()  # before the operator's now
        report = json.dumps({"step": step, "path": f"/ckpt/{step}", "time": saved})
        terminated = {"exitCode": 75, "message": report}
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": terminated}}]
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"llm-g{generation}-w{rank}",
            "labels": {
                labels.JOB_NAME: "llm",
                labels.JOB_KIND: "TrainingJob",
                labels.RANK: str(rank),
                labels.GANG_GENERATION: str(generation),
            },
            "finalizers": [labels.REPORT_FINALIZER],
            "deletionTimestamp": (T0 + timedelta(seconds=30)).isoformat(),
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "trainer"}]},
        "status": status,
    }


def a_checkpointing_job() -> dict[str, Any]:
    """A two-worker job whose gang is being stopped for an interruption notice."""
    job = a_training_job("llm").namespace("ns").replicas(2).obj()
    job["status"] = {"phase": "Checkpointing", "reason": "CapacityInterrupted", "gangGeneration": 1, "replicas": 2}
    return job


def a_controller(kube: KubeDouble, job: dict[str, Any], pods: list[dict[str, Any]]) -> TrainingJobController:
    """A controller (just started, as after a restart) that has seen JOB and PODS."""
    settings = Settings()
    controller = TrainingJobController(settings, kube.client, ClusterState(Inventory(settings)), clock=lambda: T0)
    controller.inventory.upsert_node(
        {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    controller.job_seen(job)
    for pod in pods:
        record = controller.inventory.upsert_pod(pod)
        assert record is not None and record.tracked
    return controller


def recorded_step(controller: TrainingJobController) -> int | None:
    checkpoint = controller.jobs[KEY].get("status", {}).get("lastCheckpoint")
    return checkpoint["step"] if checkpoint else None


async def test_stopped_workers_stay_until_the_status_holds_the_checkpoint_they_reported(kube: KubeDouble) -> None:
    calls: list[str] = []
    kube.answer("patch_status", lambda *args: calls.append("status"))
    kube.answer("release_report_finalizer", lambda namespace, name: calls.append(name))
    controller = a_controller(kube, a_checkpointing_job(), [a_worker(0, step=1200), a_worker(1, step=1100)])
    await controller.reconcile(KEY)
    assert recorded_step(controller) == 1100  # the step both ranks saved
    assert calls == ["status", "llm-g1-w0", "llm-g1-w1"]  # let go only once it is written


async def test_a_failed_status_write_lets_no_worker_go_and_a_restarted_operator_records_it(kube: KubeDouble) -> None:
    pods = [a_worker(0, step=1200), a_worker(1, step=1100)]

    def unavailable(*args: Any) -> None:
        raise ApiException(status=503, reason="ServiceUnavailable")

    kube.answer("patch_status", unavailable)
    with pytest.raises(ApiException):
        await a_controller(kube, a_checkpointing_job(), pods).reconcile(KEY)
    assert kube.calls("release_report_finalizer") == []
    # The operator restarts: the pods, still there, still say what was saved.
    kube.allow("patch_status", "release_report_finalizer")
    restarted = a_controller(kube, a_checkpointing_job(), pods)
    await restarted.reconcile(KEY)
    assert recorded_step(restarted) == 1100
    assert sorted(name for _, name in kube.calls("release_report_finalizer")) == ["llm-g1-w0", "llm-g1-w1"]


async def test_a_rank_that_saved_waits_for_the_ranks_still_saving(kube: KubeDouble) -> None:
    kube.allow("patch_status", "release_report_finalizer", "delete_pod")
    still_saving = a_worker(1, phase="Running")
    controller = a_controller(kube, a_checkpointing_job(), [a_worker(0, step=1200), still_saving])
    await controller.reconcile(KEY)
    assert recorded_step(controller) is None
    assert kube.calls("release_report_finalizer") == []  # rank 1 may end at an older step: rank 0's 1200 is kept


async def test_workers_of_a_deleted_job_are_let_go(kube: KubeDouble) -> None:
    kube.allow("release_report_finalizer")
    controller = a_controller(kube, a_checkpointing_job(), [a_worker(0, step=1200), a_worker(1, phase="Running")])
    controller.job_gone(*KEY)
    await controller.releases.release_unowned()
    assert sorted(name for _, name in kube.calls("release_report_finalizer")) == ["llm-g1-w0", "llm-g1-w1"]
    await controller.releases.release_unowned()  # done: not asked again
    assert len(kube.calls("release_report_finalizer")) == 2
