"""The chart's workload policies as helm renders them: one hold per kind of workloads.kinds and the
pod gate, each bound and failing closed; the guards with admissionPolicy; the operator's grants
on exactly the kinds held; and nothing of it below Kubernetes 1.36, where MutatingAdmissionPolicy
v1 is not served (the real API server runs them in tests/integration/test_workload_admission.py)."""

from __future__ import annotations

from typing import Any

import yaml

from aisched.policy.workloads.model import ADMISSION_GATE, QUEUE_LABEL, WorkloadKind
from tests.paths import CHART
from tests.tools.binaries import by_kind, helm, render

HELD_KINDS = {kind.value for kind in WorkloadKind if kind is not WorkloadKind.POD_GROUP}


def held_resources(objects: list[dict[str, Any]]) -> set[str]:
    """`<plural>.<group>` of every resource a hold policy matches."""
    return {
        f"{resource}.{group}"
        for policy in by_kind(objects, "MutatingAdmissionPolicy")
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if resource != "pods"
    }


def granted_workloads(objects: list[dict[str, Any]]) -> set[str]:
    (role,) = [r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"] == "aisched"]
    return {
        f"{resource}.{group}"
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if f"{resource}.{group}" in HELD_KINDS
    }


def test_every_kind_is_held_bound_and_failing_closed_and_its_pods_gated() -> None:
    objects = render()
    policies = by_kind(objects, "MutatingAdmissionPolicy")
    assert held_resources(objects) == HELD_KINDS
    assert {b["spec"]["policyName"] for b in by_kind(objects, "MutatingAdmissionPolicyBinding")} == {
        p["metadata"]["name"] for p in policies
    }
    assert all(p["spec"]["failurePolicy"] == "Fail" for p in policies)
    (gate,) = [p for p in policies if p["metadata"]["name"] == "aisched-gate-pods"]
    assert QUEUE_LABEL in gate["spec"]["matchConditions"][0]["expression"]
    assert ADMISSION_GATE in gate["spec"]["mutations"][0]["jsonPatch"]["expression"]
    assert granted_workloads(objects) == HELD_KINDS


def test_a_kind_left_out_is_neither_held_nor_granted() -> None:
    objects = render("workloads.kinds={jobs.batch,deployments.apps}")
    assert held_resources(objects) == {"jobs.batch", "deployments.apps"}
    assert granted_workloads(objects) == {"jobs.batch", "deployments.apps"}
    (guard,) = [p for p in by_kind(objects, "ValidatingAdmissionPolicy") if p["metadata"]["name"].endswith("guard")]
    assert {r for rule in guard["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]} == {
        "jobs",
        "deployments",
    }
    # Without plain pods, only a controller's pods are gated.
    (gate,) = [p for p in by_kind(objects, "MutatingAdmissionPolicy") if p["metadata"]["name"] == "aisched-gate-pods"]
    assert "ownerReferences" in gate["spec"]["matchConditions"][-1]["expression"]


def test_switched_off_nothing_of_it_is_rendered() -> None:
    objects = render("workloads.enabled=false")
    assert not by_kind(objects, "MutatingAdmissionPolicy")
    assert not granted_workloads(objects)
    names = {p["metadata"]["name"] for p in by_kind(objects, "ValidatingAdmissionPolicy")}
    assert not names & {"aisched-workload-guard", "aisched-admission-gate"}


def test_below_kubernetes_1_36_the_install_goes_on_without_them() -> None:
    result = helm("template", "aisched", str(CHART), "--kube-version", "1.35.0")
    assert "MutatingAdmissionPolicy" not in result.stdout
    assert "workload-guard" not in result.stdout and '["jobs"]' not in result.stdout


def test_the_guards_go_with_the_admission_policy_switch_the_holds_do_not() -> None:
    objects = render("admissionPolicy.enabled=false")
    assert not by_kind(objects, "ValidatingAdmissionPolicy")
    assert held_resources(objects) == HELD_KINDS


def _gate_expression(*args: str) -> str:
    result = helm("template", "aisched", str(CHART), "--kube-version", "1.37.2", *args)
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    (gate,) = [p for p in by_kind(objects, "MutatingAdmissionPolicy") if p["metadata"]["name"] == "aisched-gate-pods"]
    return str(gate["spec"]["mutations"][0]["jsonPatch"]["expression"])


def test_a_gangs_pods_are_named_into_its_pod_group_only_where_the_cluster_serves_them() -> None:
    served = ("--api-versions", "scheduling.k8s.io/v1beta1/PodGroup")
    assert "/spec/schedulingGroup" in _gate_expression(*served)
    assert "/spec/schedulingGroup" not in _gate_expression()  # not served: a pod naming one would never bind
    assert "/spec/schedulingGroup" not in _gate_expression(*served, "--set", "workloads.podGroups=false")
