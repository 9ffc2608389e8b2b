"""What the API server does to a custom object before storing it - structural
defaulting, OpenAPI validation, CEL rules - done here in-process so hypothesis
can compare thousands of generated specs against the pydantic models. The real
API server gets the same list of mistakes in tests/integration/test_crds.py."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

import celpy
import jsonschema
from celpy.adapter import json_to_cel

_CEL = celpy.Environment()
_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks("date-time", raises=ValueError)
def _is_rfc3339(value: object) -> bool:
    # The API server accepts RFC 3339 date-times only, with a time zone.
    return not isinstance(value, str) or datetime.fromisoformat(value).tzinfo is not None


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    if not isinstance(value, dict) or "properties" not in schema:
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            return [apply_defaults(schema["items"], item) for item in value]
        return value
    result = dict(value)
    for name, prop in schema["properties"].items():
        if name not in result and "default" in prop:
            result[name] = copy.deepcopy(prop["default"])
        if name in result:
            result[name] = apply_defaults(prop, result[name])
    return result


def cel_violations(schema: dict[str, Any], value: Any) -> list[str]:
    messages = []
    for rule in schema.get("x-kubernetes-validations", []):
        program = _CEL.program(_CEL.compile(rule["rule"]))
        if not bool(program.evaluate({"self": json_to_cel(value)})):
            messages.append(rule["message"])
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in value and not prop.get("x-kubernetes-preserve-unknown-fields"):
                messages += cel_violations(prop, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            messages += cel_violations(schema["items"], item)
    return messages


def _schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    # Structural schemas prune unknown fields; kubectl's strict validation
    # rejects them instead. Model that with additionalProperties: false.
    def strict(node: Any) -> Any:
        if isinstance(node, dict):
            node = {k: strict(v) for k, v in node.items()}
            if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            if node.get("x-kubernetes-int-or-string"):
                node["type"] = ["integer", "string"]
        elif isinstance(node, list):
            node = [strict(v) for v in node]
        return node

    validator = jsonschema.Draft4Validator(strict(schema), format_checker=_FORMATS)
    return [error.message for error in validator.iter_errors(value)]


def server_rejections(crd: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    """Why the API server would refuse `obj` (empty when it would accept it)."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    defaulted = apply_defaults(schema, obj)
    errors = _schema_errors(schema, defaulted)
    if errors:
        return errors  # like the API server: CEL runs only on schema-valid objects
    return cel_violations(schema, defaulted)
