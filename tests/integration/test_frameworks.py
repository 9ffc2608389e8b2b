"""The job frameworks' own controllers on the local cluster, with no aisched in the loop.

The test cluster runs the real Kubeflow training-operator (v1.8.1) and KubeRay operator (v1.5.0)
out of cluster (hack/cluster.sh, AISCHED_FRAMEWORKS=1). These tests pin what aisched's
hold-and-place design relies on them to do: a job as their own examples write it gets its pods
(and, for PyTorchJob, its Services), which run on the KWOK nodes; a suspended job gets none
until it is resumed. The manifests follow training-operator's examples/pytorch/simple.yaml and
KubeRay's ray-operator/config/samples/ray-job.sample.yaml at those versions.

Both controllers react within a second on a quiet machine; the waits are TIMEOUT, for a busy one.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from aisched.testing.cluster import TIMEOUT, wait_for

pytestmark = pytest.mark.integration

KUBEFLOW = ("kubeflow.org", "v1", "pytorchjobs")
RAY = "ray.io"
PYTORCH_IMAGE = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
RAY_IMAGE = "rayproject/ray:2.46.0"


def pytorch_simple(name: str, *, suspend: bool = False) -> dict[str, Any]:
    """examples/pytorch/simple.yaml of training-operator v1.8.1: a Master and a Worker."""

    def replica() -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": PYTORCH_IMAGE,
            "imagePullPolicy": "Always",
            "command": ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"],
        }
        return {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    spec: dict[str, Any] = {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}}
    if suspend:
        spec["runPolicy"] = {"suspend": True}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name}, "spec": spec}


def rayjob_sample(name: str, *, suspend: bool = False, shutdown_after_job_finishes: bool = False) -> dict[str, Any]:
    """ray-operator/config/samples/ray-job.sample.yaml of KubeRay v1.5.0: a head and one worker."""
    resources = {"limits": {"cpu": "1"}, "requests": {"cpu": "200m"}}
    ports = [
        {"containerPort": 6379, "name": "gcs-server"},
        {"containerPort": 8265, "name": "dashboard"},
        {"containerPort": 10001, "name": "client"},
    ]
    head = {
        "rayStartParams": {},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "ray-head",
                        "image": RAY_IMAGE,
                        "ports": ports,
                        "resources": resources,
                        "volumeMounts": [{"mountPath": "/home/ray/samples", "name": "code-sample"}],
                    }
                ],
                "volumes": [
                    {
                        "name": "code-sample",
                        "configMap": {
                            "name": f"{name}-code",
                            "items": [{"key": "sample_code.py", "path": "sample_code.py"}],
                        },
                    }
                ],
            }
        },
    }
    worker = {
        "replicas": 1,
        "minReplicas": 1,
        "maxReplicas": 5,
        "groupName": "small-group",
        "rayStartParams": {},
        "template": {"spec": {"containers": [{"name": "ray-worker", "image": RAY_IMAGE, "resources": resources}]}},
    }
    spec: dict[str, Any] = {
        "entrypoint": "python /home/ray/samples/sample_code.py",
        "runtimeEnvYAML": 'env_vars:\n  counter_name: "test_counter"\n',
        "rayClusterSpec": {"rayVersion": "2.46.0", "headGroupSpec": head, "workerGroupSpecs": [worker]},
    }
    if suspend:
        spec["suspend"] = True
    if shutdown_after_job_finishes:
        spec["shutdownAfterJobFinishes"] = True
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


def pods(core: client.CoreV1Api, namespace: str, selector: str) -> list[client.V1Pod]:
    items: list[client.V1Pod] = core.list_namespaced_pod(namespace, label_selector=selector).items
    return items


def running_on_kwok(core: client.CoreV1Api, pod: client.V1Pod) -> bool:
    """Running, on one of the fake nodes KWOK plays (the annotation hack/cluster.sh's kwok manages)."""
    if pod.status.phase != "Running" or not pod.spec.node_name:
        return False
    annotations = core.read_node(pod.spec.node_name).metadata.annotations or {}
    return bool(annotations.get("kwok.x-k8s.io/node") == "fake")


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for c in obj.get("status", {}).get("conditions") or []:
        if c.get("type") == kind:
            status: str = c.get("status", "")
            return status
    return None


# -- PyTorchJob -------------------------------------------------------------------------------


def pytorchjob(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    group, version, plural = KUBEFLOW
    obj: dict[str, Any] = custom.get_namespaced_custom_object(group, version, namespace, plural, name)
    return obj


def create_pytorchjob(custom: client.CustomObjectsApi, namespace: str, body: dict[str, Any]) -> None:
    group, version, plural = KUBEFLOW
    custom.create_namespaced_custom_object(group, version, namespace, plural, body)


def replica_pods(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, list[client.V1Pod]]:
    """The job's pods by replica type (training-operator's labels), only those present."""
    by_type: dict[str, list[client.V1Pod]] = {}
    for pod in pods(core, namespace, f"training.kubeflow.org/job-name={name}"):
        by_type.setdefault(pod.metadata.labels.get("training.kubeflow.org/replica-type", ""), []).append(pod)
    return by_type


def wait_replicas_running(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, list[client.V1Pod]]:
    def all_running() -> dict[str, list[client.V1Pod]] | None:
        by_type = replica_pods(core, namespace, name)
        everyone = [p for group in by_type.values() for p in group]
        if len(everyone) == 2 and all(running_on_kwok(core, p) for p in everyone):
            return by_type
        return None

    return wait_for(all_running, TIMEOUT, f"PyTorchJob {name}'s master and worker to run")


def test_pytorchjob_gets_its_pods_and_services_and_they_run(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    create_pytorchjob(custom, namespace, pytorch_simple("pytorch-simple"))

    by_type = wait_replicas_running(core, namespace, "pytorch-simple")

    assert sorted(by_type) == ["master", "worker"]
    assert [p.metadata.name for p in by_type["master"]] == ["pytorch-simple-master-0"]
    assert [p.metadata.name for p in by_type["worker"]] == ["pytorch-simple-worker-0"]
    # The worker finds the master by its Service's name, which the controller writes into its env.
    env = {e.name: e.value for e in by_type["worker"][0].spec.containers[0].env or []}
    assert env.get("MASTER_ADDR") == "pytorch-simple-master-0"
    services = {s.metadata.name for s in core.list_namespaced_service(namespace).items}
    assert {"pytorch-simple-master-0", "pytorch-simple-worker-0"} <= services
    wait_for(
        lambda: condition(pytorchjob(custom, namespace, "pytorch-simple"), "Running") == "True",
        TIMEOUT,
        "PyTorchJob pytorch-simple to report Running",
    )


def test_suspended_pytorchjob_gets_no_pods_until_resumed(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    create_pytorchjob(custom, namespace, pytorch_simple("held", suspend=True))

    # Suspended is the controller's answer to this very spec: it has reconciled it, and made nothing.
    wait_for(
        lambda: condition(pytorchjob(custom, namespace, "held"), "Suspended") == "True",
        TIMEOUT,
        "PyTorchJob held to report Suspended",
    )
    assert replica_pods(core, namespace, "held") == {}
    assert not core.list_namespaced_service(namespace, label_selector="training.kubeflow.org/job-name=held").items

    group, version, plural = KUBEFLOW
    custom.patch_namespaced_custom_object(
        group, version, namespace, plural, "held", {"spec": {"runPolicy": {"suspend": False}}}
    )

    assert sorted(wait_replicas_running(core, namespace, "held")) == ["master", "worker"]


# -- RayJob -----------------------------------------------------------------------------------


def rayjob(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = custom.get_namespaced_custom_object(RAY, "v1", namespace, "rayjobs", name)
    return obj


def create_rayjob(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, body: dict[str, Any]
) -> None:
    """The RayJob and the ConfigMap its head mounts (KWOK never reads it; the sample has one)."""
    name = body["metadata"]["name"]
    code = {"sample_code.py": "import ray\nray.init()\n"}
    core.create_namespaced_config_map(namespace, {"metadata": {"name": f"{name}-code"}, "data": code})
    custom.create_namespaced_custom_object(RAY, "v1", namespace, "rayjobs", body)


def rayclusters(custom: client.CustomObjectsApi, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = custom.list_namespaced_custom_object(RAY, "v1", namespace, "rayclusters")["items"]
    return items


def deployment_status(custom: client.CustomObjectsApi, namespace: str, name: str) -> str | None:
    status: str | None = rayjob(custom, namespace, name).get("status", {}).get("jobDeploymentStatus")
    return status


def wait_ray_nodes_running(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, job: str
) -> dict[str, list[client.V1Pod]]:
    """The RayJob's RayCluster's pods by node type (head, worker), once all of them run.

    KWOK completes the submitter Job's pod at once, and with no dashboard to ask, KubeRay fails the
    RayJob 30 s later; the RayCluster's pods run from before the submitter exists, so a wait sees them.
    """

    def all_running() -> dict[str, list[client.V1Pod]] | None:
        cluster = rayjob(custom, namespace, job).get("status", {}).get("rayClusterName")
        if not cluster:
            return None
        by_type: dict[str, list[client.V1Pod]] = {}
        for pod in pods(core, namespace, f"ray.io/cluster={cluster}"):
            by_type.setdefault(pod.metadata.labels.get("ray.io/node-type", ""), []).append(pod)
        everyone = [p for group in by_type.values() for p in group]
        if len(everyone) == 2 and all(running_on_kwok(core, p) for p in everyone):
            return by_type
        return None

    return wait_for(all_running, TIMEOUT, f"RayJob {job}'s head and worker to run")


def test_rayjob_makes_a_raycluster_whose_head_and_worker_run(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    create_rayjob(core, custom, namespace, rayjob_sample("rayjob-sample"))

    by_type = wait_ray_nodes_running(core, custom, namespace, "rayjob-sample")

    assert sorted(by_type) == ["head", "worker"]
    assert [p.metadata.labels["ray.io/group"] for p in by_type["worker"]] == ["small-group"]
    (cluster,) = rayclusters(custom, namespace)
    owners = [o["kind"] for o in cluster["metadata"].get("ownerReferences", [])]
    assert owners == ["RayJob"]
    assert cluster["metadata"]["name"] == rayjob(custom, namespace, "rayjob-sample")["status"]["rayClusterName"]


def test_suspended_rayjob_makes_no_raycluster_until_resumed(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    create_rayjob(core, custom, namespace, rayjob_sample("held", suspend=True, shutdown_after_job_finishes=True))

    wait_for(
        lambda: deployment_status(custom, namespace, "held") == "Suspended",
        TIMEOUT,
        "RayJob held to be Suspended",
    )
    assert rayclusters(custom, namespace) == []
    assert not core.list_namespaced_pod(namespace).items

    custom.patch_namespaced_custom_object(RAY, "v1", namespace, "rayjobs", "held", {"spec": {"suspend": False}})

    assert sorted(wait_ray_nodes_running(core, custom, namespace, "held")) == ["head", "worker"]


def test_rayjob_can_be_suspended_only_if_its_cluster_goes_when_it_ends(
    custom: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str
) -> None:
    """KubeRay v1.5.0 refuses `suspend` unless shutdownAfterJobFinishes is true, so holding a RayJob
    means setting both. The refusal is a ValidationFailed status (resuming the job later does not
    lift it, seen by hand), and no RayCluster."""
    create_rayjob(core, custom, namespace, rayjob_sample("held", suspend=True))

    wait_for(
        lambda: deployment_status(custom, namespace, "held") == "ValidationFailed",
        TIMEOUT,
        "RayJob held to fail validation",
    )
    assert "shutdownAfterJobFinishes" in rayjob(custom, namespace, "held")["status"]["message"]
    assert rayclusters(custom, namespace) == []
