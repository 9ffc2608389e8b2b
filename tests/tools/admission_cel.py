"""A ValidatingAdmissionPolicy's CEL evaluated as the API server evaluates it, for the tools tier.

Its match conditions first (none false: the policy has a say), then its variables in order, each
seeing the ones before, then every validation; what it answers is the message of each that fails.
The API server also type-checks the expressions; the integration tier runs the policies there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel

_CEL = celpy.Environment()
PLURALS = {"Pod": "pods", "Service": "services", "ResourceClaimTemplate": "resourceclaimtemplates"}


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    return _CEL.program(_CEL.compile(expression)).evaluate(activation)


def refusals(
    policy: dict[str, Any],
    obj: dict[str, Any],
    old: dict[str, Any] | None = None,
    *,
    user: str = "alice",
    groups: Sequence[str] = ("system:authenticated",),
) -> list[str]:
    """The messages POLICY answers USER's request to write OBJ (over OLD, an update) with; empty: admitted."""
    request = {
        "operation": "UPDATE" if old else "CREATE",
        "namespace": obj["metadata"].get("namespace", ""),
        "userInfo": {"username": user, "groups": list(groups)},
        "resource": {"resource": PLURALS.get(obj["kind"], obj["kind"].lower() + "s")},
    }
    activation: dict[str, Any] = {
        "object": json_to_cel(obj),
        "oldObject": json_to_cel(old),
        "request": json_to_cel(request),
    }
    for condition in policy["spec"]["matchConditions"]:
        matched = evaluate(condition["expression"], activation)
        if not isinstance(matched, celtypes.BoolType):  # the API server applies failurePolicy: Fail
            raise AssertionError(f"{condition['expression']!r} evaluated to {matched!r}, not a bool")
        if not matched:
            return []
    variables = celtypes.MapType()
    for variable in policy["spec"].get("variables", []):
        value = evaluate(variable["expression"], {**activation, "variables": variables})
        variables = celtypes.MapType({**variables, celtypes.StringType(variable["name"]): value})
    activation["variables"] = variables
    messages = []
    for validation in policy["spec"]["validations"]:
        passed = evaluate(validation["expression"], activation)
        if not isinstance(passed, celtypes.BoolType):
            raise AssertionError(f"{validation['expression']!r} evaluated to {passed!r}, not a bool")
        if not passed:
            assert validation["reason"] == "Forbidden"
            if "messageExpression" in validation:
                messages.append(str(evaluate(validation["messageExpression"], activation)))
            else:
                messages.append(" ".join(validation["message"].split()))
    return messages
