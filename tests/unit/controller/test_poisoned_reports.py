"""A poisoned worker report costs the job that report, never its reconcile (#27).

A termination message whose time overflows or whose step is past int64 once raised on
every reconcile or made every status write fail: the job stayed Running with no workers,
its finalizers held and its quota charged. Now the report is rejected (a Warning, once),
the job keeps its last good checkpoint, its status is written and its workers are let go.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aisched.controller.cluster_state import ClusterState
from aisched.controller.training import TrainingJobController
from aisched.kube import labels
from aisched.kube.inventory import Inventory
from aisched.policy.checkpoint_reports import REPORT_REJECTED
from aisched.settings import Settings
from tests.builders import a_training_job
from tests.unit.controller.kube_double import KubeDouble

pytestmark = pytest.mark.asyncio

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = ("ns", "llm")
INT64 = range(-(2**63), 2**63)
OVERFLOWING_TIME = json.dumps({"step": 1300, "path": "/ckpt/1300", "time": "0001-01-01T00:00:00+14:00"})
STEP_PAST_INT64 = json.dumps({"step": 2**80, "path": "/ckpt/huge", "time": T0.isoformat()})


def a_stopped_worker(rank: int, message: str) -> dict[str, Any]:
    """A worker of the gang that was stopped for a notice and exited, leaving MESSAGE."""
    terminated = {"exitCode": 75, "message": message}
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"llm-g1-w{rank}",
            "labels": {
                labels.JOB_NAME: "llm",
                labels.JOB_KIND: "TrainingJob",
                labels.RANK: str(rank),
                labels.GANG_GENERATION: "1",
            },
            "finalizers": [labels.REPORT_FINALIZER],
            "deletionTimestamp": (T0 + timedelta(seconds=30)).isoformat(),
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "trainer"}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}]},
    }


def good_report(step: int) -> str:
    return json.dumps({"step": step, "path": f"/ckpt/{step}", "time": (T0 - timedelta(minutes=1)).isoformat()})


def a_checkpointing_job() -> dict[str, Any]:
    """A two-worker job being stopped for a notice, which last recorded step 1000."""
    job = a_training_job("llm").namespace("ns").replicas(2).obj()
    last = {"step": 1000, "path": "/ckpt/1000", "time": (T0 - timedelta(hours=1)).isoformat()}
    job["status"] = {
        "phase": "Checkpointing",
        "reason": "CapacityInterrupted",
        "gangGeneration": 1,
        "replicas": 2,
        "lastCheckpoint": last,
    }
    return job


def a_controller(kube: KubeDouble, pods: list[dict[str, Any]]) -> TrainingJobController:
    settings = Settings()
    controller = TrainingJobController(settings, kube.client, ClusterState(Inventory(settings)), clock=lambda: T0)
    controller.inventory.upsert_node(
        {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    controller.job_seen(a_checkpointing_job())
    for pod in pods:
        controller.inventory.upsert_pod(pod)
    return controller


def ints_in(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [i for v in value.values() for i in ints_in(v)]
    if isinstance(value, list):
        return [i for v in value for i in ints_in(v)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


@pytest.mark.parametrize("poisoned", [OVERFLOWING_TIME, STEP_PAST_INT64], ids=["time-overflow", "step-past-int64"])
async def test_a_poisoned_report_is_rejected_once_and_the_job_goes_on_from_its_last_good_checkpoint(
    kube: KubeDouble, poisoned: str
) -> None:
    written: list[dict[str, Any]] = []
    kube.answer("patch_status", lambda plural, namespace, name, status: written.append(status))
    kube.allow("release_report_finalizer", "post_event", "delete_pod")
    controller = a_controller(kube, [a_stopped_worker(0, good_report(1200)), a_stopped_worker(1, poisoned)])

    await controller.reconcile(KEY)

    warnings = [args for args in kube.calls("post_event") if args[1:3] == ("Warning", REPORT_REJECTED)]
    assert len(warnings) == 1
    assert "llm-g1-w1" in warnings[0][3] and "step 1000" in warnings[0][3]
    # Nothing of the rejected report is to be recorded: both workers go.
    assert sorted(name for _, name in kube.calls("release_report_finalizer")) == ["llm-g1-w0", "llm-g1-w1"]
    await controller.reconcile(KEY)  # reconciled again, as it will be: told once, not once a pass
    assert len([a for a in kube.calls("post_event") if a[2] == REPORT_REJECTED]) == 1

    for rank in (0, 1):  # let go, the API server deletes them
        controller.inventory.delete_pod("ns", f"llm-g1-w{rank}")
    await controller.reconcile(KEY)
    assert written, "the gang's stop is written, as for a gang that reported nothing"
    status = written[-1]
    assert status["phase"] == "Queued", status  # to be placed again, and resumed from...
    assert status["lastCheckpoint"]["step"] == 1000  # ...the last good checkpoint
    assert all(i in INT64 for i in ints_in(status))
