"""Quota lent is quota given back, carried out: an InferenceService borrowing its cohort's idle quota
loses the replicas a lending queue's job needs, retired by the serving controller, whose status names
the lending queue; the lender's gang is placed in the cycle that decides it and made once they are gone.

Both controllers run as `controller/main.py` wires them, against the in-memory API double."""

from __future__ import annotations

import asyncio

import pytest

from aisched.controller.serving import InferenceServiceController
from aisched.controller.training import TrainingJobController
from tests.builders import a_queue, an_inference_service
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_and_serving import ApiServer, _wired
from tests.unit.controller.test_training_loop import a_job


def _bind(api: ApiServer, training: TrainingJobController, serving: InferenceServiceController) -> None:
    """kube-scheduler binds every pod made to the node it is pinned to, and the watch shows it."""
    for obj in list(api.pending):
        api.pending.remove(obj)
        selector = obj["spec"].get("nodeSelector") or {}
        obj["spec"]["nodeName"] = selector.get("kubernetes.io/hostname")
        obj["spec"].pop("schedulingGates", None)
        obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        training.pod_changed(training.inventory.upsert_pod(obj))
        serving.pod_changed(obj, deleted=False)


async def _lender_reclaims(cycles_before_the_pass: int = 1) -> tuple[ApiServer, KubeDouble, list[str]]:
    kube, api = KubeDouble(), ApiServer()
    deleted: list[str] = []
    kube.allow("patch_status", "post_event", "apply_service", "annotate_custom").answer("create", api.create)
    kube.answer("delete_pod", lambda namespace, name: deleted.append(name))
    training, serving = _wired(kube)  # two nodes of 8 GPUs
    training.queue_seen(a_queue("lender", nominal_gpus=8).cohort("c").obj())
    training.queue_seen(a_queue("borrower", nominal_gpus=8).cohort("c").obj())
    service = (
        an_inference_service("chat").namespace("ns-b").replicas(4).set("gpusPerReplica", 4).set("queue", "borrower")
    ).obj()
    service["metadata"].update(uid="uid-chat", generation=1)
    serving.service_seen(service)
    for _ in range(3):  # ask, decide, make: 16 GPUs on a quota of 8, the lender's idle 8 borrowed
        await serving.reconcile_once(set(serving.services))
        await training.reconcile_once(set(training.jobs))
    _bind(api, training, serving)
    assert len([p for p in api.pods if p["metadata"]["name"].startswith("chat-")]) == 4
    job = a_job("train", gpusPerReplica=8, queue="lender")
    job["metadata"].update(uid="uid-train", namespace="ns-a")
    training.job_seen(job)
    for _ in range(cycles_before_the_pass):  # the cycle admits it in what the replicas borrowed
        await training.reconcile_once(set(training.jobs))
        training.queue.wake()
    await serving.reconcile_once(set(serving.services))  # the service's pass retires them
    for pod in [p for p in api.pods if p["metadata"]["name"] in deleted]:  # the watch shows them gone
        training.inventory.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
        training.queue.wake()
        serving.pod_changed(pod, deleted=True)
    for _ in range(2):  # the service asks again for what it lost: its quota no longer lends it any
        await training.reconcile_once(set(training.jobs))
        await serving.reconcile_once(set(serving.services))
    return api, kube, deleted


@pytest.mark.parametrize("cycles", [1, 3], ids=["the pass at once", "cycles before the pass"])
def test_a_lender_within_its_quota_takes_back_what_replicas_borrow_and_the_service_says_who(cycles: int) -> None:
    # Cycles that run before the service's pass take no more: the replicas reclaimed are not offered again.
    api, kube, deleted = asyncio.run(_lender_reclaims(cycles))
    assert len(deleted) == 2 and all(name.startswith("chat-") for name in deleted)
    reclaimed = [c for c in kube.calls("post_event") if c[2] == "ReplicasReclaimed"]
    assert len(reclaimed) == 1
    assert reclaimed[0][3].startswith("2 replica(s) reclaimed by the lending queue lender")
    status = [c[3] for c in kube.calls("patch_status") if c[2] == "chat"][-1]
    progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "ReplicasReclaimed")
    assert "reclaimed by the lending queue lender" in progressing["message"]
    assert "train" not in progressing["message"] and "ns-a" not in progressing["message"]
    placed = [c[3] for c in kube.calls("patch_status") if c[2] == "train" and (c[3].get("placement") or {})]
    assert placed, "the lender's job is placed in the cycle that reclaims"
    freed = {p["spec"]["nodeName"] for p in api.pods if p["metadata"]["name"] in deleted}
    (worker,) = [p for p in api.pods if p["metadata"]["name"].startswith("train-")]
    assert freed == {worker["spec"]["nodeSelector"]["kubernetes.io/hostname"]}, "the two reclaimed free its node"
    assert len([p for p in api.pods if p["metadata"]["name"].startswith("chat-")]) == 4, "none made again"
    kube.assert_only_expected_calls()
