"""Building blocks shared by every aisched custom resource."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP: Final = "aisched.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "aisched.io/v1alpha1"
# The longest duration a spec may give (a leap year): longer is a typo, and any time the API
# server admits plus or minus it stays within the years a `datetime` can hold but for the edges.
MAX_DURATION_SECONDS: Final = 366 * 86400

# A pod template is validated in full by the API server when the operator
# creates pods from it; the CRD keeps it open (the one place unknown fields
# belong) but insists on the containers, so an empty template fails at apply.
# The parts the operator reads or merges into the workers (tolerations, node
# selector, labels, annotations, each container's env and resources) are typed,
# so a template the operator could not build pods from is refused at apply,
# with the field named, rather than failing at every launch.
_OPEN_OBJECT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
# A label value (a pod's labels, a node selector's values): the API server refuses any other at
# pod creation, where it would fail every launch; here it fails at apply, with the field named.
MAX_LABEL_VALUE_LENGTH = 63
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MESSAGE = (
    f"must be a label value: at most {MAX_LABEL_VALUE_LENGTH} characters of letters, digits, '-', '_' and '.', "
    "starting and ending with a letter or digit"
)
_LABEL_VALUE: dict[str, Any] = {"type": "string", "maxLength": MAX_LABEL_VALUE_LENGTH, "pattern": LABEL_VALUE_PATTERN}
_LABEL_MAP: dict[str, Any] = {"type": "object", "additionalProperties": _LABEL_VALUE}
# A resource quantity: 8, "8", "500m", "1Gi"; the API server checks the syntax when it creates the pod.
# Bounded (sizes, lengths) so that the CEL rules over containers and their GPUs fit the API
# server's cost budget; far beyond any pod a person writes.
MAX_CONTAINERS = 32
MAX_RESOURCES = 32
_QUANTITY_MAP: dict[str, Any] = {
    "type": "object",
    "maxProperties": MAX_RESOURCES,
    "additionalProperties": {"x-kubernetes-int-or-string": True, "maxLength": 64},
}
# "" as a pod takes it: the operator Equal, every effect.
TOLERATION_OPERATORS = ("Equal", "Exists", "")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute", "")
_TOLERATION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string"},
        "operator": {"type": "string", "enum": list(TOLERATION_OPERATORS)},
        "value": {"type": "string"},
        "effect": {"type": "string", "enum": list(TAINT_EFFECTS)},
        "tolerationSeconds": {"type": "integer"},
    },
}
_CONTAINER: dict[str, Any] = {
    **_OPEN_OBJECT,
    "required": ["name", "image"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "image": {"type": "string", "minLength": 1},
        "env": {
            "type": "array",
            "items": {**_OPEN_OBJECT, "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}},
        },
        "resources": {**_OPEN_OBJECT, "properties": {"limits": _QUANTITY_MAP, "requests": _QUANTITY_MAP}},
    },
}
POD_TEMPLATE_SCHEMA: dict[str, Any] = {
    **_OPEN_OBJECT,
    "required": ["spec"],
    "properties": {
        "metadata": {**_OPEN_OBJECT, "properties": {"labels": _LABEL_MAP, "annotations": _STRING_MAP}},
        "spec": {
            **_OPEN_OBJECT,
            "required": ["containers"],
            "properties": {
                "containers": {"type": "array", "minItems": 1, "maxItems": MAX_CONTAINERS, "items": _CONTAINER},
                "tolerations": {"type": "array", "items": _TOLERATION},
                "nodeSelector": _LABEL_MAP,
                # Typed so that CEL rules can see them: a job's template may set neither
                # (TrainingJobSpec's rules), the operator places and gates its pods itself.
                "nodeName": {"type": "string"},
                "schedulingGates": {"type": "array", "items": _OPEN_OBJECT},
                # Typed for the rules of api/pod_priority.py: the operator sets its pods' priority.
                "priorityClassName": {"type": "string"},
                "priority": {"type": "integer"},
                "preemptionPolicy": {"type": "string"},
            },
        },
    },
}


# Objects named after a TrainingJob or an InferenceService (Services, pods, worker host names)
# need a DNS-1035 label: a letter first, then lowercase letters, digits and '-'; 48 characters
# leave room for the suffixes ("-worker-NNNN").
MAX_NAME_LENGTH = 48
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


def name_rule(kind: str, why: str) -> tuple[dict[str, Any], str]:
    """The CEL rule on a KIND's metadata.name, and its message (WHY: what is named after it)."""
    message = (
        f"{kind} names are at most {MAX_NAME_LENGTH} characters of lowercase letters, digits and '-', "
        f"starting with a letter and ending with a letter or digit: {why}"
    )
    rule = f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && self.metadata.name.matches('{NAME_PATTERN}')"
    return cel(rule, message), message


def check_name(name: Any, message: str) -> None:
    """The model's side of `name_rule`; an object with no name yet (generateName) is checked by the API server."""
    if name is not None and (len(str(name)) > MAX_NAME_LENGTH or not re.fullmatch(NAME_PATTERN, str(name))):
        raise ValueError(message)


def cel(rule: str, message: str) -> dict[str, Any]:
    """One CEL validation rule, evaluated by the API server on every write."""
    return {"rule": rule, "message": message}


def validated_by(*rules: dict[str, Any]) -> ConfigDict:
    """Model config that attaches CEL rules to the model's generated schema.

    The model repeats each rule as a pydantic validator with the same message,
    and tests check the two agree on generated specs (tests/unit/test_api.py).
    """
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": list(rules)})


def wire_name(python_name: str) -> str:
    """snake_case -> camelCase, keeping the acronyms Kubernetes APIs spell in capitals."""
    return to_camel(python_name).replace("Gpus", "GPUs").replace("Kwh", "KWh")


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are errors.

    The API server prunes unknown fields before the operator sees an object,
    so `forbid` only bites in tests and examples, where a typo should fail loudly.
    """

    model_config = ConfigDict(
        alias_generator=wire_name,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
        validate_assignment=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON-compatible dict the API server expects (camelCase, no nulls)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def _check_pod_template(template: dict[str, Any]) -> dict[str, Any]:
    """The rules of POD_TEMPLATE_SCHEMA, with its messages, so the model and the CRD agree."""
    spec = template.get("spec")
    if not isinstance(spec, dict):
        raise ValueError("template.spec must be an object")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ValueError("template.spec.containers needs at least one container")
    if len(containers) > MAX_CONTAINERS:
        raise ValueError(f"template.spec.containers may hold at most {MAX_CONTAINERS} containers")
    for index, container in enumerate(containers):
        where = f"template.spec.containers[{index}]"
        if (
            not isinstance(container, dict)
            or not _is_text(container.get("name"))
            or not _is_text(container.get("image"))
        ):
            raise ValueError(f"{where} needs a name and an image")
        _check_env(container.get("env", []), f"{where}.env")
        resources = container.get("resources", {})
        _check_object(resources, f"{where}.resources")
        for kind in ("limits", "requests"):
            amounts = resources.get(kind, {})
            _check_object(amounts, f"{where}.resources.{kind}")
            if len(amounts) > MAX_RESOURCES:
                raise ValueError(f"{where}.resources.{kind} may name at most {MAX_RESOURCES} resources")
            for resource, amount in amounts.items():
                if isinstance(amount, bool) or not isinstance(amount, int | str) or len(str(amount)) > 64:
                    raise ValueError(f"{where}.resources.{kind}[{resource}] must be an integer or a string")
    _check_tolerations(spec.get("tolerations", []))
    _check_label_map(spec.get("nodeSelector", {}), "template.spec.nodeSelector")
    metadata = template.get("metadata", {})
    _check_object(metadata, "template.metadata")
    _check_label_map(metadata.get("labels", {}), "template.metadata.labels")
    _check_string_map(metadata.get("annotations", {}), "template.metadata.annotations")
    return template


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _check_object(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")


def _check_string_map(value: Any, where: str) -> None:
    _check_object(value, where)
    for key, item in value.items():
        if not isinstance(item, str):
            raise ValueError(f"{where}[{key}] must be a string")


def _check_label_map(value: Any, where: str) -> None:
    _check_string_map(value, where)
    for key, item in value.items():
        if len(item) > MAX_LABEL_VALUE_LENGTH or not re.fullmatch(LABEL_VALUE_PATTERN, item):
            raise ValueError(f"{where}[{key}] {LABEL_VALUE_MESSAGE}")


def _check_env(env: Any, where: str) -> None:
    if not isinstance(env, list):
        raise ValueError(f"{where} must be a list")
    for index, item in enumerate(env):
        if not isinstance(item, dict) or not _is_text(item.get("name")):
            raise ValueError(f"{where}[{index}] needs a name")


def _check_tolerations(tolerations: Any) -> None:
    if not isinstance(tolerations, list):
        raise ValueError("template.spec.tolerations must be a list")
    for index, toleration in enumerate(tolerations):
        where = f"template.spec.tolerations[{index}]"
        _check_object(toleration, where)
        # The API server prunes (or, validating strictly, refuses) any other field: never stored.
        unknown = sorted(set(toleration) - set(_TOLERATION["properties"]))
        if unknown:
            raise ValueError(f"{where} has unknown fields {unknown}")
        for field in ("key", "value"):
            if not isinstance(toleration.get(field, ""), str):
                raise ValueError(f"{where}.{field} must be a string")
        if toleration.get("operator", "Equal") not in TOLERATION_OPERATORS:
            raise ValueError(f"{where}.operator must be Equal or Exists")
        if toleration.get("effect", "NoSchedule") not in TAINT_EFFECTS:
            raise ValueError(f"{where}.effect must be NoSchedule, PreferNoSchedule or NoExecute")
        seconds = toleration.get("tolerationSeconds", 0)
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise ValueError(f"{where}.tolerationSeconds must be an integer")


# The GPU resource as the CRD knows it; the operator's gpuResource setting defaults to it.
GPU = "nvidia.com/gpu"
_GPU_IN = "has(c.resources) && has(c.resources.{kind}) && '" + GPU + "' in c.resources.{kind}"
NODE_NAME_MESSAGE = "template.spec.nodeName is not allowed: the operator chooses every pod's node"
SCHEDULING_GATES_MESSAGE = "template.spec.schedulingGates is not allowed: the operator gates its pods itself"
GPU_AMOUNT_MESSAGE = f"a container of the template may ask for {GPU} only exactly gpusPerReplica"
GPU_CONTAINERS_MESSAGE = f"only one container of the template may ask for {GPU}"
# A tenant gets the GPUs its spec declares, on the node the scheduler chose: a template could
# otherwise ask more GPUs than the queue accounts, pin a node, or hold its pods with gates of its own.
# The rules of every spec with a `template` and a `gpusPerReplica` (TrainingJob, InferenceService).
TEMPLATE_RULES = [
    cel("!has(self.template.spec.nodeName)", NODE_NAME_MESSAGE),
    cel("!has(self.template.spec.schedulingGates)", SCHEDULING_GATES_MESSAGE),
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
]


def check_template_rules(template: dict[str, Any], gpus_per_replica: int) -> None:
    """The same rules as TEMPLATE_RULES, with their messages, for the models."""
    spec = template.get("spec", {})
    if "nodeName" in spec:
        raise ValueError(NODE_NAME_MESSAGE)
    if "schedulingGates" in spec:
        raise ValueError(SCHEDULING_GATES_MESSAGE)
    asking = 0
    for container in spec.get("containers", []):
        resources = container.get("resources", {})
        amounts = [resources.get(kind, {}).get(GPU) for kind in ("limits", "requests")]
        if any(amount is not None and str(amount) != str(gpus_per_replica) for amount in amounts):
            raise ValueError(GPU_AMOUNT_MESSAGE)
        asking += amounts[0] is not None
    if asking > 1:
        raise ValueError(GPU_CONTAINERS_MESSAGE)


def defaulted_to(model: type[ApiModel]) -> Any:
    """A sub-object field that defaults to `model()`, with that default written into the CRD.

    The API server then fills in the whole object when a user leaves it out, so
    CEL rules on it always see its fields, and `kubectl get -o yaml` shows them.
    """
    return Field(default_factory=model, json_schema_extra={"default": model().to_wire()})


PodTemplate = Annotated[
    dict[str, Any],
    AfterValidator(_check_pod_template),
    Field(
        description="Pod template (metadata and spec) for each replica, as in a Deployment.",
        json_schema_extra=POD_TEMPLATE_SCHEMA,
    ),
]

Name = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-convention condition: why the object is in the state it is."""

    type: str = Field(description="CamelCase condition type, e.g. Admitted, Placed, Running.")
    status: ConditionStatus
    reason: str = Field(default="", description="CamelCase reason a program can match on.")
    message: str = Field(default="", description="What happened, for a person.")
    last_transition_time: datetime | None = None
    observed_generation: int | None = Field(default=None, ge=0)


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    *,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """`conditions` with one condition set; its transition time moves only when its status does."""
    previous = next((c for c in conditions if c.type == type_), None)
    changed = previous is None or previous.status != status
    updated = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=now if changed or previous is None else previous.last_transition_time,
        observed_generation=generation,
    )
    return [updated if c.type == type_ else c for c in conditions] if previous else [*conditions, updated]


class CapacityType(StrEnum):
    SPOT = "Spot"
    ON_DEMAND = "OnDemand"


class SpotPolicy(StrEnum):
    """Where a workload may run: never on spot, on spot when it pays, only on spot."""

    NEVER = "Never"
    PREFER = "Prefer"
    ONLY = "Only"


class TopologyLevel(StrEnum):
    """Topology domains from the tightest to the widest."""

    NODE = "Node"
    NVLINK_DOMAIN = "NVLinkDomain"
    RACK = "Rack"
    ZONE = "Zone"


TOPOLOGY_ORDER: tuple[TopologyLevel, ...] = (
    TopologyLevel.NODE,
    TopologyLevel.NVLINK_DOMAIN,
    TopologyLevel.RACK,
    TopologyLevel.ZONE,
)
