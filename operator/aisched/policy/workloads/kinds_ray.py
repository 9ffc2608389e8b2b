"""KubeRay ray.io/v1 RayClusters and the clusters RayJobs make, as pod sets: the head, then each worker group. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from aisched.policy.workloads.fields import (
    FieldError,
    UnsupportedFieldError,
    mapping,
    optional_bool,
    optional_int,
    optional_str,
    sequence,
    shown,
)
from aisched.policy.workloads.model import PodSet
from aisched.policy.workloads.reading import MAX_PODS, KindReading, count_field, read_pod_set, spec_of, status_of

HEAD: Final = "head"
MAX_HOSTS: Final = 1_000
"""numOfHosts bound: a multi-host group's hosts per replica (TPU slices), far above any real one."""
RAY_JOB_ENDED: Final = ("Complete", "Failed")


def read_ray_cluster(obj: Mapping[str, Any]) -> KindReading:
    spec = spec_of(obj)
    return KindReading(
        pod_sets=ray_cluster_pod_sets(spec, "spec"),
        suspended=optional_bool(spec.get("suspend"), "spec.suspend"),
    )


def read_ray_job(obj: Mapping[str, Any]) -> KindReading:
    """A RayJob that makes its own cluster (`rayClusterSpec`); one that only selects a cluster is refused."""
    spec = spec_of(obj)
    if spec.get("rayClusterSpec") is None:
        if mapping(spec.get("clusterSelector"), "spec.clusterSelector"):
            raise UnsupportedFieldError(
                "spec.clusterSelector: this RayJob runs on a RayCluster it does not make; "
                "aisched schedules the RayCluster (put the queue label on it) or a RayJob with spec.rayClusterSpec"
            )
        raise FieldError("spec.rayClusterSpec is missing")
    if not optional_bool(spec.get("shutdownAfterJobFinishes"), "spec.shutdownAfterJobFinishes"):
        # KubeRay suspends (and so lets aisched hold until admitted, and preempt) only a RayJob whose cluster
        # goes when it ends: it fails any other suspended RayJob (ValidationFailed).
        raise UnsupportedFieldError(
            "spec.shutdownAfterJobFinishes: aisched holds a RayJob suspended until its queue admits it, and KubeRay "
            "suspends only RayJobs with shutdownAfterJobFinishes: true; set it, or put the queue label on a RayCluster"
        )
    status = status_of(obj)
    deployment = optional_str(status.get("jobDeploymentStatus"), "status.jobDeploymentStatus")
    return KindReading(
        pod_sets=ray_cluster_pod_sets(mapping(spec["rayClusterSpec"], "spec.rayClusterSpec"), "spec.rayClusterSpec"),
        suspended=optional_bool(spec.get("suspend"), "spec.suspend"),
        finished=deployment in RAY_JOB_ENDED,
    )


def ray_cluster_pod_sets(cluster: Mapping[str, Any], where: str) -> tuple[PodSet, ...]:
    """The head (one pod), then each worker group: `replicas` x `numOfHosts` pods; with in-tree autoscaling, elastic
    down to `minReplicas` x `numOfHosts`. A suspended worker group (KubeRay's `suspend`) makes no pods."""
    head = mapping(cluster.get("headGroupSpec"), f"{where}.headGroupSpec")
    if not head:
        raise FieldError(f"{where}.headGroupSpec is missing")
    autoscaled = optional_bool(cluster.get("enableInTreeAutoscaling"), f"{where}.enableInTreeAutoscaling")
    pod_sets = [read_pod_set(HEAD, 1, head.get("template"), f"{where}.headGroupSpec.template")]
    for index, entry in enumerate(sequence(cluster.get("workerGroupSpecs"), f"{where}.workerGroupSpecs")):
        path = f"{where}.workerGroupSpecs[{index}]"
        group = mapping(entry, path)
        name = optional_str(group.get("groupName"), f"{path}.groupName")
        if not name:
            raise FieldError(f"{path}.groupName is missing")
        if any(s.name == name for s in pod_sets):
            raise FieldError(f"{path}.groupName {shown(name)} names another pod set of this cluster")
        least = optional_int(group.get("minReplicas"), f"{path}.minReplicas", 0, MAX_PODS)
        replicas = count_field(group.get("replicas"), f"{path}.replicas", 1 if least is None else least)
        hosts = count_field(group.get("numOfHosts"), f"{path}.numOfHosts", 1)
        if hosts > MAX_HOSTS:
            raise FieldError(f"{path}.numOfHosts must be at most {MAX_HOSTS}, not {hosts}")
        if optional_bool(group.get("suspend"), f"{path}.suspend"):
            replicas = least = 0
        count = replicas * hosts
        if count > MAX_PODS:
            raise FieldError(f"{path}: replicas x numOfHosts is {count} pods, more than {MAX_PODS}")
        min_count = min((least or 0) * hosts, count) if autoscaled else None
        pod_sets.append(read_pod_set(name, count, group.get("template"), f"{path}.template", min_count))
    return tuple(pod_sets)
