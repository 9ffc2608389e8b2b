"""The chart's workload policies on the real API server, with no operator running.

A Job, PyTorchJob, RayJob or RayCluster charged to a queue (its label, or its namespace's
default) is stored suspended with the label in every pod template; once the test's admin (the
operator's stand-in, aisched.testing.workload_policies) unsuspends a Job, the Job
controller's pods are made gated, as are a labelled Deployment's. What carries no label is left
alone. A tenant with the built-in `edit` role cannot start a held Job, lift a pod's gate, or write
the operator's aisched.io/ keys; it may change or remove the queue label, and a Job's template
keeps the label while it is held.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from aisched.policy.workloads.model import ADMISSION_GATE, DEFAULT_QUEUE_NAMESPACE_LABEL, QUEUE_LABEL
from aisched.testing.cluster import TIMEOUT, LocalCluster, bin_dir, get_object, list_objects, wait_for
from aisched.testing.operator import OperatorProcess
from aisched.testing.workload_policies import PROBE_USER, workload_policies

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def no_operator(operator: OperatorProcess) -> Iterator[None]:
    """These tests play the operator's part themselves (the admin unsuspends a Job, lifts a gate): the
    session's operator would act on the same objects (suspend a Job it did not admit), so it is
    stopped while they run, and started again after."""
    operator.stop()
    try:
        yield
    finally:
        operator.start()


Tenant = Callable[..., Any]
POD_SPEC: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
# The CRDs of the training-operator and KubeRay releases hack/build-k8s-binaries.sh fetched.
FRAMEWORK_CRDS = (
    "training-operator-crds/kubeflow.org_pytorchjobs.yaml",
    "kuberay-operator-crds/ray.io_rayclusters.yaml",
)


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


def refused(result: Any, because: str) -> None:
    assert result.returncode != 0, f"the API server took it: {result.stdout}"
    assert because in result.stderr and "Forbidden" in result.stderr, result.stderr


def create(cluster: LocalCluster, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    """OBJ as the API server stored it."""
    created = ok(cluster.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=yaml.safe_dump(obj)))
    stored: dict[str, Any] = json.loads(created)
    return stored


def a_job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Job whose template has no metadata at all: the policy must make it."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {"parallelism": 2, "template": {"spec": {**POD_SPEC, "restartPolicy": "Never"}}},
    }


def a_pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": POD_SPEC}


def template_labels(template: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = template.get("metadata", {}).get("labels", {})
    return labels


def gates(pod: dict[str, Any]) -> list[str]:
    return [gate["name"] for gate in pod["spec"].get("schedulingGates", [])]


def pods_of(cluster: LocalCluster, namespace: str, selector: str, count: int) -> list[dict[str, Any]]:
    return wait_for(
        lambda: found if len(found := list_objects(cluster, "pods", namespace, selector)) >= count else None,
        TIMEOUT,
        f"{count} pods of {selector}",
    )


@pytest.fixture
def held(cluster: LocalCluster, namespace: str) -> Iterator[None]:
    with workload_policies(cluster, namespace):
        yield


@pytest.fixture
def tenant(cluster: LocalCluster, namespace: str) -> Tenant:
    """kubectl as NAMESPACE's tenant: a ServiceAccount with the built-in edit role there."""
    ok(cluster.kubectl("-n", namespace, "create", "serviceaccount", "tenant"))
    subject = f"--serviceaccount={namespace}:tenant"
    ok(cluster.kubectl("-n", namespace, "create", "rolebinding", "tenant-edit", "--clusterrole=edit", subject))

    def as_tenant(*args: str, obj: dict[str, Any] | None = None) -> Any:
        user = f"--as=system:serviceaccount:{namespace}:tenant"
        return cluster.kubectl(user, "-n", namespace, *args, input=yaml.safe_dump(obj) if obj else None)

    assert as_tenant("auth", "can-i", "patch", "jobs.batch").stdout.strip() == "yes"
    return as_tenant


@pytest.fixture(scope="module")
def framework_crds(cluster: LocalCluster) -> None:
    """PyTorchJob's, RayCluster's and RayJob's CRDs, established. The test cluster installs them with their
    controllers (hack/cluster.sh, AISCHED_FRAMEWORKS=1); applied again all the same, they are left there:
    the session's other tests run those controllers on them."""
    paths = [str(bin_dir() / crd) for crd in FRAMEWORK_CRDS]
    files = [arg for path in paths for arg in ("-f", path)]
    ok(cluster.kubectl("apply", "--server-side", "--force-conflicts", *files))
    ok(cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *files))


@pytest.mark.usefixtures("held")
def test_a_labelled_job_is_stored_suspended_and_its_pods_are_made_gated(cluster: LocalCluster, namespace: str) -> None:
    job = create(cluster, namespace, a_job("train", {QUEUE_LABEL: "research"}))
    assert job["spec"]["suspend"] is True
    assert template_labels(job["spec"]["template"])[QUEUE_LABEL] == "research"
    assert not list_objects(cluster, "pods", namespace, "job-name=train")

    # The operator admits it: the Job controller makes its pods, each with the label and the gate.
    ok(cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":false}}'))
    pods = pods_of(cluster, namespace, "job-name=train", 2)
    for pod in pods:
        assert pod["metadata"]["labels"][QUEUE_LABEL] == "research"
        assert ADMISSION_GATE in gates(pod), pod["metadata"]["name"]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert all(pod["status"].get("phase") == "Pending" and "nodeName" not in pod["spec"] for pod in pods)


@pytest.mark.usefixtures("held")
def test_what_carries_no_label_is_left_alone(cluster: LocalCluster, namespace: str) -> None:
    job = create(cluster, namespace, a_job("plain"))
    assert not job["spec"].get("suspend")
    assert QUEUE_LABEL not in template_labels(job["spec"]["template"])
    pod = create(cluster, namespace, a_pod("plain", {"app": "web"}))
    assert gates(pod) == []
    assert all(ADMISSION_GATE not in gates(made) for made in pods_of(cluster, namespace, "job-name=plain", 2))


@pytest.mark.usefixtures("held")
def test_the_namespace_default_queue_is_written_on_workloads_that_name_none(
    cluster: LocalCluster, namespace: str
) -> None:
    ok(cluster.kubectl("label", "namespace", namespace, f"{DEFAULT_QUEUE_NAMESPACE_LABEL}=team-a"))
    attempts = iter(range(1_000))

    def created_held() -> dict[str, Any] | None:  # the policy reads namespaces from a watch: a moment late
        job = create(cluster, namespace, a_job(f"default-{next(attempts)}"))
        return job if job["spec"].get("suspend") else None

    job = wait_for(created_held, TIMEOUT, "the namespace's default queue to reach the policy", interval=1)
    assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert template_labels(job["spec"]["template"])[QUEUE_LABEL] == "team-a"
    # A label of its own wins over the namespace's default.
    own = create(cluster, namespace, a_job("own", {QUEUE_LABEL: "research"}))
    assert template_labels(own["spec"]["template"])[QUEUE_LABEL] == "research"
    # Plain pods are held by their own label only: a namespace's default makes no pod wait.
    assert gates(create(cluster, namespace, a_pod("plain"))) == []


@pytest.mark.usefixtures("held")
def test_a_tenant_cannot_start_a_held_job_lift_a_gate_or_write_the_operators_keys(
    cluster: LocalCluster, namespace: str, tenant: Tenant
) -> None:
    # A label beside the queue's: a Job whose labels are emptied is given its template's (the API's
    # defaulting), and the template carries the queue label, so removing an only label would not stick.
    ok(tenant("create", "-f", "-", obj=a_job("mine", {QUEUE_LABEL: "research", "app": "mine"})))
    assert get_object(cluster, "job", "mine", namespace)["spec"]["suspend"] is True
    refused(tenant("patch", "job", "mine", "--type=merge", "-p", '{"spec":{"suspend":false}}'), "spec.suspend")
    refused(tenant("annotate", "job", "mine", "aisched.io/placement={}"), "metadata.annotations")
    refused(tenant("label", "job", "mine", "aisched.io/admitted=true"), "metadata.labels")
    forged = a_job("forged", {QUEUE_LABEL: "research"})
    forged["metadata"]["annotations"] = {"aisched.io/placement": "{}"}
    refused(tenant("create", "-f", "-", obj=forged), "metadata.annotations")

    # Editing a held Job's template keeps it held: the label comes back.
    unlabel = json.dumps([{"op": "remove", "path": "/spec/template/metadata/labels/scheduling.aisched.io~1queue"}])
    ok(tenant("patch", "job", "mine", "--type=json", "-p", unlabel))
    assert template_labels(get_object(cluster, "job", "mine", namespace)["spec"]["template"])[QUEUE_LABEL] == "research"

    # The operator's word stands, and only the operator may take it back.
    ok(cluster.kubectl("annotate", "job", "mine", "-n", namespace, "aisched.io/placement={}"))
    refused(tenant("annotate", "job", "mine", "aisched.io/placement-"), "metadata.annotations")

    pod = json.loads(ok(tenant("create", "-o", "json", "-f", "-", obj=a_pod("mine", {QUEUE_LABEL: "research"}))))
    assert ADMISSION_GATE in gates(pod)
    ungate = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])
    refused(tenant("patch", "pod", "mine", "--type=json", "-p", ungate), "spec.schedulingGates")
    ok(cluster.kubectl("patch", "pod", "mine", "-n", namespace, "--type=json", "-p", ungate))

    # The queue label is the tenant's: changed, then removed, which takes the Job out of aisched.
    ok(tenant("label", "job", "mine", f"{QUEUE_LABEL}=other", "--overwrite"))
    refused(tenant("patch", "job", "mine", "--type=merge", "-p", '{"spec":{"suspend":false}}'), "spec.suspend")
    ok(tenant("label", "job", "mine", f"{QUEUE_LABEL}-"))
    ok(tenant("patch", "job", "mine", "--type=merge", "-p", '{"spec":{"suspend":false}}'))


@pytest.mark.usefixtures("held")
def test_a_labelled_deployments_pods_are_made_gated(cluster: LocalCluster, namespace: str) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve", "labels": {QUEUE_LABEL: "inference"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "serve"}},
            "template": {"metadata": {"labels": {"app": "serve"}}, "spec": POD_SPEC},
        },
    }
    stored = create(cluster, namespace, deployment)
    assert "suspend" not in stored["spec"]
    assert template_labels(stored["spec"]["template"])[QUEUE_LABEL] == "inference"
    for pod in pods_of(cluster, namespace, "app=serve", 2):
        assert pod["metadata"]["labels"][QUEUE_LABEL] == "inference"
        assert ADMISSION_GATE in gates(pod), pod["metadata"]["name"]


@pytest.mark.usefixtures("framework_crds", "held")
def test_a_pytorchjob_and_a_raycluster_are_stored_suspended_with_the_label_in_every_template(
    cluster: LocalCluster, namespace: str
) -> None:
    container = {"name": "pytorch", "image": "pytorch"}
    pytorchjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "labels": {QUEUE_LABEL: "research"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [container]}}},
                "Worker": {
                    "replicas": 3,
                    "template": {"metadata": {"labels": {"role": "w"}}, "spec": {"containers": [container]}},
                },
            }
        },
    }
    stored = created_held(cluster, namespace, pytorchjob, lambda spec: spec.get("runPolicy", {}).get("suspend"))
    assert stored["spec"]["runPolicy"]["suspend"] is True
    replicas = stored["spec"]["pytorchReplicaSpecs"]
    assert {kind: template_labels(spec["template"]).get(QUEUE_LABEL) for kind, spec in replicas.items()} == {
        "Master": "research",
        "Worker": "research",
    }
    assert template_labels(replicas["Worker"]["template"])["role"] == "w"

    ray = {"name": "ray", "image": "rayproject/ray"}
    raycluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "ray", "labels": {QUEUE_LABEL: "research"}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [ray]}}},
            "workerGroupSpecs": [
                {"groupName": "a", "rayStartParams": {}, "template": {"metadata": {}, "spec": {"containers": [ray]}}},
                {
                    "groupName": "b",
                    "rayStartParams": {},
                    "template": {"metadata": {"labels": {QUEUE_LABEL: "stale"}}, "spec": {"containers": [ray]}},
                },
            ],
        },
    }
    stored = created_held(cluster, namespace, raycluster, lambda spec: spec.get("suspend"))
    assert stored["spec"]["suspend"] is True
    templates = [stored["spec"]["headGroupSpec"]["template"]] + [
        g["template"] for g in stored["spec"]["workerGroupSpecs"]
    ]
    assert [template_labels(t).get(QUEUE_LABEL) for t in templates] == ["research"] * 3


def created_held(
    cluster: LocalCluster, namespace: str, obj: dict[str, Any], suspended: Callable[[dict[str, Any]], Any]
) -> dict[str, Any]:
    """OBJ as stored once the policy for its kind holds it: the API server may take a moment to
    match a resource whose CRD came after the policy (until then OBJ is stored unheld, and deleted)."""

    def attempt() -> dict[str, Any] | None:
        stored = create(cluster, namespace, obj)
        if suspended(stored["spec"]):
            return stored
        ok(cluster.kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], "-n", namespace, "--wait=true"))
        return None

    return wait_for(attempt, TIMEOUT, f"the {obj['kind']} policy to hold it", interval=1)


@pytest.mark.usefixtures("framework_crds", "held")
def test_a_rayjob_is_held_and_the_raycluster_kuberay_makes_for_it_is_not_held_again(
    cluster: LocalCluster, namespace: str
) -> None:
    ray = {"name": "ray", "image": "rayproject/ray"}
    cluster_spec = {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [ray]}}},
        "workerGroupSpecs": [{"groupName": "w", "rayStartParams": {}, "template": {"spec": {"containers": [ray]}}}],
    }
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "batch", "labels": {QUEUE_LABEL: "research"}},
        "spec": {"entrypoint": "python run.py", "rayClusterSpec": cluster_spec},
    }
    stored = created_held(cluster, namespace, rayjob, lambda spec: spec.get("suspend"))
    spec = stored["spec"]["rayClusterSpec"]
    templates = [spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"]]
    assert [template_labels(t).get(QUEUE_LABEL) for t in templates] == ["research"] * 2

    # KubeRay makes the RayJob's cluster with the RayJob's labels and annotations, as here.
    owner = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "batch", "uid": stored["metadata"]["uid"]}
    made = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "batch-raycluster",
            "labels": {QUEUE_LABEL: "research"},
            "annotations": {"aisched.io/placement": "{}"},
            "ownerReferences": [{**owner, "controller": True}],
        },
        "spec": spec,
    }
    # Made by someone not the operator (KubeRay's own identity), it is taken as it is: neither held
    # nor refused for the operator's annotation it copied.
    created = cluster.kubectl(
        *PROBE_USER, "create", "-n", namespace, "-o", "json", "-f", "-", input=yaml.safe_dump(made)
    )
    assert not json.loads(ok(created))["spec"].get("suspend")
