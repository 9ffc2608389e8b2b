"""The chart's policy that keeps the operator's word on pods to the operator: its CEL, evaluated
here as the API server evaluates it (the inventory counts the GPUs of unbound pods carrying its
labels, and the share of a GPU its annotation names; a worker stripped of them runs uncharged)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.tools.admission_cel import refusals
from tests.tools.binaries import by_kind, render

SHOW = "templates/admission/worker-labels.yaml"
OPERATOR = "system:serviceaccount:aisched-system:aisched"
COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"
TENANT = "system:serviceaccount:team-a:default"
OWNER = {
    "apiVersion": "aisched.io/v1alpha1",
    "kind": "TrainingJob",
    "name": "j",
    "uid": "0d7c3f5e-1111-4222-8333-944455556666",
    "controller": True,
    "blockOwnerDeletion": True,
}
WORKER: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "j-g1-w0",
        "namespace": "team-a",
        "labels": {"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "j", "app": "x"},
        "annotations": {"aisched.io/gpu-share": "gpu-0,250,20480", "karpenter.sh/do-not-disrupt": "true"},
        "ownerReferences": [OWNER],
        "finalizers": ["aisched.io/checkpoint-report"],
    },
    "spec": {"containers": [{"name": "t", "image": "t"}], "schedulingGates": [{"name": "aisched.io/gang"}]},
}


def edited(pod: dict[str, Any], *path: str, value: Any = None, remove: bool = False) -> dict[str, Any]:
    """POD with the field at PATH set to VALUE, or removed."""
    copied = copy.deepcopy(pod)
    *parents, last = path
    at = copied
    for part in parents:
        at = at[part]
    if remove:
        del at[last]
    else:
        at[last] = value
    return copied


def a_tenants_pod(**metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mine", "namespace": "team-a", **metadata},
        "spec": {"containers": [{"name": "t", "image": "t"}]},
    }


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    (found,) = by_kind(render(show_only=SHOW), "ValidatingAdmissionPolicy")
    return found


def test_only_the_operators_service_account_is_left_out(policy: dict[str, Any]) -> None:
    (condition,) = [c for c in policy["spec"]["matchConditions"] if c["name"] == "not-the-operator"]
    assert f"'{OPERATOR}'" in condition["expression"]


def test_the_operator_makes_workers_and_nobody_else_makes_a_pod_that_looks_like_one(policy: dict[str, Any]) -> None:
    assert refusals(policy, WORKER, user=OPERATOR) == []
    for user in ("alice", TENANT):
        messages = refusals(policy, WORKER, user=user)
        assert any("labels under aisched.io/ are set by the aisched operator only" in m for m in messages)
        assert any("annotations under aisched.io/ are set by the aisched operator only" in m for m in messages)
    assert refusals(policy, a_tenants_pod(labels={"app": "x"})) == []
    assert refusals(policy, a_tenants_pod()) == []


def test_a_tenant_annotating_a_pod_with_a_share_is_refused(policy: dict[str, Any]) -> None:
    share = {"aisched.io/gpu-share": "gpu-3,10,1"}
    (message,) = refusals(policy, a_tenants_pod(annotations=share))
    assert "aisched.io/gpu-share says which part of which GPU a pod holds" in message
    (message,) = refusals(policy, a_tenants_pod(annotations=share), old=a_tenants_pod())
    assert "annotations under aisched.io/" in message
    # Its own annotations, and the local cluster's test hooks, are anyone's.
    hooks = {"note": "x", "aisched.io/fake-exit-code": "75"}
    assert refusals(policy, a_tenants_pod(annotations=hooks)) == []
    assert (
        refusals(
            policy,
            edited(WORKER, "metadata", "annotations", value={**hooks, **WORKER["metadata"]["annotations"]}),
            old=WORKER,
        )
        == []
    )


def test_an_update_may_keep_the_operators_keys_and_never_add_or_change_one(policy: dict[str, Any]) -> None:
    annotated = edited(WORKER, "metadata", "annotations", value={**WORKER["metadata"]["annotations"], "note": "x"})
    assert refusals(policy, annotated, old=WORKER) == []
    relabelled = edited(WORKER, "metadata", "labels", value={**WORKER["metadata"]["labels"], "team": "a"})
    assert refusals(policy, relabelled, old=WORKER) == []
    changed = edited(WORKER, "metadata", "labels", "aisched.io/job-name", value="someone-elses")
    (message,) = refusals(policy, changed, old=WORKER)
    assert "labels under aisched.io/ are set by the aisched operator only" in message
    shared = edited(WORKER, "metadata", "annotations", "aisched.io/gpu-share", value="gpu-0,1,1")
    (message,) = refusals(policy, shared, old=WORKER)
    assert "annotations under aisched.io/" in message
    theirs = a_tenants_pod(labels={"app": "x"})
    adopted = edited(theirs, "metadata", "labels", value={"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "j"})
    assert refusals(policy, adopted, old=theirs)
    assert refusals(policy, adopted, old=theirs, user=OPERATOR) == []


@pytest.mark.parametrize("label", ["aisched.io/kind", "aisched.io/job-name"])
def test_a_tenant_removing_a_label_from_a_worker_is_refused(policy: dict[str, Any], label: str) -> None:
    stripped = edited(WORKER, "metadata", "labels", label, remove=True)
    (message,) = refusals(policy, stripped, old=WORKER)
    assert "the aisched.io/ labels of a pod the aisched operator made cannot be removed" in message
    assert refusals(policy, stripped, old=WORKER, user=OPERATOR) == []


def test_a_tenant_removing_every_label_from_a_worker_is_refused(policy: dict[str, Any]) -> None:
    for stripped in (
        edited(WORKER, "metadata", "labels", value={"app": "x"}),
        edited(WORKER, "metadata", "labels", remove=True),
    ):
        (message,) = refusals(policy, stripped, old=WORKER)
        assert "cannot be removed" in message and "delete its TrainingJob or InferenceService instead" in message


def test_a_tenant_removing_the_share_annotation_from_a_worker_is_refused(policy: dict[str, Any]) -> None:
    for stripped in (
        edited(WORKER, "metadata", "annotations", "aisched.io/gpu-share", remove=True),
        edited(WORKER, "metadata", "annotations", remove=True),
    ):
        (message,) = refusals(policy, stripped, old=WORKER)
        assert "the aisched.io/ annotations of a pod the aisched operator made cannot be" in message
    # Off a pod of its own that carried one from before the policy, it may.
    before = a_tenants_pod(annotations={"aisched.io/gpu-share": "gpu-0,1,1"})
    assert refusals(policy, a_tenants_pod(), old=before) == []


def test_owner_references_of_a_worker_are_the_operators_and_the_garbage_collectors(policy: dict[str, Any]) -> None:
    orphaned = edited(WORKER, "metadata", "ownerReferences", remove=True)
    for user in ("alice", TENANT, "system:serviceaccount:kube-system:replicaset-controller"):
        (message,) = refusals(policy, orphaned, old=WORKER, user=user)
        assert "metadata.ownerReferences: the owner references of a pod the aisched operator made" in message
    other = edited(WORKER, "metadata", "ownerReferences", value=[{**OWNER, "uid": "another", "name": "k"}])
    assert refusals(policy, other, old=WORKER)
    not_controller = edited(WORKER, "metadata", "ownerReferences", value=[{**OWNER, "controller": False}])
    assert refusals(policy, not_controller, old=WORKER)
    # The garbage collector takes a reference off when its owner goes with propagationPolicy Orphan,
    # and unblocks one in a foreground deletion; it never adds one.
    for collector in (COLLECTOR, "system:kube-controller-manager"):
        assert refusals(policy, orphaned, old=WORKER, user=collector) == []
        assert (
            refusals(policy, edited(WORKER, "metadata", "ownerReferences", value=[]), old=WORKER, user=collector) == []
        )
        unblocked = edited(WORKER, "metadata", "ownerReferences", value=[{**OWNER, "blockOwnerDeletion": False}])
        assert refusals(policy, unblocked, old=WORKER, user=collector) == []
        assert refusals(policy, other, old=WORKER, user=collector)
    assert refusals(policy, orphaned, old=WORKER, user=OPERATOR) == []
    # A tenant's own pod is its own.
    mine = a_tenants_pod(ownerReferences=[{**OWNER, "kind": "ReplicaSet"}])
    assert refusals(policy, a_tenants_pod(), old=mine) == []


def test_the_report_finalizer_is_taken_off_by_the_operator_only(policy: dict[str, Any]) -> None:
    released = edited(WORKER, "metadata", "finalizers", value=[])
    for stripped in (released, edited(WORKER, "metadata", "finalizers", remove=True)):
        (message,) = refusals(policy, stripped, old=WORKER)
        assert "aisched.io/checkpoint-report is removed by the aisched operator only" in message
        assert refusals(policy, stripped, old=WORKER, user=COLLECTOR)
        assert refusals(policy, stripped, old=WORKER, user=OPERATOR) == []
    # A cluster administrator may clear a worker by hand while the operator is away.
    assert refusals(policy, released, old=WORKER, user="admin", groups=["system:masters"]) == []
    # Other finalizers are anyone's to add and remove.
    added = edited(WORKER, "metadata", "finalizers", value=["aisched.io/checkpoint-report", "example.com/hold"])
    assert refusals(policy, added, old=WORKER) == []
    assert refusals(policy, WORKER, old=added) == []


def test_the_gang_gate_is_lifted_by_the_operator_only(policy: dict[str, Any]) -> None:
    ungated = edited(WORKER, "spec", "schedulingGates", value=[])
    (message,) = refusals(policy, ungated, old=WORKER)
    assert "the aisched.io/gang gate is lifted by the aisched operator only" in message
    assert refusals(policy, edited(WORKER, "spec", "schedulingGates", remove=True), old=WORKER)
    assert refusals(policy, ungated, old=WORKER, user=OPERATOR) == []
    assert refusals(policy, ungated, old=ungated) == []


# A Job's pod the operator admitted: the queue it is charged to, labelled as its gate came off.
ADMITTED_JOB_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "train-0-x",
        "namespace": "team-a",
        "labels": {"scheduling.aisched.io/queue": "team", "aisched.io/charged-queue": "team", "job-name": "train"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}],
        "finalizers": ["batch.kubernetes.io/job-tracking"],
    },
    "spec": {"containers": [{"name": "t", "image": "t"}], "nodeSelector": {"kubernetes.io/hostname": "n1"}},
}
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def test_the_queue_an_admitted_pod_is_charged_to_stays_as_the_operator_wrote_it(policy: dict[str, Any]) -> None:
    """Taken off or changed, a restarted operator would charge a deleted workload's draining pods elsewhere."""
    moved = edited(ADMITTED_JOB_POD, "metadata", "labels", value={**ADMITTED_JOB_POD["metadata"]["labels"]})
    moved["metadata"]["labels"]["aisched.io/charged-queue"] = "someone-else"
    stripped = copy.deepcopy(ADMITTED_JOB_POD)
    del stripped["metadata"]["labels"]["aisched.io/charged-queue"]
    for user in (TENANT, JOB_CONTROLLER):
        assert refusals(policy, moved, old=ADMITTED_JOB_POD, user=user)
        assert refusals(policy, stripped, old=ADMITTED_JOB_POD, user=user)
    # Its own queue label stays the tenant's (taking it off stops the workload); the Job controller still
    # lets go of its finalizer; the operator writes the label in the write that lifts the gate.
    unlabelled = copy.deepcopy(ADMITTED_JOB_POD)
    del unlabelled["metadata"]["labels"]["scheduling.aisched.io/queue"]
    assert refusals(policy, unlabelled, old=ADMITTED_JOB_POD, user=TENANT) == []
    released = edited(ADMITTED_JOB_POD, "metadata", "finalizers", value=[])
    assert refusals(policy, released, old=ADMITTED_JOB_POD, user=JOB_CONTROLLER) == []
    assert refusals(policy, ADMITTED_JOB_POD, old=stripped, user=OPERATOR) == []
    assert refusals(policy, ADMITTED_JOB_POD, old=stripped, user=TENANT)


def test_a_pod_with_none_of_the_operators_keys_is_none_of_its_business(policy: dict[str, Any]) -> None:
    mine = a_tenants_pod(labels={"app": "x"}, finalizers=["aisched.io/checkpoint-report"])
    assert refusals(policy, a_tenants_pod(labels={"app": "y"}), old=mine) == []


def test_it_goes_with_the_admission_policy_switch() -> None:
    assert not by_kind(render("admissionPolicy.enabled=false", show_only=None), "ValidatingAdmissionPolicy")
