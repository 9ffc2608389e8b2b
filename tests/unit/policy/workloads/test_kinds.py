"""Each kind's object, as its project's examples write it, read into the pod sets aisched places."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from aisched.api.common import CapacityType
from aisched.policy.taints import TaintEffect, Toleration, TolerationOperator
from aisched.policy.workloads.kinds import INVALID_WORKLOAD, UNSUPPORTED_WORKLOAD, read_workload
from aisched.policy.workloads.model import (
    EXPECTED_DURATION_ANNOTATION,
    MIN_PODS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PREFERRED_LEVEL_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    REQUIRED_LEVEL_ANNOTATION,
    SPOT_ANNOTATION,
    AdmittedRecord,
    PodSet,
    Refusal,
    Workload,
    WorkloadKind,
)
from tests.unit.policy.workloads.manifests import (
    QUEUE,
    at,
    group_pod,
    indexed_job,
    pytorch_simple,
    ray_cluster,
    ray_job_sample,
    vllm_deployment,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def workload(kind: WorkloadKind, obj: dict[str, object], **kwargs: str) -> Workload:
    read = read_workload(kind, obj, **kwargs)
    assert isinstance(read, Workload), read
    return read


def refused(kind: WorkloadKind, obj: dict[str, object]) -> Refusal:
    read = read_workload(kind, obj)
    assert isinstance(read, Refusal), read
    return read


def test_the_pytorch_simple_example_is_a_master_then_its_workers() -> None:
    job = workload(WorkloadKind.PYTORCH_JOB, pytorch_simple(workers=3))
    assert [(s.name, s.count, s.gpus_per_pod, s.min_count) for s in job.pod_sets] == [
        ("Master", 1, 8, None),
        ("Worker", 3, 8, None),
    ]
    assert (job.namespace, job.name, job.uid, job.queue) == ("kubeflow", "pytorch-simple", "uid-pytorch-simple", QUEUE)
    assert job.key == "kubeflow/pytorch-simple@pytorchjobs.kubeflow.org"
    assert (job.gang, job.suspended, job.finished, job.priority, job.created) == (True, False, False, 0, T0)
    assert job.gpu_pods == 4


def test_a_pytorch_job_suspended_elastic_and_finished() -> None:
    obj = pytorch_simple(workers=4)
    obj["spec"]["runPolicy"] = {"suspend": True}
    obj["spec"]["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 4}
    obj["spec"]["pytorchReplicaSpecs"]["Launcher"] = {"template": {"spec": {"containers": []}}}
    job = workload(WorkloadKind.PYTORCH_JOB, obj)
    assert job.suspended
    assert [(s.name, s.count, s.min_count) for s in job.pod_sets] == [
        ("Master", 1, None),
        ("Worker", 4, 2),
        ("Launcher", 1, None),  # replicas default to 1; other types after Master and Worker
    ]
    obj["spec"]["elasticPolicy"]["minReplicas"] = 9
    assert workload(WorkloadKind.PYTORCH_JOB, obj).pod_sets[1].min_count == 4  # never more than it counts
    obj["status"] = {"conditions": [{"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}]}
    assert workload(WorkloadKind.PYTORCH_JOB, obj).finished


def test_pod_sets_of_different_gpus_are_refused_saying_both() -> None:
    refusal = refused(WorkloadKind.PYTORCH_JOB, pytorch_simple(master_gpus=8, worker_gpus=4))
    assert refusal.reason == UNSUPPORTED_WORKLOAD
    assert refusal.message == (
        "pod sets ask different GPUs per pod (Master 8, Worker 4): aisched places one shape per workload"
    )
    assert refusal.key == "kubeflow/pytorch-simple@pytorchjobs.kubeflow.org"


def test_a_set_without_gpus_is_kept_and_not_a_shape() -> None:
    job = workload(WorkloadKind.PYTORCH_JOB, pytorch_simple(master_gpus=0, worker_gpus=4, workers=2))
    assert [(s.name, s.holds_gpus) for s in job.pod_sets] == [("Master", False), ("Worker", True)]
    assert job.gpu_pods == 2


def test_the_ray_job_sample_is_a_head_and_its_worker_group() -> None:
    job = workload(WorkloadKind.RAY_JOB, ray_job_sample())
    assert job.pod_sets == (PodSet("head", 1, 0), PodSet("small-group", 1, 1))
    assert not job.suspended and not job.finished
    obj = ray_job_sample()
    obj["spec"]["suspend"] = True
    obj["status"] = {"jobDeploymentStatus": "Complete"}
    job = workload(WorkloadKind.RAY_JOB, obj)
    assert job.suspended and job.finished


def test_a_ray_job_on_a_cluster_it_does_not_make_is_refused() -> None:
    obj = ray_job_sample()
    del obj["spec"]["rayClusterSpec"]
    obj["spec"]["clusterSelector"] = {"ray.io/cluster": "raycluster-kuberay"}
    refusal = refused(WorkloadKind.RAY_JOB, obj)
    assert refusal.reason == UNSUPPORTED_WORKLOAD
    assert "runs on a RayCluster it does not make" in refusal.message


def test_ray_worker_groups_count_hosts_and_autoscale_down_to_their_minimum() -> None:
    obj = ray_cluster()
    spec = obj["spec"]
    spec["enableInTreeAutoscaling"] = True
    group = spec["workerGroupSpecs"][0]
    group.update(replicas=3, minReplicas=2, numOfHosts=4)
    spec["workerGroupSpecs"].append(
        {"groupName": "idle", "minReplicas": 0, "template": at(obj, "spec.workerGroupSpecs.0.template")}
    )
    job = workload(WorkloadKind.RAY_CLUSTER, obj)
    assert [(s.name, s.count, s.min_count) for s in job.pod_sets] == [
        ("head", 1, None),
        ("small-group", 12, 8),
        ("idle", 0, 0),  # replicas default to minReplicas
    ]
    group["suspend"] = True
    spec["suspend"] = True
    job = workload(WorkloadKind.RAY_CLUSTER, obj)
    assert job.suspended and job.pod_sets[1].count == 0


def test_ray_group_replicas_default_to_one_and_no_autoscaling_is_no_minimum() -> None:
    obj = ray_cluster()
    del obj["spec"]["workerGroupSpecs"][0]["replicas"]
    del obj["spec"]["workerGroupSpecs"][0]["minReplicas"]
    assert workload(WorkloadKind.RAY_CLUSTER, obj).pod_sets[1] == PodSet("small-group", 1, 1)


def test_an_indexed_job_runs_parallelism_pods_and_never_more_than_completions() -> None:
    job = workload(WorkloadKind.BATCH_JOB, indexed_job(completions=5, parallelism=3))
    assert job.pod_sets == (PodSet("main", 3, 1),)
    assert workload(WorkloadKind.BATCH_JOB, indexed_job(completions=2, parallelism=3)).pod_sets[0].count == 2
    obj = indexed_job()
    del obj["spec"]["parallelism"], obj["spec"]["completions"]
    assert workload(WorkloadKind.BATCH_JOB, obj).pod_sets[0].count == 1


def test_a_job_suspended_elastic_and_ended() -> None:
    obj = indexed_job(completions=8, parallelism=8)
    obj["spec"]["suspend"] = True
    obj["metadata"]["annotations"][MIN_PODS_ANNOTATION] = "4"
    job = workload(WorkloadKind.BATCH_JOB, obj)
    assert job.suspended and job.pod_sets[0].min_count == 4 and not job.finished
    for ended in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget"):
        obj["status"] = {"conditions": [{"type": ended, "status": "True"}]}
        assert workload(WorkloadKind.BATCH_JOB, obj).finished
    obj["status"] = {"conditions": [{"type": "Complete", "status": "False"}, {"type": ["Complete"], "status": "True"}]}
    assert not workload(WorkloadKind.BATCH_JOB, obj).finished
    obj["metadata"]["annotations"][MIN_PODS_ANNOTATION] = "9"
    assert "between 1 and 8" in refused(WorkloadKind.BATCH_JOB, obj).message


@pytest.mark.parametrize("kind", [WorkloadKind.DEPLOYMENT, WorkloadKind.STATEFUL_SET])
def test_a_vllm_server_is_replicas_admitted_one_by_one(kind: WorkloadKind) -> None:
    server = workload(kind, vllm_deployment(replicas=2))
    assert server.pod_sets == (PodSet("main", 2, 1),)
    assert not server.gang
    obj = vllm_deployment()
    del obj["spec"]["replicas"]
    assert workload(kind, obj).pod_sets[0].count == 1


def test_no_queue_label_is_not_aisched_s_unless_the_namespace_names_a_default() -> None:
    obj = vllm_deployment()
    del obj["metadata"]["labels"][QUEUE_LABEL]
    assert read_workload(WorkloadKind.DEPLOYMENT, obj) is None
    assert workload(WorkloadKind.DEPLOYMENT, obj, default_queue="shared").queue == "shared"
    obj["metadata"]["labels"][QUEUE_LABEL] = "mine"
    assert workload(WorkloadKind.DEPLOYMENT, obj, default_queue="shared").queue == "mine"


def test_a_workload_without_gpus_is_still_a_workload() -> None:
    job = workload(WorkloadKind.BATCH_JOB, indexed_job(gpus=0))
    assert job.gpu_pods == 0 and job.pod_sets == (PodSet("main", 3, 0),)


def test_the_tenant_s_annotations() -> None:
    obj = pytorch_simple()
    obj["metadata"]["annotations"] = {
        PRIORITY_ANNOTATION: "-40",
        REQUIRED_LEVEL_ANNOTATION: "Rack",
        PREFERRED_LEVEL_ANNOTATION: "NVLinkDomain",
        SPOT_ANNOTATION: "Prefer",
        EXPECTED_DURATION_ANNOTATION: "3600",
    }
    at(obj, "spec.pytorchReplicaSpecs.Worker.template.spec")["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    job = workload(WorkloadKind.PYTORCH_JOB, obj)
    assert (job.priority, job.required_level, job.preferred_level) == (-40, "Rack", "NVLinkDomain")
    assert job.capacity_types == (CapacityType.SPOT, CapacityType.ON_DEMAND)
    assert job.expected_duration_seconds == 3600
    assert job.pod_sets[1].tolerations == (
        Toleration("nvidia.com/gpu", TolerationOperator.EXISTS, "", TaintEffect.NO_SCHEDULE),
    )
    obj["metadata"]["annotations"][SPOT_ANNOTATION] = "Only"
    assert workload(WorkloadKind.PYTORCH_JOB, obj).capacity_types == (CapacityType.SPOT,)
    del obj["metadata"]["annotations"][SPOT_ANNOTATION]
    assert workload(WorkloadKind.PYTORCH_JOB, obj).capacity_types == (CapacityType.ON_DEMAND,)


def test_creation_time_is_read_in_utc_and_absent_queues_first() -> None:
    obj = vllm_deployment()
    obj["metadata"]["creationTimestamp"] = "2026-01-01T02:00:00+02:00"
    assert workload(WorkloadKind.DEPLOYMENT, obj).created == T0
    del obj["metadata"]["creationTimestamp"]
    assert workload(WorkloadKind.DEPLOYMENT, obj).created == datetime.min.replace(tzinfo=UTC)


def test_the_operator_s_record_is_read_and_a_bad_one_is_no_record() -> None:
    obj = indexed_job()
    record = AdmittedRecord(("n1", "n2", "n3"), 1, None, QUEUE, T0, generation=2)
    obj["metadata"]["annotations"][PLACEMENT_ANNOTATION] = (
        '{"nodes": ["n1", "n2", "n3"], "gpusPerPod": 1, "queue": "team-a", '
        '"admittedAt": "2026-01-01T00:00:00+00:00", "generation": 2}'
    )
    assert workload(WorkloadKind.BATCH_JOB, obj).admitted == record
    obj["metadata"]["annotations"][PLACEMENT_ANNOTATION] = "{not json"
    assert workload(WorkloadKind.BATCH_JOB, obj).admitted is None


def test_a_malformed_field_is_an_invalid_workload_naming_it() -> None:
    obj = pytorch_simple()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "three"
    refusal = refused(WorkloadKind.PYTORCH_JOB, obj)
    assert refusal.reason == INVALID_WORKLOAD
    assert refusal.message == "spec.pytorchReplicaSpecs.Worker.replicas must be a whole number, not 'three'"


def test_pod_groups_are_not_read_as_one_object() -> None:
    refusal = refused(WorkloadKind.POD_GROUP, group_pod("p0"))
    assert refusal.reason == UNSUPPORTED_WORKLOAD and "read_pod_group" in refusal.message
