"""The InferenceService controller's loop on its work queue, on a fake loop clock and a kube double.

The double records the calls a reconcile makes and fails the test on any other:
nothing here reaches an API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from aisched.controller.serving import InferenceServiceController
from aisched.kube.claims import SHARE_ANNOTATION
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.kube.serving_builders import SERVICE_NAME
from aisched.policy.cluster import ClusterSnapshot, Node
from aisched.settings import Settings
from tests.builders import an_inference_service

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class KubeDouble:
    """Records what the controller writes; `failing` names the services whose Service apply fails."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.annotated: dict[str, dict[str, str]] = {}
        """What each object was annotated with, by name."""
        self.failing: set[str] = set()
        self.foreign: set[str] = set()
        """Names whose Service exists and belongs to someone else."""
        self.invalid: set[str] = set()
        """Names whose replica pods the API server refuses as invalid (422)."""
        self.statuses: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.unexpected: list[str] = []
        self.version = 100
        """The resourceVersion the last write left, counting up as the API server's does."""

    def __getattr__(self, name: str) -> Any:
        # The work queue logs and retries a failing reconcile, so the fixture also checks this list.
        self.unexpected.append(name)
        raise AssertionError(f"KubeClient.{name} must not be called")

    async def apply_service(self, obj: dict[str, Any]) -> bool:
        name = obj["metadata"]["name"]
        if name in self.failing:
            raise RuntimeError(f"the API server refused the Service of {name}")
        self.calls.append(("apply_service", name))
        return name not in self.foreign

    async def create(self, obj: dict[str, Any]) -> None:
        service = obj["metadata"]["labels"][SERVICE_NAME]
        self.calls.append(("create", service))
        self.created.append(obj)
        if service in self.invalid:
            message = f'Pod "{obj["metadata"]["name"]}" is invalid: spec.affinity: Required value'
            error = ApiException(status=422, reason="Unprocessable Entity")
            error.body = json.dumps({"kind": "Status", "message": message})
            raise error

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        self.calls.append(("delete_pod", name))

    async def delete_claim_template(self, namespace: str, name: str) -> None:
        self.calls.append(("delete_claim_template", name))

    async def patch_status(self, plural: str, namespace: str | None, name: str, status: dict[str, Any]) -> str:
        self.calls.append(("patch_status", name))
        self.statuses[name] = status
        self.version += 1
        return str(self.version)

    async def scale_custom(self, plural: str, namespace: str, name: str, replicas: int) -> None:
        self.calls.append(("scale_custom", name))

    async def annotate_custom(self, plural: str, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.calls.append(("annotate_custom", name))
        self.annotated.setdefault(name, {}).update(annotations)
        self.version += 1

    def post_event(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.calls.append(("post_event", reason))

    def of(self, name: str) -> list[str]:
        """The calls made for service NAME (events excluded), in order."""
        return [verb for verb, subject in self.calls if subject == name and verb != "post_event"]


def loop_clock() -> datetime:
    """Wall time that moves with the fake loop clock, as the real one moves with the real loop's."""
    return T0 + timedelta(seconds=asyncio.get_running_loop().time())


def a_service(name: str, replicas: int = 1, *, gpus: int = 1, autoscaled: bool = False) -> dict[str, Any]:
    builder = an_inference_service(name).namespace("ml").replicas(replicas).set("gpusPerReplica", gpus)
    if autoscaled:
        builder.autoscale(1, 4, 10.0)
    obj = builder.obj()
    obj["metadata"].update(uid=f"uid-{name}", generation=1)
    return obj


def someone_elses_pod() -> dict[str, Any]:
    return {"metadata": {"namespace": "other", "name": "x", "labels": {}}, "spec": {"nodeName": "gpu-1"}}


class Cluster:
    """Two 8-GPU nodes; counts the snapshots taken, one per pass that reconciles anything."""

    def __init__(self) -> None:
        self.snapshots = 0

    def snapshot(self) -> ClusterSnapshot:
        self.snapshots += 1
        return ClusterSnapshot([Node("gpu-1", allocatable_gpus=8), Node("gpu-2", allocatable_gpus=8)])


@pytest.fixture
def kube() -> Iterator[KubeDouble]:
    double = KubeDouble()
    yield double
    assert not double.unexpected, f"calls the test did not set up: {double.unexpected}"


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def controller(kube: KubeDouble, cluster: Cluster) -> InferenceServiceController:
    settings = Settings()
    return InferenceServiceController(
        settings, cast(KubeClient, kube), Inventory(settings), cluster_snapshot=cluster.snapshot, clock=loop_clock
    )


@contextlib.asynccontextmanager
async def running(controller: InferenceServiceController) -> AsyncIterator[None]:
    """The controller's loop, started inside the test so that it runs on the test's fake clock."""
    loop = asyncio.create_task(controller.run())
    try:
        yield
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


async def test_a_new_service_gets_its_service_replicas_and_status(
    controller: InferenceServiceController, kube: KubeDouble
) -> None:
    async with running(controller):
        controller.service_seen(a_service("chat", replicas=2))
        await asyncio.sleep(0.1)
        assert kube.of("chat") == ["apply_service", "create", "create", "patch_status"]
        assert ("post_event", "ReplicasStarted") in kube.calls
        assert len(controller.replicas.of(("ml", "chat"))) == 2


async def test_a_failing_service_never_stops_the_others_and_is_retried_with_backoff(
    controller: InferenceServiceController, kube: KubeDouble
) -> None:
    async with running(controller):
        kube.failing.add("bad")
        controller.service_seen(a_service("bad"))
        controller.service_seen(a_service("good"))
        await asyncio.sleep(0.1)
        assert kube.of("good") == ["apply_service", "create", "patch_status"]
        assert kube.of("bad") == []
        assert controller.queue.pending_timers() == 1  # the retry

        kube.failing.clear()
        await asyncio.sleep(1)  # the first backoff
        assert kube.of("bad") == ["apply_service", "create", "patch_status"]
        assert controller.queue.pending_timers() == 0


async def test_a_replica_the_api_server_refuses_is_a_condition_retried_with_backoff_until_fixed(
    controller: InferenceServiceController, kube: KubeDouble, caplog: pytest.LogCaptureFixture
) -> None:
    def failure() -> tuple[str, str, str]:
        condition = next(c for c in kube.statuses["odd"]["conditions"] if c["type"] == "ReplicaFailure")
        return condition["status"], condition["reason"], condition["message"]

    async with running(controller):
        kube.invalid.add("odd")
        controller.service_seen(a_service("odd"))
        controller.service_seen(a_service("good"))
        await asyncio.sleep(0.1)
        status, reason, message = failure()
        assert (status, reason) == ("True", "FailedCreate")
        assert message.endswith("is invalid: spec.affinity: Required value")
        assert kube.of("good") == ["apply_service", "create", "patch_status"]
        assert controller.replicas.of(("ml", "odd")) == []
        assert controller.queue.pending_timers() == 1  # the retry, logged in one line
        assert not any(record.exc_info for record in caplog.records)

        kube.invalid.clear()  # its user fixes the template
        await asyncio.sleep(1)
        assert failure()[:2] == ("False", "Created")
        assert len(controller.replicas.of(("ml", "odd"))) == 1
        assert controller.queue.pending_timers() == 0
        assert [reason for verb, reason in kube.calls if verb == "post_event"].count("FailedCreate") == 1


async def test_a_service_name_someone_else_holds_is_left_alone_and_said_so(
    controller: InferenceServiceController, kube: KubeDouble
) -> None:
    def exposed() -> tuple[str, str]:
        condition = next(c for c in kube.statuses["chat"]["conditions"] if c["type"] == "ServiceExposed")
        return condition["status"], condition["reason"]

    async with running(controller):
        kube.foreign.add("chat")
        controller.service_seen(a_service("chat"))
        await asyncio.sleep(0.1)
        assert exposed() == ("False", "ServiceNotOwned")
        assert kube.of("chat")[1:] == ["create", "patch_status"]  # the replicas start all the same
        kube.foreign.clear()  # its owner deletes it
        controller.mark(("ml", "chat"))
        await asyncio.sleep(0.1)
        assert exposed() == ("True", "ServiceReady")


async def test_each_autoscaler_keeps_its_interval_with_one_pending_timer(
    controller: InferenceServiceController, kube: KubeDouble
) -> None:
    async with running(controller):
        interval = controller.settings.autoscaler.interval_seconds
        controller.service_seen(a_service("chat", autoscaled=True))
        await asyncio.sleep(0.1)
        # No Prometheus: the metric is unavailable, the count is held and the law's memory written each turn.
        assert kube.of("chat").count("annotate_custom") == 1
        assert controller.queue.pending_timers() == 1
        for _ in range(3):
            (key,) = controller.services
            controller.mark(key)  # busy watches add passes; they must not add decisions
            await asyncio.sleep(interval / 3)
        assert kube.of("chat").count("annotate_custom") == 2
        assert controller.queue.pending_timers() == 1
        await asyncio.sleep(interval * 3)
        assert kube.of("chat").count("annotate_custom") == 5
        assert "scale_custom" not in kube.of("chat")


async def test_the_watch_event_of_an_earlier_write_does_not_put_the_old_status_back(
    controller: InferenceServiceController, kube: KubeDouble
) -> None:
    async with running(controller):
        seen = a_service("chat", autoscaled=True)
        seen["metadata"]["resourceVersion"] = str(kube.version)
        controller.service_seen(seen)
        await asyncio.sleep(0.1)
        scaling = [c["type"] for c in kube.statuses["chat"]["conditions"]]
        assert "ScalingActive" in scaling
        # The event of the autoscaler's annotation comes after our status write: its status is the old one.
        annotated = {**seen, "metadata": {**seen["metadata"], "resourceVersion": str(kube.version - 1)}}
        controller.service_seen(annotated)
        await asyncio.sleep(0.1)  # a pass between autoscaler decisions keeps what the last one said
        assert [c["type"] for c in kube.statuses["chat"]["conditions"]] == scaling
        newer = {**seen, "metadata": {**seen["metadata"], "resourceVersion": str(kube.version + 1)}}
        controller.service_seen(newer)
        assert controller.services[("ml", "chat")]["metadata"]["resourceVersion"] == str(kube.version + 1)


async def test_a_replica_made_counts_in_every_snapshot_until_the_watch_shows_it(
    controller: InferenceServiceController, kube: KubeDouble
) -> None:
    async with running(controller):
        controller.service_seen(a_service("chat", replicas=2, gpus=2))
        await asyncio.sleep(0.1)
        # The pods are made, the watch has not shown them: the record both controllers' snapshots
        # count (the TrainingJob cycle's included) holds their GPUs on the nodes they were placed on.
        assert sum(controller.in_flight.by_node().values()) == 4 and len(controller.in_flight) == 2
        first, second = kube.created
        controller.inventory.upsert_pod(first)
        controller.pod_changed(first, deleted=False)
        assert sum(controller.in_flight.by_node().values()) == 2  # the inventory counts the first now
        controller.inventory.delete_pod(second["metadata"]["namespace"], second["metadata"]["name"], "")
        controller.pod_changed(second, deleted=True)  # gone before it was ever seen: nothing stays promised
        assert controller.in_flight.by_node() == {} and len(controller.in_flight) == 0


async def test_a_deleted_service_leaves_no_timer_and_is_not_reconciled(
    controller: InferenceServiceController, kube: KubeDouble, cluster: Cluster
) -> None:
    async with running(controller):
        controller.service_seen(a_service("chat", autoscaled=True))
        await asyncio.sleep(0.1)
        controller.service_gone("ml", "chat")
        assert controller.queue.pending_timers() == 0
        calls, snapshots = len(kube.calls), cluster.snapshots
        await asyncio.sleep(controller.settings.resync_seconds * 2)
        assert (len(kube.calls), cluster.snapshots) == (calls, snapshots)


async def test_the_periodic_resync_repairs_what_no_watch_event_marked(
    controller: InferenceServiceController, kube: KubeDouble
) -> None:
    async with running(controller):
        controller.service_seen(a_service("chat"))
        await asyncio.sleep(0.1)
        [pod] = controller.replicas.of(("ml", "chat"))
        controller.replicas.gone(pod)  # as if the pod's deletion event had been dropped
        await asyncio.sleep(controller.settings.resync_seconds / 2)
        assert kube.of("chat").count("create") == 1
        await asyncio.sleep(controller.settings.resync_seconds / 2)
        assert kube.of("chat").count("create") == 2


async def test_someone_elses_pod_going_wakes_only_services_waiting_for_room(
    controller: InferenceServiceController, cluster: Cluster
) -> None:
    async with running(controller):
        controller.service_seen(a_service("fits", gpus=1))
        await asyncio.sleep(0.1)
        before = cluster.snapshots
        controller.pod_changed(someone_elses_pod(), deleted=True)
        await asyncio.sleep(0.1)
        assert cluster.snapshots == before  # nobody waits: no pass

        controller.service_seen(a_service("big", replicas=3, gpus=8))  # two 8-GPU nodes hold two
        await asyncio.sleep(0.1)
        assert controller.placement.waiting_for_capacity == {("ml", "big")}
        before = cluster.snapshots
        controller.pod_changed(someone_elses_pod(), deleted=True)
        await asyncio.sleep(0.1)
        assert cluster.snapshots == before + 1


def departed_replica(name: str, *, shared: bool) -> dict[str, Any]:
    """A replica pod of ml/chat as its deletion event shows it, with the operator's share annotation or not."""
    metadata: dict[str, Any] = {
        "namespace": "ml",
        "name": name,
        "labels": {"aisched.io/kind": "InferenceService", SERVICE_NAME: "chat"},
    }
    if shared:
        metadata["annotations"] = {SHARE_ANNOTATION: "gpu-0,300,24000"}
    return {"metadata": metadata, "spec": {"nodeName": "gpu-1"}, "status": {"phase": "Running"}}


async def test_a_departed_replicas_claim_template_is_deleted_at_its_services_next_pass(
    controller: InferenceServiceController, kube: KubeDouble
) -> None:
    async with running(controller):
        controller.service_seen(a_service("chat"))
        await asyncio.sleep(0.1)
        controller.pod_changed(departed_replica("chat-shared", shared=True), deleted=True)
        controller.pod_changed(departed_replica("chat-whole", shared=False), deleted=True)
        await asyncio.sleep(0.1)
        deleted = [name for verb, name in kube.calls if verb == "delete_claim_template"]
        assert deleted == ["chat-shared"]  # a replica of whole GPUs had no template
        assert controller.placement.departed_claims == {}
