"""The default queue grants nothing nobody wrote (#27): the operator creates none, and reads it as
locked while it is missing or unreadable, never as the scheduler's queue without a quota."""

from __future__ import annotations

from typing import Any

import pytest

from aisched.policy.queueing import QUOTA_EXCEEDED, QueueQuota, locked_default_queue, with_locked_default
from aisched.policy.tenancy import PRIORITY_ABOVE_CAP, TOLERATION_NOT_ALLOWED
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_isolation import a_placed_job, condition, one_pass, status_of
from tests.unit.controller.test_training_loop import a_controller, a_node

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_the_locked_default_queue_has_no_gpus_and_nothing_to_borrow() -> None:
    quota = QueueQuota.from_queue(locked_default_queue())
    assert (quota.name, quota.nominal_gpus, quota.cohort) == ("default", 0, None)
    team = QueueQuota("team", 8)
    assert with_locked_default([team]) == [team, quota]  # where none was written or read
    written = QueueQuota("default", 64)
    assert with_locked_default([team, written]) == [team, written]  # the one written is the one used


@pytest.mark.parametrize(
    "default_queue",
    [None, {"metadata": {"name": "default", "generation": 1}, "spec": {"nominalGPUs": -1}}],
    ids=["deleted", "unreadable"],
)
async def test_a_job_of_a_default_queue_nobody_wrote_waits_for_quota(
    kube: KubeDouble, default_queue: dict[str, Any] | None
) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)  # with an open default queue, as a platform team may write one
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.queue_gone("default")
    if default_queue is not None:
        controller.queue_seen(default_queue)
    controller.job_seen(a_placed_job("free-rider"))
    await one_pass(controller)
    status = status_of(controller, "free-rider")
    assert (status["phase"], status["reason"]) == ("Queued", QUOTA_EXCEEDED), status
    assert "0 of 0 GPUs" in status["message"]
    assert kube.calls("create") == []


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"priority": 1}, PRIORITY_ABOVE_CAP),
        ({"template__spec__tolerations": [{"key": "dedicated", "operator": "Exists"}]}, TOLERATION_NOT_ALLOWED),
    ],
    ids=["priority", "toleration"],
)
async def test_a_default_queue_nobody_wrote_caps_priority_and_allows_no_toleration(
    kube: KubeDouble, spec: dict[str, Any], reason: str
) -> None:
    kube.allow("patch_status", "post_event")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.queue_gone("default")
    controller.job_seen(a_placed_job("asks-more", **spec))
    await one_pass(controller)
    assert condition(status_of(controller, "asks-more"), "Admitted")["reason"] == reason


async def test_a_default_queue_a_platform_team_wrote_is_the_one_used(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)  # its default queue has every GPU
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.job_seen(a_placed_job("plain", priority=1))
    await one_pass(controller)
    assert status_of(controller, "plain")["phase"] == "Placing"
