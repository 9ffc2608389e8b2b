"""The pod template of a TrainingJob or an InferenceService: its schema, its bounds, its rules.

The template's schema is Kubernetes' own PodTemplateSpec (pod_template_spec.json, generated from
the pinned Kubernetes version's OpenAPI by `make generate`; aisched.api.openapi), closed as a Pod is:
the API server prunes any field Kubernetes does not define, so a tenant cannot pad an object with
fields the operator and the API server would parse for nothing (issue #27: 193,000 `{}` in an open
field were 20 MiB in the operator and 280 MiB in the API server, for one object). aisched lays its
own bounds over it: the names the API server will check at every pod creation, every list and
string the operator reads or merges into the workers, and a bound on every other list and map, so
that an object is at most a few MiB in memory (the operator parses every one it watches) and the
CEL rules over it stay inside the API server's cost budget. A template the operator could not
build pods from is then refused at apply, with the field named, rather than failing at every launch.

The bounds, each far beyond what real pods carry (Kubernetes itself sets none of the list
lengths below; its own limits are named where there is one):

- containers and initContainers, 16 each: a training or serving pod has its main container
  and a few sidecars; mesh sidecars are injected at pod creation, not written in a template.
- env 256 a container (torchrun, NCCL and framework settings are tens), names the API server
  accepts (`[-._a-zA-Z][-._a-zA-Z0-9]*`, 256 characters), values 32 KiB (a TF_CONFIG or a
  PEM certificate is a few KiB; larger configuration belongs in a ConfigMap volume).
- command 256 and args 1024 items a container, each 32 KiB (an inline `bash -c` script).
- volumes 128 (DNS-1123 label names), volumeMounts 128 a container (paths of PATH_MAX, 4096).
- ports 64 a container (names of at most 15 characters, IANA service names as Kubernetes asks).
- tolerations 64, nodeSelector 32 entries, imagePullSecrets 16.
- labels 64 (label values), annotations 64 of 4 KiB: 256 KiB, the API server's limit on a
  pod's annotations in total.
- any other list MAX_LIST_ITEMS (64) items when they are objects, MAX_SCALAR_LIST_ITEMS (256)
  when they are strings or numbers (a node affinity's hostnames, supplemental groups); any other
  map MAX_MAP_ENTRIES (64) entries (a CSI volume's attributes), any other string 32 KiB (a probe's
  or a hook's inline script, as args), any other quantity or int-or-string 64 characters.

Their product exceeds what etcd stores (1.5 MiB an object), which remains the bound on an
object's bytes; what the bounds limit is the number of items, and with it the memory an
object takes once parsed (benchmarks/tenant_objects.py measures the largest admissible).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib.resources import files
from typing import Annotated, Any, Final

from pydantic import AfterValidator, Field

from aisched.api.common import (
    GPU,
    LABEL_VALUE_MESSAGE,
    LABEL_VALUE_PATTERN,
    MAX_LABEL_VALUE_LENGTH,
    TAINT_EFFECTS,
    TOLERATION_OPERATORS,
    cel,
)
from aisched.api.openapi import overlay

MAX_CONTAINERS: Final = 16
MAX_ENV: Final = 256
MAX_ENV_VALUE_LENGTH: Final = 32 * 1024
MAX_ENV_NAME_LENGTH: Final = 256
MAX_COMMAND: Final = 256
MAX_ARGS: Final = 1024
MAX_ARG_LENGTH: Final = 32 * 1024
MAX_VOLUMES: Final = 128
MAX_VOLUME_MOUNTS: Final = 128
MAX_PATH_LENGTH: Final = 4096
MAX_PORTS: Final = 64
# Linux has 41 capabilities; a list of more is no real container's, and each one added is kept for
# the pod policy (controller/templates.py), so the bound is what a tenant can make the operator hold.
MAX_CAPABILITIES: Final = 64
MAX_CAPABILITY_LENGTH: Final = 64
MAX_TOLERATIONS: Final = 64
MAX_NODE_SELECTOR: Final = 32
MAX_PULL_SECRETS: Final = 16
MAX_LABELS: Final = 64
MAX_ANNOTATIONS: Final = 64
MAX_ANNOTATION_LENGTH: Final = 4096
MAX_RESOURCES: Final = 32
MAX_IMAGE_LENGTH: Final = 1024
MAX_LIST_ITEMS: Final = 64
MAX_SCALAR_LIST_ITEMS: Final = 256
MAX_MAP_ENTRIES: Final = 64
MAX_STRING_LENGTH: Final = 32 * 1024
MAX_INT_OR_STRING_LENGTH: Final = 64
# A label or taint key: a DNS subdomain prefix (253), '/', a name (63).
MAX_QUALIFIED_KEY_LENGTH: Final = 316
# An object name (a Secret, a ConfigMap): a DNS subdomain.
MAX_OBJECT_NAME_LENGTH: Final = 253

DNS_LABEL_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_MESSAGE: Final = (
    "must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
)
ENV_NAME_PATTERN: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
ENV_NAME_MESSAGE: Final = (
    f"must be an environment variable name: at most {MAX_ENV_NAME_LENGTH} letters, digits, '_', '-' and '.', "
    "not starting with a digit"
)
# An IANA service name, as a container port's name must be: a letter somewhere, no "--".
PORT_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$"
PORT_NAME_MESSAGE: Final = (
    "must be a port name: at most 15 lowercase letters, digits and '-', starting and ending with a letter or digit"
)
_MESSAGES: Final = {
    DNS_LABEL_PATTERN: DNS_LABEL_MESSAGE,
    ENV_NAME_PATTERN: ENV_NAME_MESSAGE,
    LABEL_VALUE_PATTERN: LABEL_VALUE_MESSAGE,
    PORT_NAME_PATTERN: PORT_NAME_MESSAGE,
}

_OBJECT: dict[str, Any] = {"type": "object"}
# Kubernetes' PodTemplateSpec, resolved and without descriptions: generated, never edited (make generate).
KUBERNETES_POD_TEMPLATE: Final[dict[str, Any]] = json.loads(
    files("aisched.api").joinpath("pod_template_spec.json").read_text(encoding="utf-8")
)


def _text(max_length: int, *, pattern: str | None = None, min_length: int = 0) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string", "maxLength": max_length}
    if min_length:
        node["minLength"] = min_length
    if pattern:
        node["pattern"] = pattern
    return node


def _list(items: dict[str, Any], max_items: int) -> dict[str, Any]:
    return {"type": "array", "maxItems": max_items, "items": items}


def _closed(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """An object of these fields only: the API server prunes any other (kubectl --validate refuses it)."""
    node: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        node["required"] = list(required)
    return node


_DNS_LABEL = _text(63, pattern=DNS_LABEL_PATTERN, min_length=1)
_OBJECT_NAME = _text(MAX_OBJECT_NAME_LENGTH)
_LABEL_VALUE = _text(MAX_LABEL_VALUE_LENGTH, pattern=LABEL_VALUE_PATTERN)
_LABEL_MAP: dict[str, Any] = {"type": "object", "maxProperties": MAX_LABELS, "additionalProperties": _LABEL_VALUE}
_ANNOTATIONS: dict[str, Any] = {
    "type": "object",
    "maxProperties": MAX_ANNOTATIONS,
    "additionalProperties": _text(MAX_ANNOTATION_LENGTH),
}
# A resource quantity: 8, "8", "500m", "1Gi"; the API server checks the syntax when it creates the pod.
_QUANTITY = {"x-kubernetes-int-or-string": True, "maxLength": MAX_INT_OR_STRING_LENGTH}
_QUANTITY_MAP: dict[str, Any] = {"type": "object", "maxProperties": MAX_RESOURCES, "additionalProperties": _QUANTITY}
_KEY_REF = _closed({"name": _OBJECT_NAME, "key": _OBJECT_NAME, "optional": {"type": "boolean"}})
_ENV_VAR = _closed(
    {
        "name": _text(MAX_ENV_NAME_LENGTH, pattern=ENV_NAME_PATTERN, min_length=1),
        "value": _text(MAX_ENV_VALUE_LENGTH),
        "valueFrom": _closed(
            {
                "configMapKeyRef": _KEY_REF,
                "secretKeyRef": _KEY_REF,
                "fieldRef": _closed({"apiVersion": _text(64), "fieldPath": _text(MAX_PATH_LENGTH)}),
                "resourceFieldRef": _closed(
                    {"containerName": _text(63), "resource": _text(MAX_QUALIFIED_KEY_LENGTH), "divisor": _QUANTITY}
                ),
            }
        ),
    },
    "name",
)
_SOURCE_REF = _closed({"name": _OBJECT_NAME, "optional": {"type": "boolean"}})
_ENV_FROM = _closed({"prefix": _text(MAX_ENV_NAME_LENGTH), "configMapRef": _SOURCE_REF, "secretRef": _SOURCE_REF})
_PORT = _closed(
    {
        "name": _text(15, pattern=PORT_NAME_PATTERN),
        "containerPort": {"type": "integer", "minimum": 1, "maximum": 65535},
        "hostPort": {"type": "integer", "minimum": 0, "maximum": 65535},
        "hostIP": _text(64),
        "protocol": {"type": "string", "enum": ["TCP", "UDP", "SCTP"]},
    },
    "containerPort",
)
_VOLUME_MOUNT = _closed(
    {
        "name": _DNS_LABEL,
        "mountPath": _text(MAX_PATH_LENGTH, min_length=1),
        "subPath": _text(MAX_PATH_LENGTH),
        "subPathExpr": _text(MAX_PATH_LENGTH),
        "readOnly": {"type": "boolean"},
        "recursiveReadOnly": _text(32),
        "mountPropagation": _text(32),
    },
    "name",
    "mountPath",
)
_CAPABILITIES = _list(_text(MAX_CAPABILITY_LENGTH), MAX_CAPABILITIES)
_CONTAINER: dict[str, Any] = {
    **_OBJECT,
    "required": ["name", "image"],
    "properties": {
        "name": _DNS_LABEL,
        "image": _text(MAX_IMAGE_LENGTH, min_length=1),
        "command": _list(_text(MAX_ARG_LENGTH), MAX_COMMAND),
        "args": _list(_text(MAX_ARG_LENGTH), MAX_ARGS),
        "workingDir": _text(MAX_PATH_LENGTH),
        "env": _list(_ENV_VAR, MAX_ENV),
        "envFrom": _list(_ENV_FROM, MAX_ENV),
        "ports": _list(_PORT, MAX_PORTS),
        "volumeMounts": _list(_VOLUME_MOUNT, MAX_VOLUME_MOUNTS),
        "resources": {**_OBJECT, "properties": {"limits": _QUANTITY_MAP, "requests": _QUANTITY_MAP}},
        "securityContext": {
            **_OBJECT,
            "properties": {"capabilities": {**_OBJECT, "properties": {"add": _CAPABILITIES, "drop": _CAPABILITIES}}},
        },
    },
}
_TOLERATION = _closed(
    {
        "key": _text(MAX_QUALIFIED_KEY_LENGTH),
        "operator": {"type": "string", "enum": list(TOLERATION_OPERATORS)},
        "value": _text(MAX_LABEL_VALUE_LENGTH),
        "effect": {"type": "string", "enum": list(TAINT_EFFECTS)},
        "tolerationSeconds": {"type": "integer"},
    }
)
_BOUNDS: dict[str, Any] = {
    **_OBJECT,
    "required": ["spec"],
    "properties": {
        "metadata": {**_OBJECT, "properties": {"labels": _LABEL_MAP, "annotations": _ANNOTATIONS}},
        "spec": {
            **_OBJECT,
            "required": ["containers"],
            "properties": {
                "containers": {**_list(_CONTAINER, MAX_CONTAINERS), "minItems": 1},
                "initContainers": _list(_CONTAINER, MAX_CONTAINERS),
                # The API server refuses them in a pod it creates: they are added to a running pod only.
                "ephemeralContainers": {"maxItems": 0},
                "volumes": _list({**_OBJECT, "required": ["name"], "properties": {"name": _DNS_LABEL}}, MAX_VOLUMES),
                "tolerations": _list(_TOLERATION, MAX_TOLERATIONS),
                "nodeSelector": {**_LABEL_MAP, "maxProperties": MAX_NODE_SELECTOR},
                "imagePullSecrets": _list(_closed({"name": _OBJECT_NAME}), MAX_PULL_SECRETS),
                # Typed so that CEL rules can see them: a job's template may set neither
                # (TrainingJobSpec's rules), the operator places and gates its pods itself.
                "nodeName": _text(MAX_OBJECT_NAME_LENGTH),
                "schedulingGates": _list(_OBJECT, 16),
                "schedulingGroup": _OBJECT,
                # Typed for the rules of api/pod_priority.py: the operator sets its pods' priority.
                "priorityClassName": _text(MAX_OBJECT_NAME_LENGTH),
                "priority": {"type": "integer"},
                "preemptionPolicy": _text(64),
            },
        },
    },
}


def bound_everything(schema: dict[str, Any]) -> dict[str, Any]:
    """SCHEMA with a bound on every list, map and string that has none (MAX_LIST_ITEMS and its siblings)."""
    node = dict(schema)
    if node.get("type") == "string" and not {"enum", "format"} & set(node):
        node.setdefault("maxLength", MAX_STRING_LENGTH)
    if node.get("x-kubernetes-int-or-string"):
        node.setdefault("maxLength", MAX_INT_OR_STRING_LENGTH)
    if node.get("type") == "array":
        items = node["items"] = bound_everything(node["items"])
        scalar = items.get("type") not in ("object", "array")
        node.setdefault("maxItems", MAX_SCALAR_LIST_ITEMS if scalar else MAX_LIST_ITEMS)
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = bound_everything(node["additionalProperties"])
        node.setdefault("maxProperties", MAX_MAP_ENTRIES)
    if "properties" in node:
        node["properties"] = {name: bound_everything(child) for name, child in node["properties"].items()}
    return node


POD_TEMPLATE_SCHEMA: Final[dict[str, Any]] = bound_everything(overlay(KUBERNETES_POD_TEMPLATE, _BOUNDS))


def schema_violation(schema: dict[str, Any], value: Any, where: str) -> str | None:
    """Why VALUE breaks SCHEMA (the typed parts of POD_TEMPLATE_SCHEMA), as the model says it; None if it does not.

    The same walk the API server makes over the typed parts, so that the model refuses what the
    CRD refuses, each bound with the field named: the schema above is the one source of them.
    """
    if schema.get("x-kubernetes-int-or-string"):
        return _quantity_violation(schema, value, where)
    check = _CHECKS.get(schema.get("type", ""))
    return check(schema, value, where) if check else None


def _quantity_violation(schema: dict[str, Any], value: Any, where: str) -> str | None:
    limit = schema.get("maxLength")
    if isinstance(value, bool) or not isinstance(value, int | str) or len(str(value)) > (limit or len(str(value))):
        return f"{where} must be an integer or a string" + (f" of at most {limit} characters" if limit else "")
    return None


def _array_violation(schema: dict[str, Any], value: Any, where: str) -> str | None:
    if not isinstance(value, list):
        return f"{where} must be a list"
    if len(value) < schema.get("minItems", 0):
        return f"{where} needs at least {schema['minItems']} item(s)"
    if len(value) > schema["maxItems"]:
        return f"{where} may hold at most {schema['maxItems']} items"
    return next(
        (v for i, item in enumerate(value) if (v := schema_violation(schema["items"], item, f"{where}[{i}]"))),
        None,
    )


def _integer_violation(schema: dict[str, Any], value: Any, where: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{where} must be an integer"
    if not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        return f"{where} must be from {schema['minimum']} to {schema['maximum']}"
    return None


def _boolean_violation(schema: dict[str, Any], value: Any, where: str) -> str | None:
    return None if isinstance(value, bool) else f"{where} must be true or false"


def _object_violation(schema: dict[str, Any], value: Any, where: str) -> str | None:
    if not isinstance(value, dict):
        return f"{where} must be an object"
    if len(value) > schema.get("maxProperties", len(value)):
        return f"{where} may hold at most {schema['maxProperties']} entries"
    missing = [name for name in schema.get("required", []) if name not in value]
    if missing:
        return f"{where} needs {' and '.join(missing)}"
    properties: dict[str, Any] = schema.get("properties", {})
    if properties and not schema.get("x-kubernetes-preserve-unknown-fields"):
        # The API server prunes (or, validating strictly, refuses) any other field: never stored.
        unknown = sorted(set(value) - set(properties))
        if unknown:
            return f"{where} has unknown fields {unknown}"
    for name, item in value.items():
        if name in properties:
            violation = schema_violation(properties[name], item, f"{where}.{name}")
        elif isinstance(entries := schema.get("additionalProperties"), dict):
            violation = schema_violation(entries, item, f"{where}[{name}]")
        else:
            continue
        if violation:
            return violation
    return None


def _string_violation(schema: dict[str, Any], value: Any, where: str) -> str | None:
    if not isinstance(value, str):
        return f"{where} must be a string"
    if "enum" in schema and value not in schema["enum"]:
        *others, last = [v for v in schema["enum"] if v]
        return f"{where} must be {', '.join(others)} or {last}" if others else f"{where} must be {last}"
    if len(value) < schema.get("minLength", 0):
        return f"{where} must not be empty"
    pattern = schema.get("pattern")
    if pattern is not None and (len(value) > schema["maxLength"] or not re.fullmatch(pattern, value)):
        return f"{where} {_MESSAGES[pattern]}"
    if len(value) > schema.get("maxLength", len(value)):
        return f"{where} may be at most {schema['maxLength']} characters"
    return None


_CHECKS: Final[dict[str, Callable[[dict[str, Any], Any, str], str | None]]] = {
    "object": _object_violation,
    "array": _array_violation,
    "string": _string_violation,
    "integer": _integer_violation,
    "boolean": _boolean_violation,
}


def _check_pod_template(template: dict[str, Any]) -> dict[str, Any]:
    """The rules of POD_TEMPLATE_SCHEMA, so the model and the CRD agree; the first broken one says why."""
    spec = template.get("spec")
    if not isinstance(spec, dict):
        raise ValueError("template.spec must be an object")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ValueError("template.spec.containers needs at least one container")
    for kind in ("containers", "initContainers"):
        listed = spec.get(kind)
        for index, container in enumerate(listed if isinstance(listed, list) else []):
            if (
                not isinstance(container, dict)
                or not _is_text(container.get("name"))
                or not _is_text(container.get("image"))
            ):
                raise ValueError(f"template.spec.{kind}[{index}] needs a name and an image")
    violation = schema_violation(POD_TEMPLATE_SCHEMA, template, "template")
    if violation:
        raise ValueError(violation)
    return template


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


_GPU_IN = "has(c.resources) && has(c.resources.{kind}) && '" + GPU + "' in c.resources.{kind}"
NODE_NAME_MESSAGE: Final = "template.spec.nodeName is not allowed: the operator chooses every pod's node"
SCHEDULING_GATES_MESSAGE: Final = "template.spec.schedulingGates is not allowed: the operator gates its pods itself"
SCHEDULING_GROUP_MESSAGE: Final = (
    "template.spec.schedulingGroup is not allowed: the operator decides which pods kube-scheduler places as one gang"
)
GPU_AMOUNT_MESSAGE: Final = f"a container of the template may ask for {GPU} only exactly gpusPerReplica"
GPU_CONTAINERS_MESSAGE: Final = f"only one container of the template may ask for {GPU}"
INIT_GPU_MESSAGE: Final = (
    f"init containers of the template may not ask for {GPU}: the queue accounts the GPUs of the containers only"
)
# A tenant gets the GPUs its spec declares, on the node the scheduler chose: a template could
# otherwise ask more GPUs than the queue accounts, pin a node, or hold its pods with gates of its own.
# An init container (a restartable sidecar too) holds what it asks while the pod runs, whatever
# gpusPerReplica says: it may ask for none. The rules of every spec with a `template` and a
# `gpusPerReplica` (TrainingJob, InferenceService).
TEMPLATE_RULES: Final = [
    cel("!has(self.template.spec.nodeName)", NODE_NAME_MESSAGE),
    cel("!has(self.template.spec.schedulingGates)", SCHEDULING_GATES_MESSAGE),
    # Kubernetes 1.37's Workload API: a pod naming a PodGroup of the tenant's would be bound by
    # kube-scheduler with pods the queue never admitted, or hold back the operator's own gang.
    cel("!has(self.template.spec.schedulingGroup)", SCHEDULING_GROUP_MESSAGE),
    *(
        cel(
            f"self.template.spec.containers.all(c, !({_GPU_IN.format(kind=kind)}) || "
            f"string(c.resources.{kind}['{GPU}']) == string(self.gpusPerReplica))",
            GPU_AMOUNT_MESSAGE,
        )
        for kind in ("limits", "requests")
    ),
    cel(
        f"self.template.spec.containers.filter(c, {_GPU_IN.format(kind='limits')}).size() <= 1",
        GPU_CONTAINERS_MESSAGE,
    ),
    cel(
        "!has(self.template.spec.initContainers) || self.template.spec.initContainers.all(c, "
        f"!({_GPU_IN.format(kind='limits')}) && !({_GPU_IN.format(kind='requests')}))",
        INIT_GPU_MESSAGE,
    ),
]


def check_template_rules(template: dict[str, Any], gpus_per_replica: int) -> None:
    """The same rules as TEMPLATE_RULES, with their messages, for the models."""
    spec = template.get("spec", {})
    if "nodeName" in spec:
        raise ValueError(NODE_NAME_MESSAGE)
    if "schedulingGates" in spec:
        raise ValueError(SCHEDULING_GATES_MESSAGE)
    if "schedulingGroup" in spec:
        raise ValueError(SCHEDULING_GROUP_MESSAGE)
    asking = 0
    for container in spec.get("containers", []):
        amounts = _gpu_amounts(container)
        if any(amount is not None and str(amount) != str(gpus_per_replica) for amount in amounts):
            raise ValueError(GPU_AMOUNT_MESSAGE)
        asking += amounts[0] is not None
    if asking > 1:
        raise ValueError(GPU_CONTAINERS_MESSAGE)
    if any(amount is not None for c in spec.get("initContainers", []) for amount in _gpu_amounts(c)):
        raise ValueError(INIT_GPU_MESSAGE)


def _gpu_amounts(container: dict[str, Any]) -> list[Any]:
    resources = container.get("resources", {})
    return [resources.get(kind, {}).get(GPU) for kind in ("limits", "requests")]


PodTemplate = Annotated[
    dict[str, Any],
    AfterValidator(_check_pod_template),
    Field(
        description="Pod template (metadata and spec) for each replica, as in a Deployment.",
        json_schema_extra=POD_TEMPLATE_SCHEMA,
    ),
]
