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
from tests.builders import an_inference_service
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_loop import T0, a_controller, a_job, a_node

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
        clock=lambda: T0,
    )
    training.held_elsewhere = serving.gpus_held
    serving.queue_share.room = training.room_of
    return training, serving


async def _burst(steps: list[str]) -> tuple[Counter[str], int]:
    kube, api = KubeDouble(), ApiServer()
    kube.allow("patch_status", "post_event", "apply_service", "annotate_custom").answer("create", api.create)
    training, serving = _wired(kube)
    for i in range(3):  # 12 GPUs of gangs and 8 of replicas, for 16
        job = a_job(f"gang-{i}", gpusPerReplica=4)
        job["metadata"]["uid"] = f"uid-gang-{i}"
        training.job_seen(job)
    for i in range(2):
        service = an_inference_service(f"chat-{i}").namespace("ns").replicas(2).set("gpusPerReplica", 2).obj()
        service["metadata"].update(uid=f"uid-chat-{i}", generation=1)
        serving.service_seen(service)
    for step in [*steps, "deliver_all", "train", "serve", "deliver_all"]:
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
    return api.pinned_gpus(training.inventory), len(training.in_flight)


@settings(max_examples=40, deadline=None)
@given(st.lists(STEPS, min_size=1, max_size=10))
def test_no_order_of_passes_and_watch_events_pins_more_gpus_to_a_node_than_it_has(steps: list[str]) -> None:
    held, promised = asyncio.run(_burst(steps))
    assert promised == 0, "every promise settles once the watch has shown every pod"
    assert sum(held.values()) == 16, "the burst fills the pool: 12 of gangs and 4 of replicas, or 8 and 8"
