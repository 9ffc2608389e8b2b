"""Building blocks shared by every aisched custom resource."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP: Final = "aisched.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "aisched.io/v1alpha1"
# The longest duration a spec may give (a leap year): longer is a typo, and any time the API
# server admits plus or minus it stays within the years a `datetime` can hold but for the edges.
MAX_DURATION_SECONDS: Final = 366 * 86400

# A label value (a pod's labels, a node selector's values): the API server refuses any other at
# pod creation, where it would fail every launch; here it fails at apply, with the field named.
MAX_LABEL_VALUE_LENGTH = 63
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MESSAGE = (
    f"must be a label value: at most {MAX_LABEL_VALUE_LENGTH} characters of letters, digits, '-', '_' and '.', "
    "starting and ending with a letter or digit"
)
# "" as a pod takes it: the operator Equal, every effect.
TOLERATION_OPERATORS = ("Equal", "Exists", "")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute", "")
# The GPU resource as the CRD knows it; the operator's gpuResource setting defaults to it.
GPU = "nvidia.com/gpu"


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


def defaulted_to(model: type[ApiModel]) -> Any:
    """A sub-object field that defaults to `model()`, with that default written into the CRD.

    The API server then fills in the whole object when a user leaves it out, so
    CEL rules on it always see its fields, and `kubectl get -o yaml` shows them.
    """
    return Field(default_factory=model, json_schema_extra={"default": model().to_wire()})


Name = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]

# Strings of a status the operator writes: bounded in the CRD as metav1.Condition bounds them, and
# cut to the bound when the operator makes one (a refusal may quote what a tenant wrote), so that
# a status write is never refused for its length.
MAX_MESSAGE_LENGTH: Final = 32768
MAX_REASON_LENGTH: Final = 1024
MAX_STATUS_TEXT_LENGTH: Final = 1024


def _clip(limit: int) -> Any:
    return BeforeValidator(lambda value: value[:limit] if isinstance(value, str) else value)


Message = Annotated[str, _clip(MAX_MESSAGE_LENGTH), Field(max_length=MAX_MESSAGE_LENGTH)]
Reason = Annotated[str, _clip(MAX_REASON_LENGTH), Field(max_length=MAX_REASON_LENGTH)]
StatusText = Annotated[str, _clip(MAX_STATUS_TEXT_LENGTH), Field(max_length=MAX_STATUS_TEXT_LENGTH)]
"""A free string of a status (a phase, a selector, a domain): a KiB is far more than any."""


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-convention condition: why the object is in the state it is."""

    type: str = Field(max_length=316, description="CamelCase condition type, e.g. Admitted, Placed, Running.")
    status: ConditionStatus
    reason: Reason = Field(default="", description="CamelCase reason a program can match on.")
    message: Message = Field(default="", description="What happened, for a person.")
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


MAX_CONDITIONS: Final = 16


def conditions_field() -> Any:
    """A status's conditions: one of each type, keyed by type; the operator sets a handful."""
    return Field(
        default_factory=list,
        max_length=MAX_CONDITIONS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class CapacityType(StrEnum):
    SPOT = "Spot"
    ON_DEMAND = "OnDemand"


class SpotPolicy(StrEnum):
    """Where a workload may run: never on spot, on spot when it pays, only on spot."""

    NEVER = "Never"
    PREFER = "Prefer"
    ONLY = "Only"


NODE_LEVEL = "Node"
"""The tightest topology level, in every topology: one node."""

TopologyLevelName = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z][A-Za-z0-9-]{0,62}$",
        max_length=63,
        description="A level of the cluster's topology, as the operator's settings name them "
        "(e.g. Node, NVLinkDomain, Zone; Rack on the local cluster, NetworkLayer3 on EKS, Subblock on GKE).",
    ),
]
