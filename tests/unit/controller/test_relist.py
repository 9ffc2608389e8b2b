"""Relists and node events reach only the jobs and services they can affect.

The API client is a double that answers only the lists a test sets up; time is looptime's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from aisched.controller.cluster_state import ClusterState
from aisched.controller.relist import relist, sync_caches
from aisched.controller.serving import InferenceServiceController
from aisched.controller.training import TrainingJobController
from aisched.kube import labels
from aisched.kube.client import Listing
from aisched.kube.inventory import Inventory
from aisched.kube.serving_builders import CAPACITY_TYPE, KIND, SERVICE_NAME
from aisched.metrics import Metrics
from aisched.settings import Settings
from tests.builders import a_queue, a_training_job, an_inference_service
from tests.unit.controller.kube_double import KubeDouble

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]
JobKey = tuple[str, str]


def controllers(kube: KubeDouble) -> tuple[TrainingJobController, InferenceServiceController]:
    settings = Settings()
    inventory = Inventory(settings)
    jobs = TrainingJobController(
        settings, kube.client, ClusterState(inventory), metrics=Metrics(CollectorRegistry(), process_metrics=False)
    )
    serving = InferenceServiceController(settings, kube.client, inventory, cluster_snapshot=jobs.cluster_snapshot)
    return jobs, serving


def a_node(name: str, version: int, *, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}, "resourceVersion": str(version)},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def a_worker(job: str, node: str, version: int) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"{job}-worker-0",
            "resourceVersion": str(version),
            "labels": {labels.JOB_KIND: "TrainingJob", labels.JOB_NAME: job, labels.RANK: "0"},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
        "status": {"phase": "Running"},
    }


def a_replica(service: str, node: str, version: int) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ml",
            "name": f"{service}-0",
            "resourceVersion": str(version),
            "labels": {labels.JOB_KIND: KIND, SERVICE_NAME: service, CAPACITY_TYPE: "on-demand"},
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
        "status": {"phase": "Running"},
    }


def a_job(name: str, version: int, *, placed_on: list[str] | None = None) -> dict[str, Any]:
    obj = a_training_job(name).namespace("ns").obj()
    obj["metadata"]["resourceVersion"] = str(version)
    if placed_on is not None:
        obj["status"] = {"phase": "Running", "placement": {"nodes": placed_on}}
    return obj


def a_service(name: str, version: int) -> dict[str, Any]:
    obj = an_inference_service(name).namespace("ml").obj()
    obj["metadata"]["resourceVersion"] = str(version)
    return obj


def lists(
    kube: KubeDouble,
    version: int,
    *,
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    jobs: list[dict[str, Any]] | None = None,
    services: list[dict[str, Any]] | None = None,
    queues: list[dict[str, Any]] | None = None,
) -> None:
    """The cluster as a list at VERSION reads it."""

    def serve(objects: list[dict[str, Any]]) -> Callable[..., Listing[Any]]:
        def answer(convert: Callable[[dict[str, Any]], Any], *, page_size: int) -> Listing[Any]:
            assert page_size == 500
            return Listing([convert(o) for o in objects], str(version))

        return answer

    def custom(plural: str, convert: Callable[[dict[str, Any]], Any], *, page_size: int) -> Listing[Any]:
        return serve({"trainingjobs": jobs or [], "inferenceservices": services or []}[plural])(
            convert, page_size=page_size
        )

    def cluster_objects(group: str, version: str, plural: str, selector: str) -> list[dict[str, Any]]:
        assert (group, plural, selector) == ("aisched.io", "queues", "")
        return queues or []

    kube.answer("list_nodes", serve(nodes)).answer("list_pods", serve(pods)).answer("list_custom_metadata", custom)
    kube.answer("list_cluster_objects", cluster_objects)
    kube.answer("list_resource_claims", serve([]))  # what DRA claims hold: tests/unit/kube/test_claim_records.py


async def marked(controller: TrainingJobController | InferenceServiceController) -> set[Any]:
    return await controller.queue.next_batch(lambda: [], timeout=0)


async def test_a_node_event_marks_the_jobs_with_a_worker_there_or_placed_there(kube: KubeDouble) -> None:
    jobs, _ = controllers(kube)
    for name in ("n1", "n2", "n3"):
        jobs.inventory.upsert_node(a_node(name, 1))
    jobs.job_seen(a_job("running", 2))
    jobs.inventory.upsert_pod(a_worker("running", "n1", 3))
    jobs.job_seen(a_job("placing", 4, placed_on=["n2"]))  # no pod yet, but n2 is in its placement
    jobs.job_seen(a_job("elsewhere", 5, placed_on=["n3"]))
    await marked(jobs)
    jobs.node_changed("n1")
    assert await marked(jobs) == {("ns", "running")}
    jobs.node_changed("n2")
    assert await marked(jobs) == {("ns", "placing")}
    jobs.job_seen(a_job("placing", 6, placed_on=["n3"]))  # placed again elsewhere: n2 no longer concerns it
    await marked(jobs)
    jobs.node_changed("n2")
    assert await marked(jobs) == set()
    jobs.job_gone("ns", "elsewhere")
    jobs.node_changed("n3")
    assert await marked(jobs) == {("ns", "placing")}


async def test_a_node_event_marks_the_services_with_a_replica_there(kube: KubeDouble) -> None:
    _, serving = controllers(kube)
    serving.service_seen(a_service("chat", 1))
    serving.service_seen(a_service("embed", 2))
    serving.pod_changed(a_replica("chat", "n1", 3), deleted=False)
    serving.pod_changed(a_replica("embed", "n2", 4), deleted=False)
    await marked(serving)
    serving.node_changed("n1")
    assert await marked(serving) == {("ml", "chat")}


async def test_a_relist_marks_only_what_it_changed(kube: KubeDouble) -> None:
    jobs, serving = controllers(kube)
    lists(
        kube,
        10,
        nodes=[a_node("n1", 1), a_node("n2", 1)],
        pods=[a_worker("a", "n1", 2), a_worker("b", "n2", 3)],
        jobs=[a_job("a", 4), a_job("b", 5)],
    )
    await relist(kube.client, jobs.inventory, jobs, serving, page_size=500)
    jobs.job_seen(a_job("a", 4))
    jobs.job_seen(a_job("b", 5))
    await marked(jobs)
    # Missed while the watch was away: a spot notice on n1, nothing else.
    taint = [{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}]
    lists(
        kube,
        20,
        nodes=[a_node("n1", 15, taints=taint), a_node("n2", 1)],
        pods=[a_worker("a", "n1", 2), a_worker("b", "n2", 3)],
        jobs=[a_job("a", 4), a_job("b", 5)],
    )
    await relist(kube.client, jobs.inventory, jobs, serving, page_size=500)
    assert await marked(jobs) == {("ns", "a")}
    assert jobs.inventory.doomed_nodes(datetime(2026, 1, 1, tzinfo=UTC)) == {"n1"}  # a notice: whenever


async def test_a_relist_reads_the_queues_before_any_cycle_and_keeps_a_newer_one_the_watch_brought(
    kube: KubeDouble,
) -> None:
    jobs, serving = controllers(kube)
    listed = [a_queue(name, nominal_gpus=8).obj() for name in ("team-a", "team-b")]
    for version, queue in enumerate(listed, start=10):
        queue["metadata"]["resourceVersion"] = str(version)
    newer = a_queue("team-b", nominal_gpus=16).obj()
    newer["metadata"]["resourceVersion"] = "12"
    jobs.queue_seen(newer)  # the watch was quicker than the list for this one
    lists(kube, 11, nodes=[], pods=[], queues=listed)
    await relist(kube.client, jobs.inventory, jobs, serving, page_size=500)
    assert jobs.queues["team-a"] is listed[0]
    assert jobs.queues["team-b"] is newer


async def test_a_relist_sees_what_was_deleted_while_the_watch_was_away(kube: KubeDouble) -> None:
    jobs, serving = controllers(kube)
    jobs.inventory.upsert_node(a_node("n1", 1))
    jobs.job_seen(a_job("deleted", 2))
    jobs.job_seen(a_job("kept", 3))
    jobs.job_seen(a_job("created-after-the-list", 30))
    serving.service_seen(a_service("gone", 4))
    jobs.inventory.upsert_pod(a_worker("kept", "n1", 5))  # its worker went in the gap
    await marked(jobs)
    lists(kube, 20, nodes=[a_node("n1", 1)], pods=[], jobs=[a_job("kept", 3)])
    await relist(kube.client, jobs.inventory, jobs, serving, page_size=500)
    assert set(jobs.jobs) == {("ns", "kept"), ("ns", "created-after-the-list")}
    assert serving.services == {}
    assert await marked(jobs) == {("ns", "kept")}
    assert jobs.inventory.pods_of_job("ns", "kept") == []


async def test_a_replica_we_just_created_survives_a_list_read_before_it(kube: KubeDouble) -> None:
    jobs, serving = controllers(kube)
    serving.service_seen(a_service("chat", 1))
    serving.replicas.created([a_replica("chat", "n1", 0)])
    lists(kube, 20, nodes=[], pods=[])
    await relist(kube.client, jobs.inventory, jobs, serving, page_size=500)
    assert serving.replicas.names_of(("ml", "chat")) == {"chat-0"}
    # Still not listed a relist later: it never came to be.
    await relist(kube.client, jobs.inventory, jobs, serving, page_size=500)
    assert serving.replicas.names_of(("ml", "chat")) == set()


async def test_a_relist_keeps_a_replica_the_watch_saw_after_the_list(kube: KubeDouble) -> None:
    jobs, serving = controllers(kube)
    serving.service_seen(a_service("chat", 1))
    serving.pod_changed(a_replica("chat", "n2", 25), deleted=False)
    lists(kube, 20, nodes=[], pods=[a_replica("chat", "n1", 15)])
    await relist(kube.client, jobs.inventory, jobs, serving, page_size=500)
    (replica,) = serving.replicas.of(("ml", "chat"))
    assert replica.node == "n2"


async def test_the_start_up_sync_fills_every_cache_a_cycle_reads_before_any_cycle(kube: KubeDouble) -> None:
    """WaitForCacheSync: a cycle that ran before the running gang's TrainingJob arrived admitted a
    newcomer of its queue beside it, uncharged. The start lists each job and service whole."""
    jobs, serving = controllers(kube)
    running = a_job("victim", 4, placed_on=["n1"])
    waiting = a_job("urgent", 5)
    lists(
        kube,
        10,
        nodes=[a_node("n1", 1)],
        pods=[a_worker("victim", "n1", 2)],
        jobs=[running, waiting],
        services=[a_service("chat", 6)],
        queues=[a_queue("team-a", nominal_gpus=8).obj()],
    )
    pages: list[int] = []

    def whole(plural: str, convert: Callable[[dict[str, Any]], Any], *, page_size: int) -> Listing[Any]:
        pages.append(page_size)
        objects = {"trainingjobs": [running, waiting], "inferenceservices": [a_service("chat", 6)]}[plural]
        return Listing([convert(o) for o in objects], "10")

    kube.answer("list_custom", whole)
    await sync_caches(kube.client, jobs.inventory, jobs, serving, page_size=500, object_page_size=8)
    assert set(jobs.jobs) == {("ns", "victim"), ("ns", "urgent")}
    assert set(serving.services) == {("ml", "chat")}
    assert "team-a" in jobs.queues
    assert pages == [8, 8]  # a tenant's object may be a MiB: a few at a time
    assert "template" not in running["spec"]  # let go once the store kept what it reads
    assert await marked(jobs) == {("ns", "victim"), ("ns", "urgent")}
