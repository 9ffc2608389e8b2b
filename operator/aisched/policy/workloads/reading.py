"""What every kind's adapter reads the same way: pod sets from templates, conditions, its verdict. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aisched.policy.workloads.fields import FieldError, mapping, optional_int, sequence
from aisched.policy.workloads.model import PodSet
from aisched.policy.workloads.pod_shape import pod_shape

MAX_PODS: Final = 100_000
"""The most pods one set may count (an `AdmittedRecord` holds one node per GPU pod, at most as many)."""


@dataclass(frozen=True, slots=True)
class KindReading:
    """What one kind's object says beyond its metadata: its pods, and where it is in its life."""

    pod_sets: tuple[PodSet, ...]
    suspended: bool = False
    finished: bool = False
    gang: bool = True


def read_pod_set(name: str, count: int, template: Any, where: str, min_count: int | None = None) -> PodSet:
    """COUNT pods made from TEMPLATE (at path WHERE): a `PodSet` named NAME. Raises `FieldError`."""
    shape = pod_shape(required(template, where), where)
    return PodSet(
        name=name,
        count=count,
        gpus_per_pod=shape.gpus,
        min_count=min_count,
        mig_profile=shape.mig_profile,
        tolerations=shape.tolerations,
        node_selector=shape.node_selector,
    )


def count_field(value: Any, where: str, default: int) -> int:
    """A count of pods (`replicas`, `parallelism`): a whole number in [0, MAX_PODS], DEFAULT when absent."""
    count = optional_int(value, where, 0, MAX_PODS)
    return default if count is None else count


def condition_true(status: Mapping[str, Any], types: frozenset[str], where: str = "status.conditions") -> bool:
    """Whether STATUS has a condition of one of TYPES whose status is "True"."""
    for index, entry in enumerate(sequence(status.get("conditions"), where)):
        condition = mapping(entry, f"{where}[{index}]")
        kind = condition.get("type")
        if isinstance(kind, str) and kind in types and condition.get("status") == "True":
            return True
    return False


def spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """OBJ's spec, which every kind read here must have."""
    if obj.get("spec") is None:
        raise FieldError("spec is missing")
    return mapping(obj["spec"], "spec")


def status_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping(obj.get("status"), "status")


def required(value: Any, where: str) -> Any:
    if value is None:
        raise FieldError(f"{where} is missing")
    return value


def bounded_min(min_count: int | None, count: int) -> int | None:
    """An elastic set's least count, never more than it counts (a tenant's minimum above its replicas)."""
    return None if min_count is None else min(min_count, count)
