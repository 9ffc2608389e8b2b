"""The chart's ValidatingAdmissionPolicy: rendered by default and bound to every namespace but the
exempt ones, and its CEL, evaluated here as the API server evaluates it, refuses exactly the
templates it names (the real API server runs it in tests/integration/test_pod_policy.py)."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel

from tests.tools.binaries import by_kind, render

SHOW = "templates/admission/template-ceiling.yaml"
_CEL = celpy.Environment()
PLAIN: dict[str, Any] = {
    "apiVersion": "aisched.io/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "j", "namespace": "team-a"},
    "spec": {"template": {"spec": {"containers": [{"name": "t", "image": "t", "ports": [{"containerPort": 80}]}]}}},
}


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    return _CEL.program(_CEL.compile(expression)).evaluate(activation)


def refusals(policy: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """The messages the policy answers an admission request for OBJ with (empty: admitted)."""
    request = {"operation": "UPDATE" if old else "CREATE", "namespace": obj["metadata"]["namespace"]}
    activation: dict[str, Any] = {
        "object": json_to_cel(obj),
        "oldObject": json_to_cel(old),
        "request": json_to_cel(request),
    }
    if not all(evaluate(c["expression"], activation) for c in policy["spec"]["matchConditions"]):
        return []
    variables = celtypes.MapType()
    for variable in policy["spec"]["variables"]:
        value = evaluate(variable["expression"], {**activation, "variables": variables})
        variables = celtypes.MapType({**variables, celtypes.StringType(variable["name"]): value})
    activation["variables"] = variables
    return [
        str(evaluate(v["messageExpression"], activation))
        for v in policy["spec"]["validations"]
        if not evaluate(v["expression"], activation)
    ]


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
