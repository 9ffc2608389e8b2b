"""Workers stripped of their labels, and pods of deleted jobs, are found and deleted by the operator.

The attacks of issue #37 with the admission policy off: a tenant takes every aisched.io/ label off a
running worker (the job no longer sees it and would start another beside it), or strips a pinned
worker's job label, owner references and finalizer and deletes the job (it kept its node full in
the operator's view, charged to no one). Through the controller, on a client double that refuses
every call a test did not allow; the controller's clock is the test's.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from aisched.controller.cluster_state import ClusterState
from aisched.controller.training import TrainingJobController
from aisched.controller.training.stray_workers import STRAY_WORKER_DELETED
from aisched.kube import labels
from aisched.kube.inventory import Inventory
from aisched.metrics import Metrics
from aisched.policy.stray_workers import ORPHAN_GRACE
from aisched.settings import Settings
from tests.builders import a_queue, a_training_job
from tests.unit.controller.kube_double import KubeDouble

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = ("ns", "llm")
WORKER = "llm-g1-w0"
CALLS = ("patch_status", "post_event", "create", "delete_pod", "release_report_finalizer", "release_scheduling_gates")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def a_controller(kube: KubeDouble, clock: Clock) -> TrainingJobController:
    settings = Settings()
    controller = TrainingJobController(
        settings,
        kube.client,
        ClusterState(Inventory(settings)),
        metrics=Metrics(CollectorRegistry(), process_metrics=False),
        clock=clock,
    )
    controller.queue_seen(a_queue("default", nominal_gpus=1_000_000).obj())
    controller.inventory.upsert_node(
        {
            "metadata": {"name": "n1", "labels": {}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    return controller


async def one_pass(controller: TrainingJobController) -> None:
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))


async def a_running_worker(kube: KubeDouble, controller: TrainingJobController) -> dict[str, Any]:
    """Job ns/llm admitted on n1, and its worker as the API server then shows it: bound and running."""
    kube.allow(*CALLS)
    job = a_training_job("llm").namespace("ns").gpus(8).obj()
    job["metadata"]["uid"] = "uid-llm"
    controller.job_seen(job)
    await one_pass(controller)
    (pod,) = (obj for (obj,) in kube.calls("create") if obj["kind"] == "Pod")
    assert pod["metadata"]["name"] == WORKER and labels.REPORT_FINALIZER in pod["metadata"]["finalizers"]
    running: dict[str, Any] = copy.deepcopy(pod)
    running["metadata"]["resourceVersion"] = "2"
    running["spec"]["nodeName"] = "n1"
    running["status"] = {"phase": "Running"}
    seen(controller, running)
    return running


def seen(controller: TrainingJobController, pod: dict[str, Any]) -> None:
    """POD's watch event, as the handler passes it on."""
    controller.pod_changed(controller.inventory.upsert_pod(pod))


def edited(pod: dict[str, Any], version: int, **metadata: Any) -> dict[str, Any]:
    changed = copy.deepcopy(pod)
    changed["metadata"].update(metadata, resourceVersion=str(version))
    return changed


def refuse(*_: Any) -> None:
    raise ApiException(status=500, reason="the API server is unavailable")


def stray_deletions(kube: KubeDouble, name: str = WORKER) -> int:
    """Deletions of NAME as a stray's (with the pod's own grace; the lifecycle names one)."""
    return sum(1 for call in kube.calls("delete_pod") if call == ("ns", name))


async def test_a_worker_stripped_of_its_labels_is_deleted_and_its_job_told(kube: KubeDouble) -> None:
    controller = a_controller(kube, Clock())
    worker = await a_running_worker(kube, controller)
    assert controller.inventory.used_gpus("n1") == 8
    await one_pass(controller)
    assert stray_deletions(kube) == 0  # its own worker, labelled as such: nothing to take back

    seen(controller, edited(worker, 3, labels={"app": "mine"}))
    assert KEY in await controller.queue.next_batch(controller.jobs.keys)  # the job is reconciled at once
    await controller.reconcile_once([KEY])
    assert stray_deletions(kube) == 1
    assert ("ns", WORKER) in kube.calls("release_report_finalizer")  # its report is never read
    (message,) = [m for _, _, reason, m in kube.calls("post_event") if reason == STRAY_WORKER_DELETED]
    assert f"deleted pod {WORKER}" in message and "labels were removed or changed" in message


@pytest.mark.parametrize(
    "change",
    [
        {labels.RANK: "3"},
        {labels.GANG_GENERATION: "7"},
        {labels.JOB_NAME: "someone-else"},
        {labels.JOB_KIND: "InferenceService"},
    ],
)
async def test_a_worker_whose_labels_no_longer_say_its_name_is_none_of_its_jobs_workers(
    kube: KubeDouble, change: dict[str, str]
) -> None:
    controller = a_controller(kube, Clock())
    worker = await a_running_worker(kube, controller)
    seen(controller, edited(worker, 3, labels={**worker["metadata"]["labels"], **change}))
    await controller.reconcile_once([KEY])
    assert stray_deletions(kube) == 1


async def test_a_stray_already_going_with_its_finalizer_off_is_left_to_go(kube: KubeDouble) -> None:
    controller = a_controller(kube, Clock())
    worker = await a_running_worker(kube, controller)
    going = edited(worker, 3, labels={}, finalizers=[], deletionTimestamp=T0.isoformat())
    seen(controller, going)
    before = len(kube.calls("release_report_finalizer"))
    await controller.reconcile_once([KEY])
    assert stray_deletions(kube) == 0 and len(kube.calls("release_report_finalizer")) == before


async def test_pods_that_are_not_named_as_a_live_jobs_workers_are_none_of_the_operators_business(
    kube: KubeDouble,
) -> None:
    clock = Clock()
    controller = a_controller(kube, clock)
    await a_running_worker(kube, controller)
    for name in ("llm-worker-0", "other-g1-w0", "llm-g1-w0-extra"):
        tenants: dict[str, Any] = {
            "metadata": {"namespace": "ns", "name": name, "resourceVersion": "5", "labels": {"app": "x"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }
        seen(controller, tenants)
        seen(controller, {**tenants, "metadata": {**tenants["metadata"], "namespace": "elsewhere"}})
    await controller.reconcile_once([KEY])
    clock.now += 2 * ORPHAN_GRACE
    await one_pass(controller)
    assert not [call for call in kube.calls("delete_pod") if call[1] != WORKER]


async def test_a_pinned_worker_of_a_deleted_job_stripped_of_its_owners_is_deleted_after_the_collectors_turn(
    kube: KubeDouble,
) -> None:
    clock = Clock()
    controller = a_controller(kube, clock)
    worker = await a_running_worker(kube, controller)
    pinned = edited(worker, 3, ownerReferences=[], finalizers=[])
    del pinned["spec"]["nodeName"]
    pinned["status"] = {"phase": "Pending"}
    pinned["metadata"]["labels"] = {labels.JOB_KIND: "TrainingJob", "app": "x"}  # no job-name: no job's
    seen(controller, pinned)
    assert controller.inventory.used_gpus("n1") == 8  # pinned: the operator counts it on its node
    controller.job_gone(*KEY)
    await one_pass(controller)
    assert stray_deletions(kube) == 0  # the garbage collector deletes a job's pods first

    clock.now += ORPHAN_GRACE
    await one_pass(controller)
    assert stray_deletions(kube) == 1
    await one_pass(controller)
    assert stray_deletions(kube) == 1  # done: not deleted again


async def test_a_worker_stripped_of_everything_before_its_job_went_is_deleted_too(kube: KubeDouble) -> None:
    clock = Clock()
    controller = a_controller(kube, clock)
    worker = await a_running_worker(kube, controller)
    seen(controller, edited(worker, 3, labels={}, ownerReferences=[], finalizers=[]))
    kube.answer("delete_pod", refuse)
    await controller.reconcile_once([KEY])  # the stray's delete fails: logged, the reconcile goes on
    controller.job_gone(*KEY)
    kube.allow("delete_pod")
    clock.now += ORPHAN_GRACE
    await one_pass(controller)  # the first pass after the job went starts its grace
    clock.now += ORPHAN_GRACE
    await one_pass(controller)
    assert kube.calls("delete_pod")[-1] == ("ns", WORKER)


async def test_a_relist_that_finds_pods_of_no_job_has_them_deleted(kube: KubeDouble) -> None:
    clock = Clock()
    controller = a_controller(kube, clock)
    worker = await a_running_worker(kube, controller)
    orphan = edited(worker, 3, name="gone-g4-w1", ownerReferences=[])
    orphan["metadata"]["labels"] = {labels.JOB_KIND: "TrainingJob", labels.JOB_NAME: "gone"}
    seen(controller, orphan)
    held = controller.inventory.pods
    controller.workers_unowned(r for r in list(held.values()) if r.job_key != KEY)
    controller.workers_unowned([held[("ns", WORKER)]])  # listed before its job was: it is back now
    await one_pass(controller)
    clock.now += ORPHAN_GRACE
    await one_pass(controller)
    assert stray_deletions(kube, "gone-g4-w1") == 1
    assert stray_deletions(kube) == 0
