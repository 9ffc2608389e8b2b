"""Kubernetes' own OpenAPI schemas, resolved into the structural schemas a CRD can embed.

A CRD's schema cannot hold `$ref`s, and whatever it leaves open (`x-kubernetes-preserve-unknown-fields`)
the API server stores byte for byte: a tenant pads it. So the pod template of our CRDs is Kubernetes'
own PodTemplateSpec, taken from the OpenAPI v3 document of the pinned Kubernetes version
(`make generate` runs `aisched pod-template-schema`, which calls `structural_schema`) and committed as
`pod_template_spec.json`; aisched's bounds and rules are laid over it (`overlay`; pod_template.py).

The resolved schema keeps what the API server enforces or uses (types, required fields, formats,
list and map types, int-or-string) and drops the rest (descriptions, strategic-merge-patch hints,
defaults: a CRD would write Kubernetes' defaults into the stored object, which the pod's own
defaulting does anyway when the operator creates it). A keyword it does not know stops the
generation, so a Kubernetes bump that adds one is looked at, never dropped silently.
"""

from __future__ import annotations

from typing import Any, Final

REF_PREFIX: Final = "#/components/schemas/"
POD_TEMPLATE_SPEC: Final = "io.k8s.api.core.v1.PodTemplateSpec"
OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# What controller-gen's `generateEmbeddedObjectMeta` keeps of an embedded ObjectMeta (Kueue, JobSet):
# the rest (uid, managedFields, ownerReferences, ...) is the API server's to write on the pod, not a template's.
EMBEDDED_OBJECT_META_FIELDS: Final = ("annotations", "finalizers", "labels", "name", "namespace")
# Types Kubernetes serialises as a scalar although their Go type is a struct.
_SCALARS: Final[dict[str, dict[str, Any]]] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"x-kubernetes-int-or-string": True},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"x-kubernetes-int-or-string": True},
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": {"type": "string", "format": "date-time"},
}
# Copied as they are: the API server validates with them, or server-side apply merges by them.
_KEPT: Final = frozenset(
    {
        "type",
        "format",
        "enum",
        "required",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "pattern",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
    }
)
# Documentation and client hints: no say in what the API server admits or stores.
_DROPPED: Final = frozenset(
    {
        "description",
        "default",
        "x-kubernetes-patch-strategy",
        "x-kubernetes-patch-merge-key",
        "x-kubernetes-unions",
        "x-kubernetes-group-version-kind",
    }
)
# Formats the OpenAPI document names that a CRD's validation does not know (the API server warns on them).
_UNKNOWN_FORMATS: Final = frozenset({"int-or-string"})
# Where a scalar default waits until its list says whether it is a map key (the one default kept).
_DEFAULT: Final = "x-aisched-default"


class UnsupportedSchemaError(ValueError):
    """The OpenAPI document uses something a structural schema cannot say, or this module does not know."""


def structural_schema(schemas: dict[str, Any], name: str = POD_TEMPLATE_SPEC) -> dict[str, Any]:
    """The schema NAME of SCHEMAS (an OpenAPI v3 document's components.schemas), every `$ref` resolved."""
    resolved: dict[str, Any] = _strip_defaults(_resolve_named(schemas, name, ()))
    return resolved


def _resolve_named(schemas: dict[str, Any], name: str, stack: tuple[str, ...]) -> dict[str, Any]:
    if name in _SCALARS:
        return dict(_SCALARS[name])
    if name in stack:
        raise UnsupportedSchemaError(f"{name} is recursive ({' -> '.join((*stack, name))}): a CRD schema cannot be")
    if name not in schemas:
        raise UnsupportedSchemaError(f"{name} is not in the OpenAPI document")
    node = _resolve(schemas, schemas[name], (*stack, name))
    if name == OBJECT_META:
        node["properties"] = {k: v for k, v in node["properties"].items() if k in EMBEDDED_OBJECT_META_FIELDS}
    return node


def _resolve(schemas: dict[str, Any], node: dict[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
    refs = [part["$ref"] for part in node.get("allOf", [])] + ([node["$ref"]] if "$ref" in node else [])
    if len(refs) > 1 or any(set(part) != {"$ref"} for part in node.get("allOf", [])):
        raise UnsupportedSchemaError(f"{stack[-1]}: allOf other than one $ref")
    result: dict[str, Any] = {}
    for ref in refs:
        if not ref.startswith(REF_PREFIX):
            raise UnsupportedSchemaError(f"{stack[-1]}: $ref {ref} outside {REF_PREFIX}")
        result.update(_resolve_named(schemas, ref.removeprefix(REF_PREFIX), stack))
    for key, value in node.items():
        if key in _DROPPED or key in ("allOf", "$ref"):
            continue
        if key == "properties":
            result[key] = {field: _resolve(schemas, child, stack) for field, child in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            result[key] = _resolve(schemas, value, stack)
        elif key == "format" and value in _UNKNOWN_FORMATS:
            continue
        elif key in _KEPT:
            result[key] = value
        else:
            raise UnsupportedSchemaError(f"{stack[-1]}: keyword {key!r} is not known to aisched.api.openapi")
    if "default" in node and not isinstance(node["default"], dict | list):
        result[_DEFAULT] = node["default"]
    _default_map_keys(result)
    return result


def _default_map_keys(result: dict[str, Any]) -> None:
    """Keep the default of a list-map key that an item may leave out (a port's protocol, TCP).

    The API server refuses a CRD whose list-map keys an item could lack: each must be required or defaulted.
    """
    items = result.get("items", {})
    for key in result.get("x-kubernetes-list-map-keys", []):
        if key in items.get("required", []):
            continue
        field = items.get("properties", {}).get(key, {})
        if _DEFAULT not in field:
            raise UnsupportedSchemaError(f"list-map key {key!r} is neither required nor defaulted")
        field["default"] = field[_DEFAULT]


def _strip_defaults(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _strip_defaults(value) for key, value in node.items() if key != _DEFAULT}
    return node


def overlay(base: dict[str, Any], bounds: dict[str, Any], where: str = "template") -> dict[str, Any]:
    """BASE (Kubernetes' schema) with BOUNDS (aisched's) laid over it: aisched's keywords win, fields merge.

    A bound on a field Kubernetes does not define is an error: it would open the schema, not bound it.
    """
    merged = dict(base)
    for key, value in bounds.items():
        if key == "properties":
            known: dict[str, Any] = base.get("properties", {})
            unknown = sorted(set(value) - set(known))
            if unknown:
                raise ValueError(f"{where} bounds fields Kubernetes does not define: {unknown}")
            merged[key] = {
                name: overlay(known[name], value[name], f"{where}.{name}") if name in value else known[name]
                for name in known
            }
        elif key in ("items", "additionalProperties") and isinstance(base.get(key), dict):
            merged[key] = overlay(base[key], value, f"{where}[]")
        elif key == "required":
            merged[key] = sorted({*base.get(key, []), *value})
        else:
            merged[key] = value
    return merged
