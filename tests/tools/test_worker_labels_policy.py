"""The chart's policy that keeps the operator's labels on pods to the operator: its CEL, evaluated
here as the API server evaluates it (the inventory counts the GPUs of unbound pods carrying them)."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel

from tests.tools.binaries import by_kind, render

SHOW = "templates/admission/worker-labels.yaml"
OPERATOR = "system:serviceaccount:aisched-system:aisched"
_CEL = celpy.Environment()
WORKER: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "j-worker-0",
        "namespace": "team-a",
        "labels": {"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "j", "app": "x"},
    },
    "spec": {"containers": [{"name": "t", "image": "t"}]},
}


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    return _CEL.program(_CEL.compile(expression)).evaluate(activation)


def refused(policy: dict[str, Any], user: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> bool:
    request = {"operation": "UPDATE" if old else "CREATE", "userInfo": {"username": user}}
    activation = {"object": json_to_cel(obj), "oldObject": json_to_cel(old), "request": json_to_cel(request)}
    if not all(evaluate(c["expression"], activation) for c in policy["spec"]["matchConditions"]):
        return False
    return not all(evaluate(v["expression"], activation) for v in policy["spec"]["validations"])


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    (found,) = by_kind(render(show_only=SHOW), "ValidatingAdmissionPolicy")
    return found


def test_only_the_operators_service_account_names_it(policy: dict[str, Any]) -> None:
    assert f"'{OPERATOR}'" in policy["spec"]["matchConditions"][1]["expression"]


def test_the_operator_makes_workers_and_nobody_else_makes_a_pod_that_looks_like_one(policy: dict[str, Any]) -> None:
    assert not refused(policy, OPERATOR, WORKER)
    assert refused(policy, "alice", WORKER)
    assert refused(policy, "system:serviceaccount:team-a:default", WORKER)
    plain = copy.deepcopy(WORKER)
    plain["metadata"]["labels"] = {"app": "x"}
    assert not refused(policy, "alice", plain)
    unlabelled = copy.deepcopy(WORKER)
    del unlabelled["metadata"]["labels"]
    assert not refused(policy, "alice", unlabelled)


def test_an_update_may_keep_the_operators_labels_and_never_add_or_change_one(policy: dict[str, Any]) -> None:
    annotated = copy.deepcopy(WORKER)
    annotated["metadata"]["annotations"] = {"note": "by a user"}
    assert not refused(policy, "alice", annotated, old=WORKER)
    changed = copy.deepcopy(WORKER)
    changed["metadata"]["labels"]["aisched.io/job-name"] = "someone-elses"
    assert refused(policy, "alice", changed, old=WORKER)
    theirs = copy.deepcopy(WORKER)
    theirs["metadata"]["labels"] = {"app": "x"}
    adopted = copy.deepcopy(WORKER)
    assert refused(policy, "alice", adopted, old=theirs)
    assert not refused(policy, OPERATOR, adopted, old=theirs)


def test_it_goes_with_the_admission_policy_switch() -> None:
    assert not by_kind(render("admissionPolicy.enabled=false", show_only=None), "ValidatingAdmissionPolicy")
