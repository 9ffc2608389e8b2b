"""Every field a tenant writes wrong is a refusal naming it; no object, however made, raises."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aisched.policy.workloads.kinds import INVALID_WORKLOAD, UNSUPPORTED_WORKLOAD, read_workload
from aisched.policy.workloads.model import (
    EXPECTED_DURATION_ANNOTATION,
    MIN_PODS_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_SIZE_ANNOTATION,
    PREFERRED_LEVEL_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    REQUIRED_LEVEL_ANNOTATION,
    SPOT_ANNOTATION,
    Refusal,
    Workload,
    WorkloadKind,
)
from aisched.policy.workloads.pod_group import read_pod_group
from tests.unit.policy.workloads.manifests import (
    group_pod,
    indexed_job,
    pytorch_simple,
    ray_cluster,
    ray_job_sample,
    vllm_deployment,
)

Edit = Callable[[dict[str, Any]], None]


def annotate(key: str, value: Any) -> Edit:
    return lambda obj: obj["metadata"]["annotations"].__setitem__(key, value)


def label(key: str, value: Any) -> Edit:
    return lambda obj: obj["metadata"]["labels"].__setitem__(key, value)


def put(path: str, value: Any) -> Edit:
    def edit(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node: Any = obj
        for step in parents:
            node = node[int(step)] if isinstance(node, list) else node[step]
        if isinstance(node, list):
            node[int(leaf)] = value
        else:
            node[leaf] = value

    return edit


def drop(path: str) -> Edit:
    def edit(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node: Any = obj
        for step in parents:
            node = node[step]
        del node[leaf]

    return edit


METADATA_MISTAKES = [
    (label(QUEUE_LABEL, "Team_A"), f"metadata.labels['{QUEUE_LABEL}'] must name a queue"),
    (label(QUEUE_LABEL, "a" * 254), "must name a queue (a DNS-1123 subdomain of at most 253"),
    (label(QUEUE_LABEL, 7), "must name a queue"),
    (label("other", 7), "metadata.labels['other'] must be a string, not 7"),
    (put("metadata.annotations", ["x"]), "metadata.annotations must be an object"),
    (annotate(PRIORITY_ANNOTATION, "high"), f"metadata.annotations['{PRIORITY_ANNOTATION}'] must be a whole number"),
    (annotate(PRIORITY_ANNOTATION, "1000000001"), "must be between -1000000000 and 1000000000, not 1000000001"),
    (annotate(PRIORITY_ANNOTATION, 5), f"metadata.annotations['{PRIORITY_ANNOTATION}'] must be a string, not 5"),
    (annotate(REQUIRED_LEVEL_ANNOTATION, "rack/1"), "must name a topology level"),
    (annotate(PREFERRED_LEVEL_ANNOTATION, ""), "must name a topology level"),
    (annotate(SPOT_ANNOTATION, "Allowed"), "must be one of Never, Prefer, Only, not 'Allowed'"),
    (annotate(EXPECTED_DURATION_ANNOTATION, "0"), "must be between 1 and"),
    (annotate(EXPECTED_DURATION_ANNOTATION, "1h"), "must be a whole number"),
    (put("metadata.creationTimestamp", "yesterday"), "metadata.creationTimestamp must be an RFC 3339 time"),
    (put("metadata.creationTimestamp", 1700000000), "metadata.creationTimestamp must be a string"),
    (drop("spec"), "spec is missing"),
    (put("spec", "all"), "spec must be an object"),
]

KIND_MISTAKES: list[tuple[WorkloadKind, Callable[[], dict[str, Any]], Edit, str]] = [
    (WorkloadKind.BATCH_JOB, indexed_job, put("spec.parallelism", -1), "spec.parallelism must be between 0 and 100000"),
    (WorkloadKind.BATCH_JOB, indexed_job, put("spec.completions", "5"), "spec.completions must be a whole number"),
    (WorkloadKind.BATCH_JOB, indexed_job, put("spec.completionMode", "Sometimes"), "spec.completionMode must be"),
    (WorkloadKind.BATCH_JOB, indexed_job, put("spec.suspend", "yes"), "spec.suspend must be true or false"),
    (WorkloadKind.BATCH_JOB, indexed_job, annotate(MIN_PODS_ANNOTATION, "0"), "must be between 1 and 3"),
    (WorkloadKind.BATCH_JOB, indexed_job, put("status", {"conditions": [5]}), "status.conditions[0] must be an object"),
    (WorkloadKind.BATCH_JOB, indexed_job, put("spec.template", None), "spec.template is missing"),
    (WorkloadKind.PYTORCH_JOB, pytorch_simple, put("spec.pytorchReplicaSpecs", {}), "names no replica type"),
    (
        WorkloadKind.PYTORCH_JOB,
        pytorch_simple,
        put("spec.pytorchReplicaSpecs.Master", 1),
        "spec.pytorchReplicaSpecs.Master must be an object",
    ),
    (
        WorkloadKind.PYTORCH_JOB,
        pytorch_simple,
        put("spec.runPolicy", {"suspend": 1}),
        "spec.runPolicy.suspend must be true or false",
    ),
    (
        WorkloadKind.PYTORCH_JOB,
        pytorch_simple,
        put("spec.elasticPolicy", {"minReplicas": 0}),
        "spec.elasticPolicy.minReplicas must be between 1",
    ),
    (
        WorkloadKind.PYTORCH_JOB,
        pytorch_simple,
        put(
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers.0.resources", {"limits": {"nvidia.com/gpu": "x"}}
        ),
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits['nvidia.com/gpu'] "
        "must be a whole number of devices, not 'x'",
    ),
    (WorkloadKind.RAY_CLUSTER, ray_cluster, drop("spec.headGroupSpec"), "spec.headGroupSpec is missing"),
    (
        WorkloadKind.RAY_CLUSTER,
        ray_cluster,
        put("spec.workerGroupSpecs.0.groupName", ""),
        "spec.workerGroupSpecs[0].groupName is missing",
    ),
    (WorkloadKind.RAY_CLUSTER, ray_cluster, put("spec.workerGroupSpecs.0.groupName", "head"), "names another pod set"),
    (
        WorkloadKind.RAY_CLUSTER,
        ray_cluster,
        put("spec.workerGroupSpecs.0.numOfHosts", 2.5),
        "numOfHosts must be a whole number",
    ),
    (
        WorkloadKind.RAY_CLUSTER,
        ray_cluster,
        put("spec.workerGroupSpecs.0", {"groupName": "g", "replicas": 60_000, "numOfHosts": 2}),
        "spec.workerGroupSpecs[0]: replicas x numOfHosts is 120000 pods, more than 100000",
    ),
    (
        WorkloadKind.RAY_CLUSTER,
        ray_cluster,
        put("spec.enableInTreeAutoscaling", "true"),
        "spec.enableInTreeAutoscaling must be true or false",
    ),
    (
        WorkloadKind.RAY_CLUSTER,
        ray_cluster,
        put("spec.workerGroupSpecs", {"a": 1}),
        "spec.workerGroupSpecs must be a list",
    ),
    (WorkloadKind.RAY_JOB, ray_job_sample, drop("spec.rayClusterSpec"), "spec.rayClusterSpec is missing"),
    (
        WorkloadKind.RAY_JOB,
        ray_job_sample,
        put("status", {"jobDeploymentStatus": 3}),
        "status.jobDeploymentStatus must be a string",
    ),
    (
        WorkloadKind.RAY_JOB,
        ray_job_sample,
        put("spec.rayClusterSpec.workerGroupSpecs.0.template.spec.tolerations", [{"effect": 1}]),
        "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.tolerations[0].effect must be a string",
    ),
    (
        WorkloadKind.DEPLOYMENT,
        vllm_deployment,
        put("spec.replicas", "2"),
        "spec.replicas must be a whole number, not '2'",
    ),
    (
        WorkloadKind.STATEFUL_SET,
        vllm_deployment,
        put("spec.template.spec.nodeSelector", {"a": None}),
        "spec.template.spec.nodeSelector['a'] must be a string",
    ),
]


@pytest.mark.parametrize(("edit", "says"), METADATA_MISTAKES)
@pytest.mark.parametrize("kind", [WorkloadKind.BATCH_JOB, WorkloadKind.RAY_JOB])
def test_a_metadata_mistake_is_refused_naming_the_field(kind: WorkloadKind, edit: Edit, says: str) -> None:
    obj = indexed_job() if kind == WorkloadKind.BATCH_JOB else ray_job_sample()
    edit(obj)
    refusal = read_workload(kind, obj)
    assert isinstance(refusal, Refusal), refusal
    assert refusal.reason == INVALID_WORKLOAD
    assert says in refusal.message, refusal.message
    assert (refusal.namespace, refusal.name) == ("ml", obj["metadata"]["name"])


@pytest.mark.parametrize(("kind", "make", "edit", "says"), KIND_MISTAKES)
def test_a_kind_s_mistake_is_refused_naming_the_field(
    kind: WorkloadKind, make: Callable[[], dict[str, Any]], edit: Edit, says: str
) -> None:
    obj = make()
    assert isinstance(read_workload(kind, copy.deepcopy(obj)), Workload)  # the mistake is what refuses it
    edit(obj)
    refusal = read_workload(kind, obj)
    assert isinstance(refusal, Refusal), refusal
    assert refusal.reason == INVALID_WORKLOAD
    assert says in refusal.message, refusal.message


def test_an_object_that_is_no_object_is_refused_only_when_a_default_queue_claims_it() -> None:
    assert read_workload(WorkloadKind.BATCH_JOB, []) is None  # type: ignore[arg-type]
    refusal = read_workload(WorkloadKind.BATCH_JOB, [], default_queue="shared")  # type: ignore[arg-type]
    assert isinstance(refusal, Refusal) and refusal.message == "the object must be a JSON object, not list"
    refusal = read_workload(WorkloadKind.BATCH_JOB, {"metadata": 3}, default_queue="shared")
    assert isinstance(refusal, Refusal) and refusal.message == "metadata must be an object, not 3"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)
KEYS = st.sampled_from(
    [
        "metadata", "spec", "status", "labels", "annotations", QUEUE_LABEL, POD_GROUP_LABEL,
        POD_GROUP_SIZE_ANNOTATION, PRIORITY_ANNOTATION, "template", "containers", "initContainers", "resources",
        "limits", "requests", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "tolerations", "operator", "effect",
        "nodeSelector", "pytorchReplicaSpecs", "Worker", "replicas", "workerGroupSpecs", "headGroupSpec",
        "groupName", "rayClusterSpec", "parallelism", "completions", "conditions", "type", "phase",
        "jobDeploymentStatus", "creationTimestamp",
    ]
)  # fmt: skip
# Objects of the kinds' own keys, so that the adapters read deep into them rather than stopping at the top.
SHAPED = st.recursive(
    JSON,
    lambda inner: st.dictionaries(KEYS | st.text(max_size=6), inner, max_size=5) | st.lists(inner, max_size=3),
    max_leaves=40,
)


def mutated(make: Callable[[], dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """One of the examples, with one field somewhere replaced by arbitrary JSON."""

    def mutate(data: tuple[list[int], Any]) -> dict[str, Any]:
        choices, value = data
        obj = make()
        node: Any = obj
        for choice in choices:
            children = (
                list(node.items())
                if isinstance(node, dict)
                else list(enumerate(node))
                if isinstance(node, list)
                else []
            )
            if not children:
                break
            key, child = children[choice % len(children)]
            if not isinstance(child, dict | list) or choice % 3 == 0:
                node[key] = value
                break
            node = child
        return obj

    return st.tuples(st.lists(st.integers(0, 50), min_size=1, max_size=8), SHAPED).map(mutate)


OBJECTS = (
    SHAPED
    | mutated(indexed_job)
    | mutated(pytorch_simple)
    | mutated(ray_job_sample)
    | mutated(ray_cluster)
    | mutated(vllm_deployment)
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(list(WorkloadKind)), obj=OBJECTS, default=st.none() | st.just("shared") | st.text(max_size=5)
)
def test_read_workload_never_raises(kind: WorkloadKind, obj: Any, default: str | None) -> None:
    read = read_workload(kind, obj, default_queue=default)
    assert read is None or isinstance(read, Workload | Refusal)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pods=st.lists(SHAPED | mutated(lambda: group_pod("p0")) | mutated(lambda: group_pod("p1")), max_size=4),
    default=st.none() | st.just("shared"),
)
def test_read_pod_group_never_raises(pods: list[Any], default: str | None) -> None:
    read = read_pod_group(pods, default_queue=default)
    assert read is None or isinstance(read, Workload | Refusal)


def test_a_rayjob_kuberay_would_not_suspend_is_refused_saying_what_to_set() -> None:
    job = ray_job_sample()
    del job["spec"]["shutdownAfterJobFinishes"]
    refused = read_workload(WorkloadKind.RAY_JOB, job)
    assert isinstance(refused, Refusal) and refused.reason == UNSUPPORTED_WORKLOAD
    assert "shutdownAfterJobFinishes: true" in refused.message
