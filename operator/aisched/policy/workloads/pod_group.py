"""Plain pods that start together (POD_GROUP_LABEL), or one pod labelled for a queue, as one `Workload`. Pure.

A pod group has no object of its own: its pods say its name, its size and its queue, and they must
agree. The oldest pod stands for the group (its uid, its creation time, its annotations), so the
group keeps one identity while younger pods come and go. The caller hands the pods of one group in
one namespace that are not being deleted; the size, not how many pods exist yet, is what it counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from aisched.policy.workloads.fields import FieldError, UnsupportedFieldError, integer_text, mapping, shown, timestamp
from aisched.policy.workloads.kinds import refusal, workload_of
from aisched.policy.workloads.metadata import LONG_AGO, object_names, queue_asked, read_meta
from aisched.policy.workloads.model import (
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_ANNOTATION,
    PodSet,
    Refusal,
    Workload,
    WorkloadKind,
)
from aisched.policy.workloads.pod_shape import pod_shape
from aisched.policy.workloads.reading import KindReading

MAX_GROUP_SIZE: Final = 10_000
POD_ENDED: Final = frozenset({"Succeeded", "Failed"})
_SIZE: Final = f"metadata.annotations[{POD_GROUP_SIZE_ANNOTATION!r}]"
_GROUP: Final = f"metadata.labels[{POD_GROUP_LABEL!r}]"


def read_pod_group(pods: Sequence[Mapping[str, Any]], *, default_queue: str | None = None) -> Workload | Refusal | None:
    """PODS (one group's, in one namespace) as one workload; a `Refusal` when they disagree or cannot be read;
    None when none is labelled for a queue and DEFAULT_QUEUE is None. A pod with the queue label and no group
    label is a group of one, named after the pod. Each pod is read as its own template (its `spec`)."""
    if not isinstance(pods, Sequence) or isinstance(pods, str) or not pods:
        return None
    queues = {_text_or_bad(queue_asked(pod)) for pod in pods} - {None}
    if not queues and default_queue is None:
        return None
    pods = sorted(pods, key=_age)
    oldest = pods[0]
    namespace, pod_name, uid = object_names(oldest)
    groups = {_text_or_bad(_label(pod, POD_GROUP_LABEL)) for pod in pods}
    group = next(iter(groups)) if len(groups) == 1 else None
    name = group if group is not None and group != _BAD else pod_name
    try:
        if len(groups) > 1 or group == _BAD:
            raise FieldError(f"the pods name different groups, or none, in {_GROUP}")
        if len(queues) > 1:
            raise FieldError(f"the pods of group {name!r} name different queues in their queue labels")
        if len({object_names(pod)[0] for pod in pods}) > 1:
            raise FieldError(f"the pods of group {name!r} are in different namespaces")
        size = _size(pods, name) if group is not None else _alone(pods)
        queue = next(iter(queues)) if queues else default_queue
        meta = read_meta(oldest, queue, where=f"pod {pod_name!r} metadata")
        shape = pod_shape(oldest, f"pod {pod_name!r}")
        for pod in pods[1:]:
            other_name = object_names(pod)[1]
            read_meta(pod, queue, where=f"pod {other_name!r} metadata")
            other = pod_shape(pod, f"pod {other_name!r}")
            if (other.gpus, other.mig_profile) != (shape.gpus, shape.mig_profile):
                raise UnsupportedFieldError(
                    f"the pods of group {name!r} ask different GPUs per pod ({pod_name} "
                    f"{shape.mig_profile or shape.gpus}, {other_name} {other.mig_profile or other.gpus}): "
                    "aisched places one shape per workload"
                )
        pod_set = PodSet(
            name="main",
            count=size,
            gpus_per_pod=shape.gpus,
            mig_profile=shape.mig_profile,
            tolerations=shape.tolerations,
            node_selector=shape.node_selector,
        )
        finished = len(pods) >= size and all(_phase(pod) in POD_ENDED for pod in pods)
    except FieldError as error:
        return refusal(WorkloadKind.POD_GROUP, namespace, name, error)
    return workload_of(WorkloadKind.POD_GROUP, (namespace, name, uid), meta, KindReading((pod_set,), finished=finished))


_BAD: Final = "\x00not a string"
"""A label value that is not a string, in a set of the values the pods write (no label value has a NUL)."""


def _text_or_bad(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else _BAD


def _label(pod: Any, key: str) -> Any:
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels.get(key) if isinstance(labels, Mapping) else None


def _age(pod: Any) -> tuple[datetime, str]:
    """Oldest first, then by name: the same pod stands for the group on every read."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    created = meta.get("creationTimestamp") if isinstance(meta, Mapping) else None
    moment = timestamp(created) if isinstance(created, str) else None
    return moment or LONG_AGO, object_names(pod)[1]


def _size(pods: Sequence[Any], name: str) -> int:
    sizes = set()
    for pod in pods:
        meta = mapping(mapping(pod, "pod").get("metadata"), "metadata")
        annotations = mapping(meta.get("annotations"), "metadata.annotations")
        text = annotations.get(POD_GROUP_SIZE_ANNOTATION)
        if not isinstance(text, str):
            raise FieldError(
                f"pod {object_names(pod)[1]!r} {_SIZE} must say the size of group {name!r}, not {shown(text)}"
            )
        sizes.add(integer_text(text, f"pod {object_names(pod)[1]!r} {_SIZE}", 1, MAX_GROUP_SIZE))
    if len(sizes) > 1:
        raise FieldError(
            f"the pods of group {name!r} say different sizes in {_SIZE}: {', '.join(map(str, sorted(sizes)))}"
        )
    (size,) = sizes
    if len(pods) > size:
        raise FieldError(f"group {name!r} has {len(pods)} pods, more than its size {size} ({_SIZE})")
    return size


def _alone(pods: Sequence[Any]) -> int:
    if len(pods) > 1:
        raise FieldError(f"{len(pods)} pods without {_GROUP} were handed as one group; each is a group of one")
    return 1


def _phase(pod: Any) -> str | None:
    status = pod.get("status") if isinstance(pod, Mapping) else None
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return phase if isinstance(phase, str) else None
