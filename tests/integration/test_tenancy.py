"""Tenants stay in their lane, against the real API server with the operator running: a Queue
takes jobs only from its namespaces, up to its priority cap and with the tolerations it allows.

A refused job stays Queued with Admitted=False and a reason, creates no pod and loses nothing:
once the administrator widens the Queue, it runs. The job the Queue takes runs beside them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from aisched.policy.tenancy import NAMESPACE_NOT_ALLOWED, PRIORITY_ABOVE_CAP, TOLERATION_NOT_ALLOWED
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, job, wait_for, wait_phase, workers
from tests.builders import a_queue, a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
TEAM_TAINT = "aisched.io/team"


@pytest.fixture
def other_namespace(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    name = f"{namespace}-other"
    created = cluster.kubectl("create", "namespace", name)
    assert created.returncode == 0, created.stderr
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def team_queue(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    name = f"team-{namespace}"
    queue = a_queue(name, nominal_gpus=64).obj()
    queue["spec"].update(
        namespaces=[namespace],
        maxPriority=10,
        allowedTolerations=[{"key": TEAM_TAINT, "value": namespace, "effect": "NoSchedule"}],
    )
    apply(cluster, "default", queue)
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")


def admitted(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    conditions = job(cluster, namespace, name).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Admitted"), None)


def refused_for(cluster: LocalCluster, namespace: str, name: str, reason: str) -> dict[str, Any]:
    condition: dict[str, Any] = wait_for(
        lambda: (c := admitted(cluster, namespace, name)) and c["status"] == "False" and c["reason"] == reason and c,
        TIMEOUT,
        f"{namespace}/{name} to be refused with {reason}",
    )
    assert job(cluster, namespace, name)["status"]["phase"] == "Queued"
    assert not workers(cluster, namespace, name)
    return condition


def test_a_queue_refuses_other_namespaces_higher_priorities_and_wider_tolerations_and_takes_its_own(
    cluster: LocalCluster, namespace: str, other_namespace: str, team_queue: str
) -> None:
    own = {"key": TEAM_TAINT, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}
    anyones = {"key": TEAM_TAINT, "operator": "Exists"}  # every team's nodes
    apply(
        cluster,
        namespace,
        a_training_job("fits").gpus(1).queue(team_queue).priority(10).set("template.spec.tolerations", [own]).obj(),
    )
    apply(cluster, namespace, a_training_job("urgent").gpus(1).queue(team_queue).priority(11).obj())
    apply(
        cluster,
        namespace,
        a_training_job("wide").gpus(1).queue(team_queue).set("template.spec.tolerations", [anyones]).obj(),
    )
    apply(cluster, other_namespace, a_training_job("intruder").gpus(1).queue(team_queue).obj())

    wait_phase(cluster, namespace, "fits", "Running")
    assert (
        "is not bound to queue" in refused_for(cluster, other_namespace, "intruder", NAMESPACE_NOT_ALLOWED)["message"]
    )
    assert "priority 11 is above" in refused_for(cluster, namespace, "urgent", PRIORITY_ABOVE_CAP)["message"]
    wide = refused_for(cluster, namespace, "wide", TOLERATION_NOT_ALLOWED)
    assert f"template toleration {TEAM_TAINT}:* reaches nodes queue {team_queue} does not allow" in wide["message"]

    # The administrator widens the queue: what it refused runs, nothing was lost meanwhile.
    widened = {
        "spec": {
            "namespaces": [namespace, other_namespace],
            "maxPriority": 11,
            "allowedTolerations": [{"key": TEAM_TAINT}],
        }
    }
    patched = cluster.kubectl("patch", "queue", team_queue, "--type=merge", "-p", json.dumps(widened))
    assert patched.returncode == 0, patched.stderr
    for ns, name in ((other_namespace, "intruder"), (namespace, "urgent"), (namespace, "wide")):
        wait_phase(cluster, ns, name, "Running", timeout=2 * TIMEOUT)
