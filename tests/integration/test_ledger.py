"""The ledger against the real API server: GPUs are counted where pods hold them, as kube-scheduler
counts them, and nothing a tenant writes into a spec or a status runs a gang uncharged."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from aisched.policy.placement_record import PLACEMENT_NOT_VERIFIED
from aisched.policy.tenancy import PRIORITY_ABOVE_CAP
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, job, list_objects, wait_for, wait_phase, workers
from tests.builders import a_queue, a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
A100 = "NVIDIA-A100-SXM4-40GB"
ON_DEMAND_A100 = f"nvidia.com/gpu.product={A100},karpenter.sh/capacity-type=on-demand"


@pytest.fixture
def capped_queue(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    """A queue of 8 GPUs for NAMESPACE that grants priorities up to 10."""
    name = f"capped-{uuid.uuid4().hex[:6]}"
    queue = a_queue(name, nominal_gpus=8).obj()
    queue["spec"].update(namespaces=[namespace], maxPriority=10)
    apply(cluster, "default", queue)
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def events_with_reason(cluster: LocalCluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in list_objects(cluster, "events", namespace) if e.get("reason") == reason]


def test_a_running_job_whose_priority_is_raised_past_its_queues_cap_stops_rather_than_runs_uncharged(
    cluster: LocalCluster, namespace: str, capped_queue: str
) -> None:
    apply(cluster, namespace, a_training_job("escapes").queue(capped_queue).priority(10).gpus(8).obj())
    wait_phase(cluster, namespace, "escapes", "Running")

    raised = cluster.kubectl(
        "patch", "tj", "escapes", "-n", namespace, "--type=merge", "-p", json.dumps({"spec": {"priority": 11}})
    )
    assert raised.returncode == 0, raised.stderr

    stopped = wait_for(
        lambda: (j := job(cluster, namespace, "escapes"))["status"].get("phase") == "Queued" and j,
        TIMEOUT,
        "the edited job to stop",
    )
    preempted = condition(stopped, "Preempted")
    assert preempted is not None and preempted["reason"] == PRIORITY_ABOVE_CAP, stopped["status"]
    wait_for(lambda: not workers(cluster, namespace, "escapes"), TIMEOUT, "its workers to go")
    # Refused from then on, with the reason, until the priority is lowered again.
    wait_for(
        lambda: (c := condition(job(cluster, namespace, "escapes"), "Admitted")) and c["reason"] == PRIORITY_ABOVE_CAP,
        TIMEOUT,
        "the job to be refused",
    )


def test_a_placement_written_into_a_refused_jobs_status_starts_no_worker(
    cluster: LocalCluster, namespace: str, capped_queue: str
) -> None:
    apply(cluster, namespace, a_training_job("forged").queue(capped_queue).priority(11).gpus(1).obj())
    wait_for(
        lambda: (c := condition(job(cluster, namespace, "forged"), "Admitted")) and c["reason"] == PRIORITY_ABOVE_CAP,
        TIMEOUT,
        "the job to be refused",
    )
    node = list_objects(cluster, "nodes", "", ON_DEMAND_A100)[0]["metadata"]["name"]
    forged = {"status": {"phase": "Placing", "gangGeneration": 1, "gpus": 1, "placement": {"nodes": [node]}}}
    patched = cluster.kubectl(
        "patch", "tj", "forged", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(forged)
    )
    assert patched.returncode == 0, patched.stderr

    # The operator takes it away (PlacementNotVerified), or the cycle stops the refused "gang" first.
    wait_for(
        lambda: (
            events_with_reason(cluster, namespace, PLACEMENT_NOT_VERIFIED)
            or condition(job(cluster, namespace, "forged"), "Preempted")
        ),
        TIMEOUT,
        "the forged placement to be ignored",
    )
    wait_phase(cluster, namespace, "forged", "Queued")
    assert not workers(cluster, namespace, "forged")


def test_pods_of_others_pinned_to_nodes_they_can_never_bind_to_hold_no_gpus_there(
    cluster: LocalCluster, namespace: str
) -> None:
    """Anyone who may create pods can pin one to every node with a label no node has: kube-scheduler
    sees those nodes empty, and so must the operator, or no job is ever admitted to them."""
    nodes = [n["metadata"]["name"] for n in list_objects(cluster, "nodes", "", ON_DEMAND_A100)]
    assert len(nodes) == 2
    for i, node in enumerate(nodes):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"squatter-{i}"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node, "no-such-label": "anywhere"},
                "containers": [
                    {"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": 8}}},
                ],
            },
        }
        apply(cluster, namespace, pod)
    # A gang that needs both nodes whole.
    apply(cluster, namespace, a_training_job("needs-both").gpu_type(A100).replicas(2).gpus(8).obj())
    wait_phase(cluster, namespace, "needs-both", "Running")
