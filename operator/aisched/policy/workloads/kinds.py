"""A kind's object, as the API server returns it, read into a `Workload` (or a `Refusal`). Pure.

One reader per kind (`kinds_batch`, `kinds_kubeflow`, `kinds_ray`) says the object's pod sets and
where it is in its life; the metadata (queue, priority, topology, spot, the operator's record) is
read here the same way for every kind. Every field is a tenant's: what cannot be read, or asks what
aisched cannot place, is a `Refusal` whose message names the field. Nothing here raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from aisched.policy.workloads.fields import FieldError, UnsupportedFieldError, string_map
from aisched.policy.workloads.kinds_batch import read_job, read_model_server
from aisched.policy.workloads.kinds_kubeflow import read_pytorch_job
from aisched.policy.workloads.kinds_ray import read_ray_cluster, read_ray_job
from aisched.policy.workloads.metadata import WorkloadMeta, object_names, queue_asked, read_meta
from aisched.policy.workloads.model import PodSet, Refusal, Workload, WorkloadKind
from aisched.policy.workloads.reading import KindReading

INVALID_WORKLOAD: Final = "InvalidWorkload"
"""Refusal reason: a field that is not what its kind or aisched's annotations say it is."""
UNSUPPORTED_WORKLOAD: Final = "UnsupportedWorkload"
"""Refusal reason: a well-formed object asking what aisched does not (yet) do for its kind."""

_READERS: Final[dict[WorkloadKind, Callable[[Mapping[str, Any], Mapping[str, str]], KindReading]]] = {
    WorkloadKind.BATCH_JOB: read_job,
    WorkloadKind.PYTORCH_JOB: lambda obj, _: read_pytorch_job(obj),
    WorkloadKind.RAY_CLUSTER: lambda obj, _: read_ray_cluster(obj),
    WorkloadKind.RAY_JOB: lambda obj, _: read_ray_job(obj),
    WorkloadKind.DEPLOYMENT: lambda obj, _: read_model_server(obj),
    WorkloadKind.STATEFUL_SET: lambda obj, _: read_model_server(obj),
}


def read_workload(
    kind: WorkloadKind, obj: Mapping[str, Any], *, default_queue: str | None = None
) -> Workload | Refusal | None:
    """OBJ (an object of KIND) as aisched schedules it; a `Refusal` saying why it cannot; None when it is not
    aisched's (no QUEUE_LABEL, and its namespace names no DEFAULT_QUEUE). Plain pods: `read_pod_group`."""
    queue = queue_asked(obj)
    if queue is None:
        queue = default_queue
    if queue is None:
        return None
    namespace, name, uid = object_names(obj)
    try:
        if kind not in _READERS:
            raise UnsupportedFieldError(f"{kind.value} are read as pod groups (read_pod_group), not one object")
        if not isinstance(obj, Mapping):
            raise FieldError(f"the object must be a JSON object, not {type(obj).__name__}")
        meta = read_meta(obj, queue)
        annotations = string_map(obj["metadata"].get("annotations"), "metadata.annotations")
        reading = _READERS[kind](obj, annotations)
        check_one_shape(reading.pod_sets)
    except FieldError as error:
        return refusal(kind, namespace, name, error)
    return workload_of(kind, (namespace, name, uid), meta, reading)


def workload_of(kind: WorkloadKind, names: tuple[str, str, str], meta: WorkloadMeta, reading: KindReading) -> Workload:
    """The workload NAMES (namespace, name, uid) of KIND are, with META and READING."""
    namespace, name, uid = names
    return Workload(
        kind=kind,
        namespace=namespace,
        name=name,
        uid=uid,
        queue=meta.queue,
        priority=meta.priority,
        created=meta.created,
        pod_sets=reading.pod_sets,
        gang=reading.gang,
        required_level=meta.required_level,
        preferred_level=meta.preferred_level,
        capacity_types=meta.capacity_types,
        expected_duration_seconds=meta.expected_duration_seconds,
        carbon=meta.carbon,
        suspended=reading.suspended,
        finished=reading.finished,
        admitted=meta.admitted,
    )


def refusal(kind: WorkloadKind, namespace: str, name: str, error: FieldError) -> Refusal:
    reason = UNSUPPORTED_WORKLOAD if isinstance(error, UnsupportedFieldError) else INVALID_WORKLOAD
    return Refusal(kind, namespace, name, reason, str(error))


def check_one_shape(pod_sets: tuple[PodSet, ...]) -> None:
    """Raise `UnsupportedFieldError` unless every pod set that asks GPUs asks the same per pod: one gang, one shape.
    Sets that ask none (a Ray head, a launcher) start with the workload and are not placed by aisched."""
    shapes = {(s.gpus_per_pod, s.mig_profile) for s in pod_sets if s.holds_gpus}
    if len(shapes) > 1:
        asked = ", ".join(f"{s.name} {s.mig_profile or s.gpus_per_pod}" for s in pod_sets if s.holds_gpus)
        raise UnsupportedFieldError(
            f"pod sets ask different GPUs per pod ({asked}): aisched places one shape per workload"
        )
