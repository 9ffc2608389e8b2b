"""A poisoned worker report no longer halts its job (#27), against the real API server.

Two reports that once held a job Running with no workers for good: a time that overflows
when put in UTC (an OverflowError on every reconcile) and a step past int64 (the API
server refused every status write, 422). KWOK plays the kubelet: the worker exits with
the message as its termination message. The report is refused with a Warning on the
job, the gang restarts from the last good checkpoint, and the job's status is written.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from aisched.testing.cluster import (
    TIMEOUT,
    LocalCluster,
    apply,
    job,
    list_objects,
    make_pod_exit,
    running_pods,
    wait_for,
)
from tests.builders import a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]

GOOD_STEP = 100
POISONED = {
    "time-overflows-in-utc": {"step": 200, "path": "/ckpt/step-200", "time": "0001-01-01T00:00:00+14:00"},
    "step-past-int64": {"step": 2**80, "path": "/ckpt/step-huge", "time": None},
}


def running_generation(cluster: LocalCluster, namespace: str, name: str, generation: int) -> dict[str, Any] | None:
    status: dict[str, Any] = job(cluster, namespace, name).get("status", {})
    moved = status.get("phase") == "Running" and status.get("gangGeneration") == generation
    return status if moved and running_pods(cluster, namespace, name) else None


def fail_with(api: client.ApiClient, cluster: LocalCluster, namespace: str, name: str, report: dict[str, Any]) -> str:
    """The gang's one worker fails (exit 1) leaving REPORT as its termination message; its name."""
    report = {**report, "time": report["time"] or datetime.now(UTC).isoformat()}
    pod: str = running_pods(cluster, namespace, name)[0]["metadata"]["name"]
    make_pod_exit(api, pod, namespace, "Failed", message=json.dumps(report), exit_code=1)
    return pod


@pytest.mark.parametrize("poison", POISONED.values(), ids=POISONED.keys())
def test_a_poisoned_report_is_refused_and_the_gang_resumes_from_the_last_good_checkpoint(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient, poison: dict[str, Any]
) -> None:
    name = "poisoned"
    apply(cluster, namespace, a_training_job(name).replicas(1).gpus(1).set("checkpoint.path", "/ckpt").obj())
    wait_for(lambda: running_generation(cluster, namespace, name, 1), TIMEOUT, "the first gang to run")
    good = {"step": GOOD_STEP, "path": f"/ckpt/step-{GOOD_STEP}", "time": None}
    fail_with(api_client, cluster, namespace, name, good)
    status = wait_for(lambda: running_generation(cluster, namespace, name, 2), TIMEOUT, "the gang to restart")
    assert status["lastCheckpoint"]["step"] == GOOD_STEP

    poisoned_pod = fail_with(api_client, cluster, namespace, name, poison)

    # The job goes on: its status is written (the restart and its count), the gang runs again.
    status = wait_for(lambda: running_generation(cluster, namespace, name, 3), TIMEOUT, "the gang to restart again")
    assert status["lastCheckpoint"]["step"] == GOOD_STEP, status
    assert status["restarts"] == 2
    worker = running_pods(cluster, namespace, name)[0]
    env = {e["name"]: e.get("value", "") for e in worker["spec"]["containers"][0].get("env", [])}
    assert env["AISCHED_RESUME_STEP"] == str(GOOD_STEP)

    def rejection() -> dict[str, Any] | None:
        events = list_objects(cluster, "events", namespace)
        return next(
            (
                e
                for e in events
                if e["reason"] == "CheckpointReportRejected" and e["involvedObject"].get("name") == name
            ),
            None,
        )

    event = wait_for(rejection, TIMEOUT, "the Warning that names the rejected report")
    assert event["type"] == "Warning"
    assert poisoned_pod in event["message"] and f"step {GOOD_STEP}" in event["message"], event["message"]
    # Nothing of it is to be recorded: the worker is let go, not held by its report finalizer.
    wait_for(
        lambda: poisoned_pod not in {p["metadata"]["name"] for p in list_objects(cluster, "pods", namespace)} or None,
        TIMEOUT,
        "the poisoned worker to go",
    )
