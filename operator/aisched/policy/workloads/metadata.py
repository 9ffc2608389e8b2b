"""What a workload's labels and annotations say, read the same for every kind. Pure.

The tenant's words (`scheduling.aisched.io/...`) are checked and refused with a message naming the
annotation; the operator's own record (`PLACEMENT_ANNOTATION`) is read strictly and, where it is not
one the operator wrote, read as no record at all (`read_admitted`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from aisched.api.common import CapacityType, SpotPolicy
from aisched.policy.placement import capacity_types_for
from aisched.policy.workloads.fields import (
    SUBDOMAIN_MAX,
    FieldError,
    integer_text,
    is_subdomain,
    optional_str,
    shown,
    string_map,
    timestamp,
)
from aisched.policy.workloads.model import (
    CARBON_DEFERRABLE_ANNOTATION,
    CARBON_MAX_DELAY_ANNOTATION,
    CARBON_REGION_ANNOTATION,
    EXPECTED_DURATION_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PREFERRED_LEVEL_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    REQUIRED_LEVEL_ANNOTATION,
    SPOT_ANNOTATION,
    AdmittedRecord,
    CarbonAsk,
)

LONG_AGO: Final = datetime.min.replace(tzinfo=UTC)
"""The creation time of an object that has none yet: it queues first among equals, as a TrainingJob does."""
MAX_PRIORITY: Final = 1_000_000_000
MAX_EXPECTED_SECONDS: Final = 10**12
MAX_ADMITTED_NODES: Final = 100_000
MAX_CARBON_DELAY_SECONDS: Final = 30 * 86400  # as TrainingJob's carbon.maxDelaySeconds
MAX_REGION_CHARS: Final = 64
# A topology level's name, as `aisched.api.common.TopologyLevelName` and the cluster's topology write it.
_LEVEL_NAME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,62}$")


@dataclass(frozen=True, slots=True)
class WorkloadMeta:
    """A workload's metadata as the cycle orders and places it (every kind's the same way)."""

    queue: str
    priority: int = 0
    created: datetime = LONG_AGO
    required_level: str | None = None
    preferred_level: str | None = None
    capacity_types: tuple[CapacityType, ...] = (CapacityType.ON_DEMAND,)
    expected_duration_seconds: int | None = None
    carbon: CarbonAsk | None = None
    admitted: AdmittedRecord | None = None


def object_names(obj: Any) -> tuple[str, str, str]:
    """(namespace, name, uid) of OBJ, each "" where it is not a string: a `Refusal` still needs a name."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return "", "", ""
    return _text(meta.get("namespace")), _text(meta.get("name")), _text(meta.get("uid"))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def queue_asked(obj: Any) -> Any:
    """OBJ's QUEUE_LABEL value as written (None: the label is absent or the labels cannot be read)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels.get(QUEUE_LABEL) if isinstance(labels, Mapping) else None


def read_meta(obj: Mapping[str, Any], queue: Any, *, where: str = "metadata") -> WorkloadMeta:
    """What OBJ's metadata (at path WHERE in messages) says, charged to QUEUE: its label's value, or the
    namespace's default. Raises `FieldError`."""
    if not isinstance(queue, str) or not is_subdomain(queue):
        raise FieldError(
            f"{where}.labels[{QUEUE_LABEL!r}] must name a queue (a DNS-1123 subdomain of at most "
            f"{SUBDOMAIN_MAX} lowercase letters, digits, '-' and '.'), not {shown(queue)}"
        )
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        raise FieldError(f"{where} must be an object, not {shown(meta)}")
    string_map(meta.get("labels"), f"{where}.labels")
    annotations = string_map(meta.get("annotations"), f"{where}.annotations")

    def annotation(key: str) -> str | None:
        return annotations.get(key)

    def path(key: str) -> str:
        return f"{where}.annotations[{key!r}]"

    priority = annotation(PRIORITY_ANNOTATION)
    spot = annotation(SPOT_ANNOTATION)
    if spot is not None and spot not in set(SpotPolicy):
        raise FieldError(f"{path(SPOT_ANNOTATION)} must be one of {', '.join(SpotPolicy)}, not {shown(spot)}")
    duration = annotation(EXPECTED_DURATION_ANNOTATION)
    placement = annotation(PLACEMENT_ANNOTATION)
    carbon = _carbon(annotation, path, duration)
    return WorkloadMeta(
        queue=queue,
        priority=0
        if priority is None
        else integer_text(priority, path(PRIORITY_ANNOTATION), -MAX_PRIORITY, MAX_PRIORITY),
        created=_created(meta.get("creationTimestamp"), f"{where}.creationTimestamp"),
        required_level=_level(annotation(REQUIRED_LEVEL_ANNOTATION), path(REQUIRED_LEVEL_ANNOTATION)),
        preferred_level=_level(annotation(PREFERRED_LEVEL_ANNOTATION), path(PREFERRED_LEVEL_ANNOTATION)),
        capacity_types=capacity_types_for(SpotPolicy(spot)) if spot is not None else (CapacityType.ON_DEMAND,),
        expected_duration_seconds=(
            None
            if duration is None
            else integer_text(duration, path(EXPECTED_DURATION_ANNOTATION), 1, MAX_EXPECTED_SECONDS)
        ),
        carbon=carbon,
        admitted=read_admitted(placement) if placement is not None else None,
    )


def _carbon(
    annotation: Callable[[str], str | None], path: Callable[[str], str], duration: str | None
) -> CarbonAsk | None:
    """The carbon-aware deferral its annotations ask for: a deferrable start needs a bound on its delay and an
    expected duration (what the cleanest window is chosen for)."""
    deferrable = annotation(CARBON_DEFERRABLE_ANNOTATION)
    delay, region = annotation(CARBON_MAX_DELAY_ANNOTATION), annotation(CARBON_REGION_ANNOTATION)
    if deferrable is None or deferrable == "false":
        if delay is not None or region is not None:
            deferrable_path = path(CARBON_DEFERRABLE_ANNOTATION)
            raise FieldError(f'a carbon delay or region needs {deferrable_path}: "true"')
        return None
    if deferrable != "true":
        raise FieldError(f'{path(CARBON_DEFERRABLE_ANNOTATION)} must be "true" or "false", not {shown(deferrable)}')
    if delay is None:
        raise FieldError(f"a deferrable workload needs {path(CARBON_MAX_DELAY_ANNOTATION)}: the latest it may start")
    if duration is None:
        raise FieldError(
            f"a deferrable workload needs {path(EXPECTED_DURATION_ANNOTATION)}: the window it is planned in"
        )
    if region is not None and not (0 < len(region) <= MAX_REGION_CHARS and region.isprintable()):
        raise FieldError(f"{path(CARBON_REGION_ANNOTATION)} must be 1 to {MAX_REGION_CHARS} printable characters")
    seconds = integer_text(delay, path(CARBON_MAX_DELAY_ANNOTATION), 0, MAX_CARBON_DELAY_SECONDS)
    return CarbonAsk(seconds, region)


def _created(value: Any, where: str) -> datetime:
    text = optional_str(value, where)
    if text is None:
        return LONG_AGO
    moment = timestamp(text)
    if moment is None:
        raise FieldError(f"{where} must be an RFC 3339 time, not {shown(text)}")
    return moment


def _level(value: str | None, where: str) -> str | None:
    if value is None or _LEVEL_NAME.match(value):
        return value
    raise FieldError(f"{where} must name a topology level (a letter, then letters, digits or '-'), not {shown(value)}")


def read_admitted(text: str) -> AdmittedRecord | None:
    """The record TEXT is (`AdmittedRecord.to_json`), or None where it is not one in every field.

    Only the operator writes it (the chart's admission policies keep tenants off `aisched.io/`), so
    a record that does not read is not the operator's: no record, never a charge or a node to trust."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    nodes, gpus, queue = record.get("nodes"), record.get("gpusPerPod"), record.get("queue")
    mig_profile, generation = record.get("migProfile"), record.get("generation", 1)
    admitted_at = timestamp(record["admittedAt"]) if isinstance(record.get("admittedAt"), str) else None
    if (
        not isinstance(nodes, list)
        or len(nodes) > MAX_ADMITTED_NODES
        or not all(isinstance(node, str) and 0 < len(node) <= SUBDOMAIN_MAX for node in nodes)
        or not isinstance(gpus, int)
        or not _whole(gpus, 0)
        or not isinstance(queue, str)
        or not queue
        or not (mig_profile is None or (isinstance(mig_profile, str) and mig_profile))
        or not _whole(generation, 1)
        or admitted_at is None
    ):
        return None
    return AdmittedRecord(tuple(nodes), gpus, mig_profile, queue, admitted_at, generation)


def _whole(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least
