"""The Service in front of an InferenceService: applied on a spec change and each relist period,
not on every pass; a name someone else holds is asked about again next pass."""

from __future__ import annotations

from typing import Any, cast

import pytest

from aisched.api.inference_service import InferenceService
from aisched.controller.serving.front import ServiceFront
from aisched.kube.client import KubeClient
from tests.unit.controller.test_serving_loop import a_service

pytestmark = pytest.mark.asyncio


class Kube:
    def __init__(self) -> None:
        self.applied: list[str] = []
        self.foreign = False

    async def apply_service(self, obj: dict[str, Any]) -> bool:
        self.applied.append(obj["metadata"]["name"])
        return not self.foreign


async def test_applied_once_per_generation_and_relist_period_and_again_while_foreign() -> None:
    kube, now = Kube(), [0.0]
    front = ServiceFront(cast(KubeClient, kube), relist_seconds=300, clock=lambda: now[0])
    obj = a_service("chat")
    service = InferenceService.model_validate(obj)
    key = ("ml", "chat")

    assert await front.ensure(key, service) and await front.ensure(key, service)
    assert kube.applied == ["chat"]  # the second pass costs no API call
    now[0] = 301
    assert await front.ensure(key, service)
    assert len(kube.applied) == 2  # a relist period later, in case someone deleted it
    newer = InferenceService.model_validate({**obj, "metadata": {**obj["metadata"], "generation": 2}})
    assert await front.ensure(key, newer)
    assert len(kube.applied) == 3

    kube.foreign = True
    front.forget(key)
    assert not await front.ensure(key, newer) and not await front.ensure(key, newer)
    assert len(kube.applied) == 5  # asked every pass until its owner lets the name go
