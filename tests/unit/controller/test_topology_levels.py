"""A job naming a topology level the cluster cannot give is told so in its first pass, next to a plain one admitted.

The controller runs with the default topology (the nvidia preset: Zone, NVLinkDomain) over the
API double that refuses every call a test did not allow.
"""

from __future__ import annotations

import pytest

from aisched.policy.level_refusals import TOPOLOGY_LEVEL_NOT_LABELLED, UNKNOWN_TOPOLOGY_LEVEL
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_isolation import a_placed_job, condition, one_pass, status_of
from tests.unit.controller.test_training_loop import a_controller, a_node

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


@pytest.mark.parametrize(
    ("level", "reason", "words"),
    [
        ("Rack", UNKNOWN_TOPOLOGY_LEVEL, "its levels are Node, NVLinkDomain, Zone"),
        ("NVLinkDomain", TOPOLOGY_LEVEL_NOT_LABELLED, "nvidia.com/gpu.clique"),
    ],
)
async def test_a_level_the_cluster_cannot_give_is_a_condition_at_once(
    kube: KubeDouble, level: str, reason: str, words: str
) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))  # no topology label but its name
    controller.inventory.upsert_node(a_node("n2", 8))
    controller.job_seen(a_placed_job("spread", replicas=2, topology__requiredLevel=level))
    controller.job_seen(a_placed_job("plain"))
    await one_pass(controller)

    assert status_of(controller, "plain")["phase"] == "Placing"
    refused = status_of(controller, "spread")
    assert (refused["phase"], refused["reason"]) == ("Queued", reason)
    admitted = condition(refused, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", reason)
    assert words in admitted["message"]


async def test_a_level_named_in_another_case_and_labelled_places_the_gang(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event", "create", "release_scheduling_gates")
    controller = a_controller(kube)
    for name in ("n1", "n2"):
        node = a_node(name, 8)
        node["metadata"]["labels"] = {"topology.kubernetes.io/zone": "z1"}
        controller.inventory.upsert_node(node)
    controller.job_seen(a_placed_job("spread", replicas=3, topology__requiredLevel="zone"))  # 12 GPUs: two nodes
    await one_pass(controller)

    placed = status_of(controller, "spread")
    assert placed["phase"] == "Placing"
    assert (placed["placement"]["level"], placed["placement"]["domain"]) == ("Zone", "z1")
