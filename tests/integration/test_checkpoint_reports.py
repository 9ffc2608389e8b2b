"""No checkpoint report is lost (#16 item 3): workers keep their pods until the job's status holds what they said.

Against the local cluster: KWOK plays the kubelets (a deleted worker's containers stop
and the pod is deleted once they have), the API server keeps each worker for the
operator's report finalizer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from aisched.kube import labels
from aisched.testing.cluster import (
    TIMEOUT,
    LocalCluster,
    apply,
    job,
    running_pods,
    save_on_sigterm,
    wait_for,
    wait_phase,
    workers,
)
from aisched.testing.operator import OperatorProcess
from tests.builders import a_training_job

pytestmark = [pytest.mark.integration]


@pytest.fixture
def operator_down(operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """The session's operator, which the test stops; it runs again afterwards whatever happens."""
    try:
        yield operator
    finally:
        if operator.process is None or operator.process.poll() is not None:
            operator.start()


def test_workers_that_exit_while_the_operator_is_down_keep_their_reports_for_it(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient, operator_down: OperatorProcess
) -> None:
    apply(cluster, namespace, a_training_job("drained").replicas(2).gpus(1).set("checkpoint.path", "/ckpt").obj())
    before = wait_phase(cluster, namespace, "drained", "Running")["status"]
    pods = running_pods(cluster, namespace, "drained")
    saved = {p["metadata"]["name"]: 700 - 100 * int(p["metadata"]["labels"][labels.RANK]) for p in pods}
    for name, step in saved.items():
        save_on_sigterm(api_client, name, namespace, step)

    operator_down.stop()
    core = client.CoreV1Api(api_client)
    for name in saved:  # a drain evicts them while nobody watches
        core.delete_namespaced_pod(name, namespace)

    def stopped() -> list[dict[str, Any]] | None:
        left = workers(cluster, namespace, "drained")
        ended = [p for p in left if p["status"].get("phase") == "Failed" and p["metadata"].get("deletionTimestamp")]
        return left if len(ended) == len(saved) else None

    wait_for(stopped, TIMEOUT, "the workers to stop")
    time.sleep(3)  # the kubelet (KWOK) has long asked for the pods to go: the finalizer keeps them
    kept = {p["metadata"]["name"]: p for p in workers(cluster, namespace, "drained")}
    assert kept.keys() == saved.keys()
    for pod in kept.values():
        assert labels.REPORT_FINALIZER in pod["metadata"]["finalizers"]
        assert json.loads(pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"])["step"]

    operator_down.start()

    def running_again() -> dict[str, Any] | None:
        status: dict[str, Any] = job(cluster, namespace, "drained").get("status", {})
        moved = status.get("gangGeneration", 0) > before["gangGeneration"]
        return status if moved and status.get("phase") == "Running" else None

    status = wait_for(running_again, TIMEOUT * 2, "drained to run again")
    assert status["lastCheckpoint"]["step"] == min(saved.values()), status  # the step every rank saved
    pods = running_pods(cluster, namespace, "drained")
    assert not {p["metadata"]["name"] for p in pods} & saved.keys()
    for pod in pods:
        env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}
        assert env["AISCHED_RESUME_STEP"] == str(min(saved.values()))
    assert not {p["metadata"]["name"] for p in workers(cluster, namespace, "drained")} & saved.keys()
