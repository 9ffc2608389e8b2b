"""The chart's ValidatingAdmissionPolicy: rendered by default and bound to every namespace but the
exempt ones, and its CEL, evaluated here as the API server evaluates it, refuses exactly the
templates it names (the real API server runs it in tests/integration/test_pod_policy.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.paths import CHART
from tests.tools.admission_cel import refusals
from tests.tools.binaries import by_kind, helm, render

SHOW = "templates/admission/template-ceiling.yaml"
PLAIN: dict[str, Any] = {
    "apiVersion": "aisched.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "j", "namespace": "team-a"},
    "spec": {"template": {"spec": {"containers": [{"name": "t", "image": "t", "ports": [{"containerPort": 80}]}]}}},
}


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    (found,) = by_kind(render(show_only=SHOW), "ValidatingAdmissionPolicy")
    return found


def test_the_policy_is_bound_to_every_namespace_but_the_exempt_ones_and_can_be_turned_off() -> None:
    rendered = render("admissionPolicy.exemptNamespaceLabel=example.com/trusted", show_only=SHOW)
    (policy,) = by_kind(rendered, "ValidatingAdmissionPolicy")
    (binding,) = by_kind(rendered, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (selector,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == {"key": "example.com/trusted", "operator": "NotIn", "values": ["true"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert {r for rule in policy["spec"]["matchConstraints"]["resourceRules"] for r in rule["resources"]} == {
        "trainingjobs",
        "inferenceservices",
    }
    everything = render()
    assert by_kind(everything, "ValidatingAdmissionPolicy")
    assert not by_kind(render("admissionPolicy.enabled=false"), "ValidatingAdmissionPolicy")


@pytest.mark.parametrize(
    ("change", "refused_for"),
    [
        ({"hostNetwork": True}, "hostNetwork, hostPID and hostIPC"),
        ({"hostPID": True}, "hostNetwork, hostPID and hostIPC"),
        ({"hostIPC": True}, "hostNetwork, hostPID and hostIPC"),
        ({"volumes": [{"name": "e", "emptyDir": {}}, {"name": "r", "hostPath": {"path": "/"}}]}, "hostPath volumes"),
        ({"containers": [{"name": "t", "image": "t", "securityContext": {"privileged": True}}]}, "privileged"),
        ({"initContainers": [{"name": "i", "image": "i", "securityContext": {"privileged": True}}]}, "privileged"),
        ({"containers": [{"name": "t", "image": "t", "ports": [{"containerPort": 80, "hostPort": 80}]}]}, "host ports"),
        (
            {"containers": [{"name": "t", "image": "t", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]},
            "capabilities beyond the Pod Security baseline",
        ),
        ({"securityContext": {"windowsOptions": {"hostProcess": True}}}, "Windows host processes"),
        (
            {
                "initContainers": [
                    {"name": "i", "image": "i", "securityContext": {"windowsOptions": {"hostProcess": True}}}
                ]
            },
            "Windows host processes",
        ),
    ],
)
def test_what_the_policy_refuses_and_what_it_lets_through(
    policy: dict[str, Any], change: dict[str, Any], refused_for: str
) -> None:
    assert refusals(policy, PLAIN) == []
    asking = copy.deepcopy(PLAIN)
    asking["spec"]["template"]["spec"].update(change)
    (message,) = refusals(policy, asking)
    assert refused_for in message and "namespace team-a" in message
    assert "aisched.io/privileged-workloads=true" in message
    # The same object written again with its template unchanged (the operator's writes) passes.
    assert refusals(policy, asking, old=asking) == []
    assert refusals(policy, asking, old=PLAIN) == [message]


def test_flags_set_false_and_host_port_zero_are_no_ask(policy: dict[str, Any]) -> None:
    explicit = copy.deepcopy(PLAIN)
    explicit["spec"]["template"]["spec"].update(
        hostNetwork=False,
        hostPID=False,
        containers=[
            {
                "name": "t",
                "image": "t",
                "securityContext": {
                    "privileged": False,
                    "capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL"]},
                    "windowsOptions": {"hostProcess": False},
                },
                "ports": [{"hostPort": 0}],
            }
        ],
    )
    assert refusals(policy, explicit) == []


# -- the operator's other objects: Services, ResourceClaimTemplates, ResourceClaims ---------------

OBJECTS = "templates/admission/operator-objects.yaml"
OPERATOR = "system:serviceaccount:aisched-system:aisched"
JOB_LABELS = {"app.kubernetes.io/managed-by": "aisched", "aisched.io/kind": "TrainingJob", "aisched.io/job-name": "j"}


def an_object(kind: str, name: str, **metadata: Any) -> dict[str, Any]:
    api_version = "v1" if kind == "Service" else "resource.k8s.io/v1"
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "team-a", **metadata}}


@pytest.fixture(scope="module")
def objects_policy() -> dict[str, Any]:
    (found,) = by_kind(render(show_only=OBJECTS), "ValidatingAdmissionPolicy")
    return found


def test_every_admission_policy_is_bound_and_all_go_with_the_switch() -> None:
    everything = render()
    policies = {p["metadata"]["name"] for p in by_kind(everything, "ValidatingAdmissionPolicy")}
    assert policies == {
        "aisched-template-ceiling",
        "aisched-worker-labels",
        "aisched-operator-objects",
        "aisched-admission-gate",
        "aisched-workload-guard",
    }
    assert {b["spec"]["policyName"] for b in by_kind(everything, "ValidatingAdmissionPolicyBinding")} == policies
    off = render("admissionPolicy.enabled=false")
    assert not by_kind(off, "ValidatingAdmissionPolicy") and not by_kind(off, "ValidatingAdmissionPolicyBinding")


def test_the_policies_need_kubernetes_1_30_and_say_how_to_install_without_them() -> None:
    old = helm("template", "aisched", str(CHART), "--kube-version", "1.29.0", check=False)
    assert old.returncode != 0 and "needs Kubernetes 1.30 or later" in old.stderr and "set it to false" in old.stderr
    helm("template", "aisched", str(CHART), "--kube-version", "1.29.0", "--set", "admissionPolicy.enabled=false")


@pytest.mark.parametrize("kind", ["Service", "ResourceClaimTemplate", "ResourceClaim"])
def test_a_tenant_makes_no_object_carrying_the_operators_keys(objects_policy: dict[str, Any], kind: str) -> None:
    forged = an_object(kind, "mine", labels=JOB_LABELS)
    assert refusals(objects_policy, forged, user=OPERATOR) == []
    (message,) = refusals(objects_policy, forged)
    assert message.startswith("metadata.labels: labels under aisched.io/ are set by the aisched operator only")
    annotated = an_object(kind, "mine", annotations={"aisched.io/gpu-share": "gpu-0,1000,81920"})
    (message,) = refusals(objects_policy, annotated)
    assert "annotations under aisched.io/" in message
    assert refusals(objects_policy, an_object(kind, "mine", labels={"app": "x"}, annotations={"a": "b"})) == []
    # Nor takes one of its own over by adding them.
    plain = an_object(kind, "mine", labels={"app": "x"})
    assert refusals(objects_policy, forged, old=plain)


@pytest.mark.parametrize("kind", ["Service", "ResourceClaimTemplate"])
def test_what_the_operator_made_keeps_its_keys(objects_policy: dict[str, Any], kind: str) -> None:
    ours = an_object(kind, "j-g1-w0", labels=JOB_LABELS, annotations={"aisched.io/gpu-share": "gpu-0,250,20480"})
    relabelled = copy.deepcopy(ours)
    relabelled["metadata"]["labels"]["team"] = "a"
    assert refusals(objects_policy, relabelled, old=ours) == []
    removals: list[dict[str, Any]] = [{"labels": {"app": "x"}}, {"annotations": {}}]
    for stripped in removals:
        edited = copy.deepcopy(ours)
        edited["metadata"].update(stripped)
        (message,) = refusals(objects_policy, edited, old=ours)
        assert "cannot be removed" in message and kind.lower() in message
        assert refusals(objects_policy, edited, old=ours, user=OPERATOR) == []
    moved = copy.deepcopy(ours)
    moved["metadata"]["labels"]["aisched.io/job-name"] = "k"
    assert refusals(objects_policy, moved, old=ours)


def test_a_workers_claim_template_name_is_the_operators(objects_policy: dict[str, Any]) -> None:
    for name in ("j-g1-w0", "train-big-g12-w31"):
        squatting = an_object("ResourceClaimTemplate", name)
        (message,) = refusals(objects_policy, squatting)
        assert f"metadata.name: {name} is named as the ResourceClaimTemplate of a TrainingJob worker" in message
        assert refusals(objects_policy, squatting, user=OPERATOR) == []
    for name in ("j-g1", "gpu-w0", "j-g1-w0-data"):
        assert refusals(objects_policy, an_object("ResourceClaimTemplate", name)) == []
    # Only templates: a Service or a claim may be named so.
    assert refusals(objects_policy, an_object("Service", "j-g1-w0")) == []
    assert refusals(objects_policy, an_object("ResourceClaim", "j-g1-w0")) == []
