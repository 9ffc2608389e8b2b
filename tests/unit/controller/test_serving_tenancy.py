"""An InferenceService goes through its queue's tenancy as a TrainingJob does: one whose template asks
beyond the queue's podPolicy gets no Service and no replica, and says why; once the queue allows
it, it is served. Kube double, fake loop clock."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from aisched.controller.serving import InferenceServiceController
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.policy.pod_policy import POD_POLICY_VIOLATION
from aisched.settings import Settings
from tests.builders import a_queue
from tests.unit.controller.test_serving_loop import Cluster, KubeDouble, a_service, loop_clock, running

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def research(**pod_policy: Any) -> dict[str, Any]:
    return a_queue("research", nominal_gpus=8).set("podPolicy", pod_policy).obj()


def host_network_service() -> dict[str, Any]:
    obj = a_service("sniffer")
    obj["spec"]["queue"] = "research"
    obj["spec"]["template"]["spec"]["hostNetwork"] = True
    return obj


def condition(kube: KubeDouble, name: str, type_: str) -> dict[str, Any]:
    return next(c for c in kube.statuses[name]["conditions"] if c["type"] == type_)


async def test_a_service_its_queue_refuses_creates_nothing_until_the_queue_allows_it() -> None:
    kube, settings = KubeDouble(), Settings()
    controller = InferenceServiceController(
        settings, cast(KubeClient, kube), Inventory(settings), cluster_snapshot=Cluster().snapshot, clock=loop_clock
    )
    controller.queues = {"research": research()}
    async with running(controller):
        controller.service_seen(host_network_service())
        controller.service_seen(a_service("plain"))  # the default queue, which exists not: its defaults
        await asyncio.sleep(0.1)
        assert kube.of("sniffer") == ["patch_status"]
        admitted = condition(kube, "sniffer", "Admitted")
        assert (admitted["status"], admitted["reason"]) == ("False", POD_POLICY_VIOLATION)
        assert admitted["message"].startswith("spec.template.spec.hostNetwork: hostNetwork shares a host namespace")
        assert "queue research" in admitted["message"]
        assert kube.statuses["sniffer"]["phase"] == "Pending"
        assert ("post_event", POD_POLICY_VIOLATION) in kube.calls
        assert kube.of("plain") == ["apply_service", "create", "patch_status"]

        controller.queues = {"research": research(allowHostNetwork=True)}
        controller.queue_changed("research")
        await asyncio.sleep(0.1)
        assert kube.of("sniffer")[1:] == ["apply_service", "create", "patch_status"]
        assert condition(kube, "sniffer", "Admitted")["status"] == "True"
    assert not kube.unexpected


async def test_a_service_of_the_default_queue_nobody_wrote_gets_the_locked_one() -> None:
    # The default queue missing (deleted, or never written) reads as the one the operator would make:
    # no priority above 0, no toleration, as for a TrainingJob; never as an open queue.
    kube, settings = KubeDouble(), Settings()
    controller = InferenceServiceController(
        settings, cast(KubeClient, kube), Inventory(settings), cluster_snapshot=Cluster().snapshot, clock=loop_clock
    )
    urgent = a_service("urgent")
    urgent["spec"]["priority"] = 5
    tolerant = a_service("tolerant")
    tolerant["spec"]["template"]["spec"]["tolerations"] = [{"key": "team-b", "operator": "Exists"}]
    async with running(controller):
        controller.service_seen(urgent)
        controller.service_seen(tolerant)
        await asyncio.sleep(0.1)
        for name in ("urgent", "tolerant"):
            assert kube.of(name) == ["patch_status"]
            assert condition(kube, name, "Admitted")["status"] == "False"
        assert "priority" in condition(kube, "urgent", "Admitted")["message"]
        assert "toleration" in condition(kube, "tolerant", "Admitted")["message"]
