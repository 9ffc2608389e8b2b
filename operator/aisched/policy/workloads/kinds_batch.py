"""batch/v1 Jobs and apps/v1 model servers (Deployments, StatefulSets) as pod sets. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aisched.policy.workloads.fields import FieldError, integer_text, optional_bool, optional_str
from aisched.policy.workloads.model import MIN_PODS_ANNOTATION
from aisched.policy.workloads.reading import (
    KindReading,
    condition_true,
    count_field,
    read_pod_set,
    spec_of,
    status_of,
)

# A Job is done once the Job controller says so; SuccessCriteriaMet and FailureTarget come first
# (Kubernetes 1.31+), while its pods are still being ended, and they hold nothing new from then on.
JOB_ENDED: Final = frozenset({"Complete", "Failed", "SuccessCriteriaMet", "FailureTarget"})
COMPLETION_MODES: Final = ("NonIndexed", "Indexed")


def read_job(obj: Mapping[str, Any], annotations: Mapping[str, str]) -> KindReading:
    """A Job: `parallelism` pods at once, never more than `completions`; elastic down to MIN_PODS_ANNOTATION."""
    spec = spec_of(obj)
    mode = optional_str(spec.get("completionMode"), "spec.completionMode")
    if mode is not None and mode not in COMPLETION_MODES:
        raise FieldError(f"spec.completionMode must be NonIndexed or Indexed, not {mode!r}")
    count = count_field(spec.get("parallelism"), "spec.parallelism", 1)
    completions = count_field(spec.get("completions"), "spec.completions", count)
    # Both modes run at most `completions` pods at a time: more parallelism than completions makes no more pods.
    count = min(count, completions)
    min_count = None
    if MIN_PODS_ANNOTATION in annotations:
        where = f"metadata.annotations[{MIN_PODS_ANNOTATION!r}]"
        if count < 1:
            raise FieldError(f"{where}: the Job runs no pods (parallelism or completions is 0)")
        min_count = integer_text(annotations[MIN_PODS_ANNOTATION], where, 1, count)
    return KindReading(
        pod_sets=(read_pod_set("main", count, spec.get("template"), "spec.template", min_count),),
        suspended=optional_bool(spec.get("suspend"), "spec.suspend"),
        finished=condition_true(status_of(obj), JOB_ENDED),
    )


def read_model_server(obj: Mapping[str, Any]) -> KindReading:
    """A Deployment or StatefulSet: `replicas` pods, each admitted on its own (no gang)."""
    spec = spec_of(obj)
    count = count_field(spec.get("replicas"), "spec.replicas", 1)
    return KindReading(
        pod_sets=(read_pod_set("main", count, spec.get("template"), "spec.template"),),
        gang=False,
    )
