"""Workers the API server refuses: here, Pod Security's restricted profile against a plain template.

The job says why in its WorkersCreated condition and a FailedCreate event, with the server's
own message; once the namespace lets the pods in, the retries create them and the job runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, job, wait_for, wait_phase
from tests.builders import a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
ENFORCE = "pod-security.kubernetes.io/enforce"


def workers_created(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    conditions = job(cluster, namespace, name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "WorkersCreated"), None)


def test_a_worker_refused_by_pod_security_is_a_condition_and_runs_once_let_in(
    cluster: LocalCluster, namespace: str
) -> None:
    labelled = cluster.kubectl("label", "namespace", namespace, f"{ENFORCE}=restricted")
    assert labelled.returncode == 0, labelled.stderr
    apply(cluster, namespace, a_training_job("plain").replicas(1).gpus(1).obj())
    refused = wait_for(
        lambda: (c := workers_created(cluster, namespace, "plain")) and c["status"] == "False" and c,
        TIMEOUT,
        "the job to say its worker was refused",
    )
    assert refused["reason"] == "FailedCreate"
    assert "violates PodSecurity" in refused["message"], refused
    assert job(cluster, namespace, "plain")["status"]["phase"] == "Placing"
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    assert any(e["reason"] == "FailedCreate" and "PodSecurity" in e["message"] for e in events)

    relabelled = cluster.kubectl("label", "--overwrite", "namespace", namespace, f"{ENFORCE}=privileged")
    assert relabelled.returncode == 0, relabelled.stderr
    wait_phase(cluster, namespace, "plain", "Running", timeout=2 * TIMEOUT)
    created = workers_created(cluster, namespace, "plain")
    assert created is not None
    assert (created["status"], created["reason"]) == ("True", "Created")
