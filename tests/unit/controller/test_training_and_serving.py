"""TrainingJob gangs and InferenceService replicas competing for the last GPUs: never one GPU twice.

Both controllers run as the operator wires them (one inventory, one record of promises in
flight, one cluster snapshot) against an API server double that keeps the pods it was asked to
create and shows them to the watch only when the test says so. Hypothesis draws the order of
the training cycle's passes, the serving passes and the watch's deliveries; whatever it is, no
node ever has more GPUs pinned to it than it has (counted on what the API server holds: the pods
delivered and those still on their way).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.controller.serving import InferenceServiceController
from aisched.controller.training import TrainingJobController
from aisched.kube.inventory import Inventory
from tests.builders import a_queue, an_inference_service
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_loop import T0, a_controller, a_job, a_node, forbidden

NODES = {"n1": 8, "n2": 8}
STEPS = st.sampled_from(["train", "serve", "deliver"])


class ApiServer:
    """The pods created, in order; `pending` those the watch has not delivered yet."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []

    def create(self, obj: dict[str, Any]) -> None:
        if obj.get("kind", "Pod") != "Pod":
            return
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if any((p["metadata"]["namespace"], p["metadata"]["name"]) == key for p in self.pods):
            return  # AlreadyExists, which `KubeClient.create` takes as done: an earlier attempt got there
        self.pods.append(obj)
        self.pending.append(obj)

    def pinned_gpus(self, inventory: Inventory) -> Counter[str]:
        held: Counter[str] = Counter()
        for obj in self.pods:
            record = inventory.pod_from_object(obj)
            assert record is not None and record.gpu_node is not None
            held[record.gpu_node] += record.gpus
        return held


def _wired(kube: KubeDouble) -> tuple[TrainingJobController, InferenceServiceController]:
    """The two controllers as `controller/main.py` wires them."""
    training = a_controller(kube)
    for name, gpus in NODES.items():
        training.inventory.upsert_node(a_node(name, gpus))
    serving = InferenceServiceController(
        training.settings,
        kube.client,
        training.inventory,
        cluster_snapshot=training.cluster_snapshot,
        in_flight=training.in_flight,
        shares=training.shares,
        queues=training.queues,
        replica_asks=training.state.replica_asks,
        closing=training.store.closing,
        clock=lambda: T0,
    )
    training.state.charged_from(serving.gpus_held)
    return training, serving


async def _burst(
    steps: list[str], *, job_priority: int = 0, service_priority: int = 0
) -> tuple[Counter[str], int, ApiServer]:
    kube, api = KubeDouble(), ApiServer()
    kube.allow("patch_status", "post_event", "apply_service", "annotate_custom").answer("create", api.create)
    training, serving = _wired(kube)
    for i in range(3):  # 12 GPUs of gangs and 8 of replicas, for 16
        job = a_job(f"gang-{i}", gpusPerReplica=4, priority=job_priority)
        job["metadata"]["uid"] = f"uid-gang-{i}"
        training.job_seen(job)
    for i in range(2):
        service = (
            an_inference_service(f"chat-{i}")
            .namespace("ns")
            .replicas(2)
            .set("gpusPerReplica", 2)
            .set("priority", service_priority)
            .obj()
        )
        service["metadata"].update(uid=f"uid-chat-{i}", generation=1)
        serving.service_seen(service)
    # The tail has every ask answered: a serving pass asks, the cycle decides, the next pass makes the pods.
    for step in [*steps, "deliver_all", "train", "serve", "train", "serve", "deliver_all"]:
        if step == "train":
            await training.reconcile_once(set(training.jobs))
        elif step == "serve":
            await serving.reconcile_once(set(serving.services))
        else:
            delivered = api.pending[:1] if step == "deliver" else list(api.pending)
            for obj in delivered:
                api.pending.remove(obj)
                training.pod_changed(training.inventory.upsert_pod(obj))
                serving.pod_changed(obj, deleted=False)
        held = api.pinned_gpus(training.inventory)
        assert all(held[node] <= gpus for node, gpus in NODES.items()), f"after {step}: {dict(held)}"
    kube.assert_only_expected_calls()
    return api.pinned_gpus(training.inventory), len(training.in_flight), api


@settings(max_examples=40, deadline=None)
@given(st.lists(STEPS, min_size=1, max_size=10))
def test_no_order_of_passes_and_watch_events_pins_more_gpus_to_a_node_than_it_has(steps: list[str]) -> None:
    held, promised, _ = asyncio.run(_burst(steps))
    assert promised == 0, "every promise settles once the watch has shown every pod"
    assert sum(held.values()) == 16, "the burst fills the pool: 12 of gangs and 4 of replicas, or 8 and 8"


def _gpus_of(api: ApiServer, prefix: str) -> int:
    return sum(
        int(c["resources"]["limits"].get("nvidia.com/gpu", 0))
        for p in api.pods
        if p["metadata"]["name"].startswith(prefix)
        for c in p["spec"]["containers"]
    )


def test_services_that_outrank_the_gangs_get_the_gpus_first_in_the_same_cycle() -> None:
    # Every service has asked before the first cycle: that cycle decides gangs and replicas together.
    _, _, api = asyncio.run(_burst(["serve", "train"], job_priority=0, service_priority=10))
    assert (_gpus_of(api, "chat-"), _gpus_of(api, "gang-")) == (8, 8)


def test_gangs_that_outrank_the_services_get_the_gpus_first_in_the_same_cycle() -> None:
    _, _, api = asyncio.run(_burst(["serve", "train"], job_priority=10, service_priority=0))
    assert (_gpus_of(api, "chat-"), _gpus_of(api, "gang-")) == (4, 12)


async def _within_quota() -> tuple[ApiServer, KubeDouble]:
    kube, api = KubeDouble(), ApiServer()
    kube.allow("patch_status", "post_event", "apply_service", "annotate_custom").answer("create", api.create)
    training, serving = _wired(kube)
    training.queue_seen(a_queue("default", nominal_gpus=3).obj())
    service = an_inference_service("chat").namespace("ns").replicas(4).set("gpusPerReplica", 1).obj()
    service["metadata"].update(uid="uid-chat", generation=1)
    serving.service_seen(service)
    for _ in range(3):  # ask, decide, make: the queue pays for three of the four
        await serving.reconcile_once(set(serving.services))
        await training.reconcile_once(set(training.jobs))
    for obj in list(api.pending):
        training.pod_changed(training.inventory.upsert_pod(obj))
        serving.pod_changed(obj, deleted=False)
    await serving.reconcile_once(set(serving.services))
    await training.reconcile_once(set(training.jobs))  # the replicas held are charged: room for none
    await serving.reconcile_once(set(serving.services))
    return api, kube


def test_a_service_gets_only_the_replicas_its_queues_quota_pays_for_and_says_why_not_more() -> None:
    api, kube = asyncio.run(_within_quota())
    assert _gpus_of(api, "chat-") == 3
    quota_events = [c for c in kube.calls("post_event") if c[2] == "QuotaExceeded"]
    assert len(quota_events) == 1  # said once, not at every pass
    status = [c[3] for c in kube.calls("patch_status") if c[2] == "chat"][-1]
    progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "QuotaExceeded")
    assert "queue default is at its quota" in progressing["message"]


async def _a_service_in_a_closing_namespace() -> tuple[ApiServer, KubeDouble, TrainingJobController]:
    kube, api = KubeDouble(), ApiServer()

    def create(obj: dict[str, Any]) -> None:
        if obj["metadata"]["namespace"] == "closing":
            body = '{"kind":"Status","reason":"Forbidden","message":"pods \\"x\\" is forbidden: unable to create'
            body += ' new content in namespace closing because it is being terminated"}'
            raise forbidden(body)
        api.create(obj)

    kube.allow("patch_status", "post_event", "apply_service", "annotate_custom").answer("create", create)
    training, serving = _wired(kube)
    service = an_inference_service("chat").namespace("closing").replicas(2).set("gpusPerReplica", 8).obj()
    service["metadata"].update(uid="uid-chat", generation=1)
    serving.service_seen(service)
    for _ in range(4):  # ask, grant, refused: the namespace is being deleted; then it is left alone
        await serving.reconcile_once(set(serving.services))
        await training.reconcile_once(set(training.jobs))
    job = a_job("gang", gpusPerReplica=8, replicas=2)
    job["metadata"]["uid"] = "uid-gang"
    training.job_seen(job)
    await training.reconcile_once(set(training.jobs))
    await serving.reconcile_once(set(serving.services))
    return api, kube, training


def test_a_service_whose_namespace_is_being_deleted_asks_no_more_and_holds_no_gpu() -> None:
    api, kube, training = asyncio.run(_a_service_in_a_closing_namespace())
    refused = [c for c in kube.calls("create") if c[0]["metadata"]["namespace"] == "closing"]
    assert len(refused) <= 2, "one grant tried, then the namespace is left alone"
    assert training.state.replica_asks.pending() == [] and len(training.in_flight) == 0
    assert _gpus_of(api, "gang-") == 16  # the whole pool goes to the gang of a namespace that stays
