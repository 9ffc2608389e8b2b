"""Issue 37's borrowed quota that was never given back, against the real API server and operator.

Two queues of one cohort, 8 GPUs each, and the GB200 rack of the small preset (4 nodes x 4 GPUs)
for both. The borrower takes the whole rack, 8 GPUs of it on the lender's idle quota; then the
lender's 8-GPU job, within its own nominal quota, asks for them back. From a borrowing gang that
took 3 s; from a borrowing InferenceService's replicas it never happened (the job was still Queued
after 150 s): replicas were no preemption victims. Both now go within the same bound, and the
service's status names the lending queue and nothing else of the other tenant's. So do a model
server Deployment's replicas, told in its events.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from aisched.policy.workloads.model import QUEUE_LABEL
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, get_object, list_objects, wait_for, wait_phase
from aisched.testing.workload_policies import workload_policies
from tests.builders import a_queue, a_training_job, an_inference_service
from tests.integration.test_workloads import events_of, gated, pod_spec

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
GB200 = "NVIDIA-GB200"
RECLAIM_BOUND_SECONDS = 30.0
"""How long the lender's job may wait for what it lent: a few cycles, and the victims' pods to go."""


@pytest.fixture
def borrower_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A second tenant's namespace, ready for pods; deleted afterwards."""
    core = client.CoreV1Api(api_client)
    name = f"borrower-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
        30,
        f"the default ServiceAccount of {name}",
    )
    yield name
    core.delete_namespace(name)


@pytest.fixture
def cohort(cluster: LocalCluster, namespace: str, borrower_namespace: str) -> Iterator[tuple[str, str]]:
    """(lender, borrower): two queues of 8 GPUs in one cohort, each bound to its tenant's namespace."""
    suffix = uuid.uuid4().hex[:6]
    names = (f"lender-{suffix}", f"borrower-{suffix}")
    for name, bound in zip(names, (namespace, borrower_namespace), strict=True):
        queue = a_queue(name, nominal_gpus=8).cohort(f"reclaim-{suffix}").obj()
        queue["spec"]["namespaces"] = [bound]
        apply(cluster, "default", queue)
    yield names
    for name in names:
        cluster.kubectl("delete", "queue", name, "--wait=false")


def _seconds_until(predicate: Callable[[], bool], what: str) -> float:
    started = time.monotonic()
    wait_for(predicate, RECLAIM_BOUND_SECONDS, what)
    return time.monotonic() - started


def _running_pods(cluster: LocalCluster, namespace: str, selector: str) -> list[str]:
    pods = list_objects(cluster, "pods", namespace, selector)
    return [
        p["metadata"]["name"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp") and p.get("status", {}).get("phase") == "Running"
    ]


def _lender_job(cluster: LocalCluster, namespace: str, queue: str) -> float:
    """The lender's 2 x 4 GPU job submitted; seconds until it runs."""
    apply(cluster, namespace, a_training_job("mine").queue(queue).gpu_type(GB200).gpus(4).replicas(2).obj())
    return _seconds_until(
        lambda: (get_object(cluster, "trainingjob", "mine", namespace).get("status") or {}).get("phase") == "Running",
        "the lender's job to run on what it lent",
    )


def test_a_lender_takes_back_from_a_borrowing_gang_within_the_bound(
    cluster: LocalCluster, namespace: str, borrower_namespace: str, cohort: tuple[str, str]
) -> None:
    lender, borrower = cohort
    gang = a_training_job("wide").queue(borrower).gpu_type(GB200).gpus(4).replicas(4).obj()
    apply(cluster, borrower_namespace, gang)
    wait_phase(cluster, borrower_namespace, "wide", "Running")
    seconds = _lender_job(cluster, namespace, lender)
    assert seconds < RECLAIM_BOUND_SECONDS
    wide = get_object(cluster, "trainingjob", "wide", borrower_namespace)
    assert wide["status"]["phase"] != "Running", wide["status"]  # preempted whole: 16 GPUs no longer fit


def test_a_lender_takes_back_what_a_service_borrows_within_the_same_bound_and_the_service_says_who(
    cluster: LocalCluster, namespace: str, borrower_namespace: str, cohort: tuple[str, str]
) -> None:
    lender, borrower = cohort
    service = an_inference_service("chat").replicas(4).set("gpusPerReplica", 4).obj()
    service["spec"].update(queue=borrower, gpuType=GB200)
    apply(cluster, borrower_namespace, service)
    selector = "aisched.io/kind=InferenceService"
    wait_for(
        lambda: len(_running_pods(cluster, borrower_namespace, selector)) == 4,
        TIMEOUT,
        "the service to borrow the rack: 16 GPUs on a quota of 8",
    )
    seconds = _lender_job(cluster, namespace, lender)
    assert seconds < RECLAIM_BOUND_SECONDS, f"reclaimed in {seconds:.1f} s"
    assert len(_running_pods(cluster, borrower_namespace, selector)) == 2, "only what was borrowed goes"

    def says_who() -> str | None:
        status = get_object(cluster, "inferenceservice", "chat", borrower_namespace).get("status") or {}
        conditions: list[dict[str, str]] = status.get("conditions") or []
        message = next((c.get("message", "") for c in conditions if c.get("type") == "Progressing"), "")
        return message if f"reclaimed by the lending queue {lender}" in message else None

    message = wait_for(says_who, TIMEOUT, "the service's status to name the lending queue")
    assert namespace not in message and "mine" not in message, message
    # Its lost replicas are not made again on the lender's GPUs: the cohort has no idle quota left. A
    # window to watch for something that must not happen, not a wait for a condition.
    time.sleep(5)
    assert len(_running_pods(cluster, borrower_namespace, selector)) == 2


def test_a_lender_takes_back_what_a_model_server_deployment_borrows_within_the_same_bound(
    cluster: LocalCluster, namespace: str, borrower_namespace: str, cohort: tuple[str, str]
) -> None:
    """The same borrowing, by a vLLM Deployment labelled for the borrower's queue (the chart's workload policies
    in force in its namespace): two of its replicas go, and are made again gated, to wait for quota."""
    lender, borrower = cohort
    labels = {"app": "vllm"}
    template = {"metadata": {"labels": labels}, "spec": pod_spec(4) | {"restartPolicy": "Always"}}
    template["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": GB200}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "labels": {QUEUE_LABEL: borrower}},
        "spec": {"replicas": 4, "selector": {"matchLabels": labels}, "template": template},
    }
    with workload_policies(cluster, borrower_namespace):
        apply(cluster, borrower_namespace, deployment)
        wait_for(
            lambda: len(_running_pods(cluster, borrower_namespace, "app=vllm")) == 4,
            TIMEOUT,
            "the Deployment to borrow the rack: 16 GPUs on a quota of 8",
        )
        seconds = _lender_job(cluster, namespace, lender)
        assert seconds < RECLAIM_BOUND_SECONDS, f"reclaimed in {seconds:.1f} s"
        assert len(_running_pods(cluster, borrower_namespace, "app=vllm")) == 2, "only what was borrowed goes"
        reclaimed = [e for e in events_of(cluster, borrower_namespace, "vllm") if e.startswith("Reclaimed")]
        assert reclaimed and all(f"lending queue {lender}" in e and namespace not in e for e in reclaimed)
        # Made again by its ReplicaSet, they wait gated: the cohort has no idle quota left. A window to watch
        # for something that must not happen, not a wait for a condition.
        time.sleep(5)
        pods = [
            p
            for p in list_objects(cluster, "pods", borrower_namespace, "app=vllm")
            if not p["metadata"].get("deletionTimestamp")
        ]
        assert len(_running_pods(cluster, borrower_namespace, "app=vllm")) == 2 and sum(gated(p) for p in pods) == 2
