"""What the API server does to a custom object before storing it - structural
defaulting, OpenAPI validation, CEL rules, transition rules (`oldSelf`) on an
update - done here in-process so hypothesis can compare thousands of generated
specs against the pydantic models. The real API server gets the same list of
mistakes in tests/integration/test_crds.py.

Like the API server, which compiles a CRD's rules once when the CRD is stored,
each rule is compiled once per process and each schema's validator built once:
an example costs its evaluation only."""

from __future__ import annotations

import copy
import functools
from datetime import datetime
from typing import Any, Final

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


class _Absent:
    """No old value: a create, or a field the stored object did not have."""


ABSENT: Final = _Absent()


@functools.cache
def compiled(rule: str) -> celpy.Runner:
    """RULE's program, compiled once per process, as the API server compiles it once per CRD."""
    return _CEL.program(_CEL.compile(rule))


def is_transition_rule(rule: str) -> bool:
    """It reads `oldSelf`: evaluated on an update only, where the old value exists."""
    return "oldSelf" in rule


def cel_violations(schema: dict[str, Any], value: Any, old: Any = ABSENT) -> list[str]:
    """The messages of the rules VALUE breaks; OLD is the stored value at the same place on an update.

    Old values are followed through object properties (the API server also correlates items of
    map-keyed lists; no rule of ours reads oldSelf inside a list)."""
    messages = []
    rules = schema.get("x-kubernetes-validations", [])
    if rules:
        activation = {"self": json_to_cel(value)}
        if old is not ABSENT:
            activation["oldSelf"] = json_to_cel(old)
        for rule in rules:
            if is_transition_rule(rule["rule"]) and old is ABSENT:
                continue
            if not bool(compiled(rule["rule"]).evaluate(activation)):
                messages.append(rule["message"])
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in value and not prop.get("x-kubernetes-preserve-unknown-fields"):
                old_field = old[name] if isinstance(old, dict) and name in old else ABSENT
                messages += cel_violations(prop, value[name], old_field)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            messages += cel_violations(schema["items"], item)
    return messages


# Each schema's validator, by the schema's identity (the schema is kept, so the identity stays its own).
_VALIDATORS: dict[int, tuple[dict[str, Any], jsonschema.Draft4Validator]] = {}


def _schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    held = _VALIDATORS.get(id(schema))
    if held is None or held[0] is not schema:
        if len(_VALIDATORS) >= 64:  # callers that build their CRDs anew each time: keep it bounded
            _VALIDATORS.clear()
        held = _VALIDATORS[id(schema)] = (schema, _strict_validator(schema))
    return [error.message for error in held[1].iter_errors(value)]


def _strict_validator(schema: dict[str, Any]) -> jsonschema.Draft4Validator:
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

    return jsonschema.Draft4Validator(strict(schema), format_checker=_FORMATS)


def server_rejections(crd: dict[str, Any], obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """Why the API server would refuse to store `obj` (empty when it would accept it): a create, or,
    given the stored object OLD, an update of it."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    defaulted = apply_defaults(schema, obj)
    errors = _schema_errors(schema, defaulted)
    if errors:
        return errors  # like the API server: CEL runs only on schema-valid objects
    return cel_violations(schema, defaulted, ABSENT if old is None else apply_defaults(schema, old))
