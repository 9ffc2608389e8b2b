"""Tenancy in the scheduling cycle: a Queue takes jobs only from its namespaces, up to its priority cap
and with the tolerations it allows.

A refused job gets Admitted=False with the reason and creates nothing, while a job the queue
takes is admitted in the same pass. Client double, fixed clock, fake loop clock (looptime).
"""

from __future__ import annotations

from typing import Any

import pytest

from aisched.api import TrainingJob
from aisched.policy.placement_record import PLACEMENT_NOT_VERIFIED
from aisched.policy.pod_policy import POD_POLICY_VIOLATION
from aisched.policy.tenancy import (
    NAMESPACE_NOT_ALLOWED,
    PRIORITY_ABOVE_CAP,
    TOLERATION_NOT_ALLOWED,
    Refusal,
    template_tolerations,
    tenancy_from_wire,
)
from tests.builders import a_queue
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_isolation import condition, events, one_pass, status_of
from tests.unit.controller.test_training_loop import a_controller, a_job, a_node

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def research(**spec: Any) -> dict[str, Any]:
    queue = a_queue("research", nominal_gpus=64).obj()
    queue["spec"].update(spec)
    return queue


def queue_refusal(queue: dict[str, Any], job: TrainingJob, namespace: str) -> Refusal | None:
    template = job.spec.template
    tenancy = tenancy_from_wire(queue["spec"])
    return tenancy.refusal("research", namespace, job.spec.priority, template_tolerations(template), template)


def created(kube: KubeDouble) -> list[str]:
    return [obj["metadata"]["name"] for (obj,) in kube.calls("create")]


@pytest.mark.parametrize(
    ("queue_spec", "job_spec", "reason"),
    [
        ({"namespaces": ["team-a"]}, {}, NAMESPACE_NOT_ALLOWED),
        ({"maxPriority": 10}, {"priority": 11}, PRIORITY_ABOVE_CAP),
        (
            {"allowedTolerations": [{"key": "dedicated", "value": "research"}]},
            {"template__spec__tolerations": [{"key": "dedicated", "operator": "Exists"}]},
            TOLERATION_NOT_ALLOWED,
        ),
        ({}, {"template__spec__hostNetwork": True}, POD_POLICY_VIOLATION),
        (
            {"podPolicy": {"allowedHostPaths": [{"pathPrefix": "/data"}]}},
            {"template__spec__volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
            POD_POLICY_VIOLATION,
        ),
    ],
    ids=[
        "namespace not bound",
        "priority above the cap",
        "toleration beyond the allowed",
        "host network by default",
        "host path outside the allowed",
    ],
)
async def test_a_job_its_queue_refuses_is_not_admitted_and_says_why(
    kube: KubeDouble, queue_spec: dict[str, Any], job_spec: dict[str, Any], reason: str
) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.queue_seen(research(**queue_spec))
    controller.job_seen(a_job("refused", queue="research", gpusPerReplica=4, **job_spec))
    controller.job_seen(a_job("taken", gpusPerReplica=4))  # the default queue: no tenancy fields
    await one_pass(controller)
    assert status_of(controller, "taken")["phase"] == "Placing"
    refused = status_of(controller, "refused")
    assert (refused["phase"], refused["reason"]) == ("Queued", reason)
    admitted = condition(refused, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", reason)
    assert "research" in admitted["message"]
    assert ("refused", "Warning", reason) in events(kube)
    assert not [name for name in created(kube) if name.startswith("refused")]


async def test_a_job_within_its_queues_namespaces_cap_and_tolerations_is_admitted(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    allowed = [{"key": "dedicated", "value": "research", "effect": "NoSchedule"}]
    pod_policy = {"allowHostNetwork": True, "allowedServiceAccountNames": ["trainer"]}
    controller.queue_seen(research(namespaces=["ns"], maxPriority=10, allowedTolerations=allowed, podPolicy=pod_policy))
    tolerations = [{"key": "dedicated", "value": "research", "effect": "NoSchedule"}]
    controller.job_seen(
        a_job(
            "fits",
            queue="research",
            gpusPerReplica=4,
            priority=10,
            template__spec__tolerations=tolerations,
            template__spec__hostNetwork=True,
            template__spec__serviceAccountName="trainer",
        )
    )
    await one_pass(controller)
    assert status_of(controller, "fits")["phase"] == "Placing"


@pytest.mark.looptime(False)
async def test_an_unreadable_list_of_allowed_tolerations_allows_none() -> None:
    """A CRD older or looser than this operator let the list in: it was written to fence nodes off."""
    job = TrainingJob.model_validate(
        a_job("j", queue="research", template__spec__tolerations=[{"key": "dedicated", "operator": "Exists"}])
    )
    for unreadable in ("dedicated", [{"key": ""}], [{"key": "dedicated", "value": 3}]):
        refused = queue_refusal(research(allowedTolerations=unreadable), job, "ns")
        assert refused is not None and refused.reason == TOLERATION_NOT_ALLOWED, unreadable
    assert queue_refusal(research(allowedTolerations=[{"key": "dedicated"}]), job, "ns") is None


async def test_a_running_job_whose_spec_its_queue_now_refuses_stops_and_is_not_left_running_uncharged(
    kube: KubeDouble,
) -> None:
    """A tenant who raises a running job's priority past the cap (or names another queue) does not
    keep the gang: left out of the cycle it would hold its GPUs with no queue charged for them."""
    kube.allow("patch_status", "post_event", "create", "delete_pod", "release_scheduling_gates")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.queue_seen(research(maxPriority=10))
    job = a_job("escapes", queue="research", gpusPerReplica=4, priority=10)
    job["metadata"]["uid"] = "uid-escapes"  # the API server's: the workers' owner reference names it
    controller.job_seen(job)
    await one_pass(controller)
    assert status_of(controller, "escapes")["phase"] == "Placing"
    await one_pass(controller)  # the placed job's workers are created
    for (worker,) in kube.calls("create"):
        controller.inventory.upsert_pod({**worker, "spec": {**worker["spec"], "nodeName": "n1"}})
    assert controller.inventory.used_gpus("n1") == 4

    edited = controller.jobs[("ns", "escapes")]
    edited = {**edited, "metadata": {**edited["metadata"], "generation": 2}}
    edited["spec"] = {**edited["spec"], "priority": 11}
    controller.job_seen(edited)
    await one_pass(controller)

    stopped = status_of(controller, "escapes")
    assert stopped["phase"] == "Queued"
    preempted = condition(stopped, "Preempted")
    assert (preempted["reason"], preempted["status"]) == (PRIORITY_ABOVE_CAP, "True")
    assert "priority 11" in preempted["message"]
    deleted = {name for _, name, *_ in kube.calls("delete_pod")}
    assert deleted == {obj["metadata"]["name"] for (obj,) in kube.calls("create") if obj["kind"] == "Pod"}


async def test_a_placement_written_into_the_status_by_someone_else_starts_no_worker(kube: KubeDouble) -> None:
    """Whoever may write trainingjobs/status cannot admit a job its queue refuses by writing a placement."""
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.queue_seen(research(maxPriority=10))
    forged = a_job("forged", queue="research", gpusPerReplica=4, priority=11)
    forged["metadata"].update(uid="uid-forged", generation=1)
    forged["status"] = {"phase": "Placing", "gangGeneration": 1, "gpus": 4, "placement": {"nodes": ["n1"]}}
    controller.job_seen(forged)
    await one_pass(controller)
    await one_pass(controller)
    assert not created(kube)
    status = status_of(controller, "forged")
    assert status["phase"] == "Queued" and "placement" not in status
    assert ("forged", "Warning", PLACEMENT_NOT_VERIFIED) in events(kube)


async def test_a_running_gang_of_a_queue_not_read_yet_is_not_stopped(kube: KubeDouble) -> None:
    """A new leader's first cycle may come before it has read the Queues: no reason to stop anyone."""
    kube.allow("patch_status", "post_event", "create", "delete_pod", "release_scheduling_gates")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    checkpoints = {"allowedHostPaths": [{"pathPrefix": "/ckpt", "readOnly": False}]}
    controller.queue_seen(research(podPolicy=checkpoints))
    # A hostPath its queue allows, and a queue nobody has read would not (the default pod policy).
    volumes = [{"name": "ckpt", "hostPath": {"path": "/ckpt"}}]
    job = a_job("runs", queue="research", gpusPerReplica=4, template__spec__volumes=volumes)
    job["metadata"]["uid"] = "uid-runs"
    controller.job_seen(job)
    await one_pass(controller)
    await one_pass(controller)
    for (worker,) in kube.calls("create"):
        controller.inventory.upsert_pod({**worker, "spec": {**worker["spec"], "nodeName": "n1"}})
    controller.queue_gone("research")  # as if this process had not read it yet
    edited = controller.jobs[("ns", "runs")]
    controller.job_seen({**edited, "spec": {**edited["spec"], "template": {**edited["spec"]["template"]}}})
    await one_pass(controller)
    assert not kube.calls("delete_pod")
