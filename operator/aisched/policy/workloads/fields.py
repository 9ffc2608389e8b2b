"""Typed reads of a tenant's object, one field at a time. Pure.

Every value in a Job, a PyTorchJob or a pod is a tenant's, and the API server's schema for a
custom resource holds only as far as its CRD says (KubeRay's and training-operator's leave pod
templates open). Each read names the field it reads, so that what cannot be read becomes a
`Refusal` whose message says which field and why, never an exception out of the adapters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

# A DNS-1123 subdomain: lowercase alphanumeric labels joined by '.', 253 characters at most.
_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SUBDOMAIN_MAX: Final = 253
_INTEGER: Final = re.compile(r"^[+-]?[0-9]{1,19}$")
MAX_SHOWN: Final = 64
"""Characters of a tenant's value repeated in a message: enough to recognise it, never a flood."""


class FieldError(Exception):
    """A field of a tenant's object that cannot be read: `str(error)` names it and says why."""


class UnsupportedFieldError(FieldError):
    """A field that reads well but asks what aisched does not (yet) do for this kind (DRA claims, two
    GPU shapes in one workload, a RayJob on a cluster it does not make)."""


def shown(value: Any) -> str:
    """VALUE as a message repeats it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def is_subdomain(value: str) -> bool:
    return len(value) <= SUBDOMAIN_MAX and _SUBDOMAIN.match(value) is not None


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    """VALUE, an object with string keys; absent (None) reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise FieldError(f"{where} must be an object, not {shown(value)}")
    return value


def sequence(value: Any, where: str) -> list[Any]:
    """VALUE, a list; absent (None) reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise FieldError(f"{where} must be a list, not {shown(value)}")
    return list(value)


def string_map(value: Any, where: str) -> dict[str, str]:
    """VALUE, an object of strings to strings (labels, annotations, a nodeSelector)."""
    entries = mapping(value, where)
    for key, item in entries.items():
        if not isinstance(item, str):
            raise FieldError(f"{where}[{shown(key)}] must be a string, not {shown(item)}")
    return dict(entries)


def optional_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise FieldError(f"{where} must be a string, not {shown(value)}")


def optional_bool(value: Any, where: str) -> bool:
    """VALUE, a boolean; absent reads as false (`suspend`, `enableInTreeAutoscaling`)."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise FieldError(f"{where} must be true or false, not {shown(value)}")


def optional_int(value: Any, where: str, low: int, high: int) -> int | None:
    """VALUE, an integer in [LOW, HIGH] (a JSON number that is whole, never a boolean); absent: None."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(f"{where} must be a whole number, not {shown(value)}")
    if not low <= value <= high:
        raise FieldError(f"{where} must be between {low} and {high}, not {shown(value)}")
    return value


def integer_text(text: str, where: str, low: int, high: int) -> int:
    """TEXT, a decimal integer in [LOW, HIGH], as an annotation writes one."""
    if not _INTEGER.match(text):
        raise FieldError(f"{where} must be a whole number, not {shown(text)}")
    value = int(text)
    if not low <= value <= high:
        raise FieldError(f"{where} must be between {low} and {high}, not {value}")
    return value


def timestamp(text: str) -> datetime | None:
    """TEXT, an RFC 3339 time as the API server writes one ('Z' allowed), in UTC; None when it is not one."""
    try:
        moment = datetime.fromisoformat(text)
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (ValueError, OverflowError):  # not a time, or one an offset moves out of datetime's years
        return None
