"""Issue 37's shared-resource and information attacks, against the real API server and operator.

- A preempted job's status and Events named its preemptor's namespace and name to another
  tenant ("preempted by <ns>/<job> (priority 5)"); now a job of another namespace is told by its
  priority (and the queue both share) only, and the preemptor is not told its victims' names.
- Jobs under made-up queue names, deleted, left their series in /metrics for good; now every
  series naming them goes with them.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, get_object, list_objects, wait_for, wait_phase
from aisched.testing.operator import OperatorProcess
from tests.builders import a_queue, a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
MADE_UP_QUEUES = 40


@pytest.fixture
def other_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A second tenant's namespace, ready for pods; deleted afterwards."""
    core = client.CoreV1Api(api_client)
    name = f"other-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
        30,
        f"the default ServiceAccount of {name}",
    )
    yield name
    core.delete_namespace(name)


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == kind), None)


def _event_messages(cluster: LocalCluster, namespace: str, name: str) -> list[str]:
    events = list_objects(cluster, "events", namespace, "")
    return [e.get("message") or "" for e in events if (e.get("involvedObject") or {}).get("name") == name]


def test_a_preempted_job_learns_nothing_of_its_preemptor_in_another_namespace(
    cluster: LocalCluster, namespace: str, other_namespace: str
) -> None:
    queue = f"shared-{uuid.uuid4().hex[:6]}"  # two GPUs for both tenants: the preemptor needs the victim's
    shared = a_queue(queue, nominal_gpus=2).obj()
    shared["spec"]["namespaces"] = [namespace, other_namespace]
    apply(cluster, "default", shared)
    try:
        apply(cluster, namespace, a_training_job("victim").replicas(2).gpus(1).queue(queue).obj())
        wait_phase(cluster, namespace, "victim", "Running")
        apply(cluster, other_namespace, a_training_job("secret-project").gpus(2).queue(queue).priority(5).obj())
        wait_phase(cluster, other_namespace, "secret-project", "Running")

        def preempted() -> dict[str, Any] | None:
            return _condition(get_object(cluster, "trainingjob", "victim", namespace), "Preempted")

        said = wait_for(preempted, TIMEOUT, "the victim's Preempted condition")
        assert said["message"] == f"preempted by a job of priority 5 in queue {queue}; it will be queued again"
        told = [said["message"], *_event_messages(cluster, namespace, "victim")]
        assert told[1:], "the victim's Events"
        for text in told:
            assert other_namespace not in text and "secret-project" not in text, text
        # Nor is the preemptor told whom it preempted in the victim's namespace.
        admitted = _condition(get_object(cluster, "trainingjob", "secret-project", other_namespace), "Admitted")
        for text in [
            admitted["message"] if admitted else "",
            *_event_messages(cluster, other_namespace, "secret-project"),
        ]:
            assert namespace not in text and "victim" not in text, text
    finally:
        cluster.kubectl("delete", "queue", queue, "--wait=false")


def _series_naming(operator: OperatorProcess, fragment: str) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return [line for line in text.splitlines() if not line.startswith("#") and fragment in line]


def test_jobs_under_made_up_queues_leave_no_series_once_deleted(
    cluster: LocalCluster, namespace: str, operator: OperatorProcess
) -> None:
    prefix = f"made-up-{uuid.uuid4().hex[:6]}"
    for index in range(MADE_UP_QUEUES):
        apply(cluster, namespace, a_training_job(f"j{index}").queue(f"{prefix}-{index}").obj())
    wait_for(
        lambda: (
            len({line.split('queue="')[1].split('"')[0] for line in _series_naming(operator, prefix)}) == MADE_UP_QUEUES
        ),
        TIMEOUT,
        "a series for every made-up queue",
    )
    cluster.kubectl("delete", "trainingjobs", "--all", "-n", namespace, "--wait=true")
    wait_for(lambda: not _series_naming(operator, prefix), TIMEOUT, "every series naming a made-up queue to go")
