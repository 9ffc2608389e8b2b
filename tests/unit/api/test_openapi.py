"""Kubernetes' PodTemplateSpec as a structural schema: resolved, closed, and the generator's refusals."""

from __future__ import annotations

from typing import Any

import pytest

from aisched.api.openapi import UnsupportedSchemaError, overlay, structural_schema
from aisched.api.pod_template import KUBERNETES_POD_TEMPLATE, POD_TEMPLATE_SCHEMA

_REF = "#/components/schemas/"


def _openings(node: dict[str, Any], path: str = "") -> list[str]:
    """Where a stored object could hold fields the schema does not name."""
    found = [path] if node.get("x-kubernetes-preserve-unknown-fields") else []
    for name, child in node.get("properties", {}).items():
        found += _openings(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found += _openings(node[key], f"{path}[]")
    return found


def test_kubernetes_pod_template_has_no_unknown_field_openings() -> None:
    # Kubernetes' PodSpec keeps none open (a RawExtension would): neither may aisched's schema.
    assert _openings(KUBERNETES_POD_TEMPLATE) == []
    assert _openings(POD_TEMPLATE_SCHEMA) == []


def test_the_committed_schema_is_kubernetes_pod_spec_resolved() -> None:
    spec = KUBERNETES_POD_TEMPLATE["properties"]["spec"]
    assert spec["required"] == ["containers"]
    container = spec["properties"]["containers"]["items"]
    assert {"securityContext", "readinessProbe", "resizePolicy"} <= set(container["properties"])
    assert "$ref" not in str(KUBERNETES_POD_TEMPLATE) and "description" not in str(KUBERNETES_POD_TEMPLATE)
    # A port's protocol is a list-map key an item may leave out: its default is the one kept.
    protocol = container["properties"]["ports"]["items"]["properties"]["protocol"]
    assert protocol == {"type": "string", "default": "TCP"}
    assert set(KUBERNETES_POD_TEMPLATE["properties"]["metadata"]["properties"]) == {
        "annotations",
        "finalizers",
        "labels",
        "name",
        "namespace",
    }


def _document(**schemas: dict[str, Any]) -> dict[str, Any]:
    return {f"io.k8s.api.core.v1.{name}": schema for name, schema in schemas.items()}


def test_refs_resolve_and_documentation_goes() -> None:
    schemas = _document(
        Outer={
            "description": "outer",
            "type": "object",
            "properties": {
                "inner": {"allOf": [{"$ref": _REF + "io.k8s.api.core.v1.Inner"}], "default": {}},
                "size": {"$ref": _REF + "io.k8s.apimachinery.pkg.api.resource.Quantity"},
                "items": {"type": "array", "items": {"type": "string"}, "x-kubernetes-patch-strategy": "merge"},
            },
        },
        Inner={"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "format": "int32"}}},
    )
    assert structural_schema(schemas, "io.k8s.api.core.v1.Outer") == {
        "type": "object",
        "properties": {
            "inner": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "format": "int32"}}},
            "size": {"x-kubernetes-int-or-string": True},
            "items": {"type": "array", "items": {"type": "string"}},
        },
    }


def test_recursion_is_refused() -> None:
    schemas = _document(Node={"type": "object", "properties": {"next": {"$ref": _REF + "io.k8s.api.core.v1.Node"}}})
    with pytest.raises(UnsupportedSchemaError, match="recursive"):
        structural_schema(schemas, "io.k8s.api.core.v1.Node")


def test_an_unknown_keyword_stops_the_generation() -> None:
    schemas = _document(Odd={"type": "object", "properties": {"x": {"type": "string", "oneOf": []}}})
    with pytest.raises(UnsupportedSchemaError, match="oneOf"):
        structural_schema(schemas, "io.k8s.api.core.v1.Odd")


def test_a_map_key_neither_required_nor_defaulted_is_refused() -> None:
    item = {"type": "object", "properties": {"k": {"type": "string"}}}
    schemas = _document(
        Holder={
            "type": "object",
            "properties": {"l": {"type": "array", "items": item, "x-kubernetes-list-map-keys": ["k"]}},
        }
    )
    with pytest.raises(UnsupportedSchemaError, match="'k'"):
        structural_schema(schemas, "io.k8s.api.core.v1.Holder")


def test_a_bound_on_a_field_kubernetes_lacks_is_an_error() -> None:
    with pytest.raises(ValueError, match="padding"):
        overlay(KUBERNETES_POD_TEMPLATE, {"properties": {"spec": {"properties": {"padding": {"type": "object"}}}}})
