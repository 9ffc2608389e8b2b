"""Kubeflow training-operator v1 PyTorchJobs as pod sets, one per replica type. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aisched.policy.workloads.fields import FieldError, mapping, optional_bool, optional_int
from aisched.policy.workloads.reading import (
    MAX_PODS,
    KindReading,
    bounded_min,
    condition_true,
    count_field,
    read_pod_set,
    spec_of,
    status_of,
)

REPLICA_SPECS: Final = "spec.pytorchReplicaSpecs"
# The training-operator starts the Master first and names it in every worker's MASTER_ADDR; the
# pod-set order is the order of an `AdmittedRecord`'s nodes, so it must not depend on the map's.
FIRST_REPLICA_TYPES: Final = ("Master", "Worker")
PYTORCH_JOB_ENDED: Final = frozenset({"Succeeded", "Failed"})


def read_pytorch_job(obj: Mapping[str, Any]) -> KindReading:
    """A PyTorchJob: Master then Worker (then any other type, by name); elastic Workers with `elasticPolicy`."""
    spec = spec_of(obj)
    replica_specs = mapping(spec.get("pytorchReplicaSpecs"), REPLICA_SPECS)
    if not replica_specs:
        raise FieldError(f"{REPLICA_SPECS} names no replica type (Master, Worker)")
    elastic = mapping(spec.get("elasticPolicy"), "spec.elasticPolicy")
    worker_min = optional_int(elastic.get("minReplicas"), "spec.elasticPolicy.minReplicas", 1, MAX_PODS)
    ordered = [t for t in FIRST_REPLICA_TYPES if t in replica_specs]
    ordered += sorted(t for t in replica_specs if t not in FIRST_REPLICA_TYPES)
    pod_sets = []
    for replica_type in ordered:
        where = f"{REPLICA_SPECS}.{replica_type}"
        replica_spec = mapping(replica_specs[replica_type], where)
        count = count_field(replica_spec.get("replicas"), f"{where}.replicas", 1)
        min_count = bounded_min(worker_min, count) if replica_type == "Worker" else None
        pod_sets.append(read_pod_set(replica_type, count, replica_spec.get("template"), f"{where}.template", min_count))
    run_policy = mapping(spec.get("runPolicy"), "spec.runPolicy")
    return KindReading(
        pod_sets=tuple(pod_sets),
        suspended=optional_bool(run_policy.get("suspend"), "spec.runPolicy.suspend"),
        finished=condition_true(status_of(obj), PYTORCH_JOB_ENDED),
    )
