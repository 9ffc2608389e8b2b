"""A large InferenceService template is kept elided, as a TrainingJob's is (issue #27): its replicas
are built from the whole template read again, and count as current on every later pass."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from aisched.api.inference_service import InferenceService
from aisched.controller.serving import InferenceServiceController
from aisched.controller.templates import KEPT_TEMPLATE_BYTES, template_bytes
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.kube.serving_builders import template_hash
from aisched.settings import Settings
from tests.unit.controller.test_serving_loop import Cluster, KubeDouble, a_service, loop_clock, running

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


class StoringKube(KubeDouble):
    """The double, with the API server's copy of each service and the replica pods it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[str, dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get_custom", name))
        return self.stored.get(name)

    async def create(self, obj: dict[str, Any]) -> None:
        await super().create(obj)
        self.pods.append(obj)


def large_service(name: str) -> dict[str, Any]:
    obj = a_service(name, replicas=2)
    env = [{"name": f"SETTING_{i}", "value": "x" * 200} for i in range(200)]
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = env
    assert template_bytes(obj["spec"]["template"]) > KEPT_TEMPLATE_BYTES
    return obj


async def test_a_large_template_is_kept_elided_and_its_replicas_built_from_the_whole() -> None:
    kube, settings = StoringKube(), Settings()
    controller = InferenceServiceController(
        settings, cast(KubeClient, kube), Inventory(settings), cluster_snapshot=Cluster().snapshot, clock=loop_clock
    )
    obj = large_service("big")
    kube.stored["big"] = obj
    whole_hash = template_hash(InferenceService.model_validate(obj))
    async with running(controller):
        controller.service_seen(obj)
        kept = controller.services[("ml", "big")]
        assert "env" not in kept["spec"]["template"]["spec"]["containers"][0]
        assert template_bytes(kept["spec"]["template"]) < KEPT_TEMPLATE_BYTES
        await asyncio.sleep(0.1)
        assert kube.of("big") == ["apply_service", "get_custom", "create", "create", "patch_status"]
        assert all(len(pod["spec"]["containers"][0]["env"]) == 200 for pod in kube.pods)
        assert {pod["metadata"]["labels"]["aisched.io/template-hash"] for pod in kube.pods} == {whole_hash}

        controller.mark(("ml", "big"))  # another pass: the replicas are of the current template
        await asyncio.sleep(0.1)
        assert [verb for verb in kube.of("big")[5:] if verb != "patch_status"] == []  # nothing read, made or retired
        progressing = next(c for c in kube.statuses["big"]["conditions"] if c["type"] == "Progressing")
        assert progressing["reason"] != "RollingOut"
    assert not kube.unexpected


async def test_a_template_changed_since_the_event_makes_no_replica_from_either() -> None:
    kube, settings = StoringKube(), Settings()
    controller = InferenceServiceController(
        settings, cast(KubeClient, kube), Inventory(settings), cluster_snapshot=Cluster().snapshot, clock=loop_clock
    )
    obj = large_service("big")
    changed = large_service("big")
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "other:2"
    kube.stored["big"] = changed  # the watch has not brought the edit yet
    async with running(controller):
        controller.service_seen(obj)
        await asyncio.sleep(0.1)
        assert kube.pods == []
        assert controller.queue.pending_timers() == 1  # tried again with backoff
    assert not kube.unexpected
