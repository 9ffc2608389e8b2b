"""Orphans that keep nodes full (#37), against the real API server with the operator running.

The tenant holds the built-in `edit` role in its namespace. With the chart's pod policies in force
it can neither take the operator's labels, annotations, owner references or finalizer off a worker
nor write its own; the garbage collector still orphans a worker when the tenant deletes its job
with `--cascade=orphan`, and the operator then deletes the worker itself. With the policies off,
a worker stripped of its labels, or of its job label, owners and finalizer before its job is
deleted, is deleted by the operator all the same (policy/stray_workers.py).

The local operator runs as the cluster's administrator, not as the chart's ServiceAccount: the
policies are applied as the chart renders them with that one identity put in the ServiceAccount's
place, and bound to the test's namespace only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from aisched.controller.training.stray_workers import STRAY_WORKER_DELETED
from aisched.policy.stray_workers import ORPHAN_GRACE
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, get_object, wait_for, wait_phase, workers
from tests.builders import a_training_job
from tests.tools.binaries import render

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
CHART_OPERATOR = "system:serviceaccount:aisched-system:aisched"
POLICIES = ("templates/admission/worker-labels.yaml", "templates/admission/operator-objects.yaml")
# The job's deletion reaches the operator, then the collector's grace, then a pass of its loop.
TAKEN_BACK = ORPHAN_GRACE.total_seconds() + TIMEOUT
Tenant = Callable[..., Any]


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


@pytest.fixture
def tenant(cluster: LocalCluster, namespace: str) -> Tenant:
    """kubectl as NAMESPACE's tenant: a ServiceAccount with the built-in edit role there, and the
    rights on our kinds that the chart aggregates into it (the chart is not installed here)."""
    ok(cluster.kubectl("-n", namespace, "create", "serviceaccount", "tenant"))
    subject = f"--serviceaccount={namespace}:tenant"
    ok(cluster.kubectl("-n", namespace, "create", "rolebinding", "tenant-edit", "--clusterrole=edit", subject))
    verbs = "--verb=get,list,watch,create,update,patch,delete"
    ok(cluster.kubectl("-n", namespace, "create", "role", "tenant-jobs", verbs, "--resource=trainingjobs.aisched.io"))
    ok(cluster.kubectl("-n", namespace, "create", "rolebinding", "tenant-jobs", "--role=tenant-jobs", subject))

    def as_tenant(*args: str, obj: dict[str, Any] | None = None) -> Any:
        user = f"--as=system:serviceaccount:{namespace}:tenant"
        return cluster.kubectl(user, "-n", namespace, *args, input=yaml.safe_dump(obj) if obj else None)

    assert as_tenant("auth", "can-i", "patch", "pods").stdout.strip() == "yes"
    return as_tenant


@pytest.fixture
def pod_policies(cluster: LocalCluster, namespace: str, tenant: Tenant) -> Iterator[None]:
    operator = ok(cluster.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")).strip()
    objects = [obj for show in POLICIES for obj in render(show_only=show)]
    for obj in objects:
        if obj["kind"] == "ValidatingAdmissionPolicy":
            for condition in obj["spec"]["matchConditions"]:
                condition["expression"] = condition["expression"].replace(CHART_OPERATOR, operator)
        else:
            selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            obj["spec"]["matchResources"] = {"namespaceSelector": selector}
        obj["metadata"]["name"] += f"-{namespace}"
        if "policyName" in obj["spec"]:
            obj["spec"]["policyName"] += f"-{namespace}"
    manifest = yaml.safe_dump_all(objects)
    ok(cluster.kubectl("apply", "-f", "-", input=manifest))
    forged = a_pod("forged", {"aisched.io/kind": "TrainingJob"})

    def in_force() -> bool:  # the API server picks policies up from a watch: wait until it refuses
        result = tenant("create", "--dry-run=server", "-f", "-", obj=forged)
        return result.returncode != 0 and "aisched.io/" in result.stderr

    wait_for(in_force, TIMEOUT, "the pod policies to be in force")
    yield
    cluster.kubectl("delete", "-f", "-", "--wait=false", input=manifest)


def a_pod(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def a_running_worker(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    apply(cluster, namespace, a_training_job(name).gpus(1).obj())
    wait_phase(cluster, namespace, name, "Running")
    (worker,) = workers(cluster, namespace, name)
    return worker


def refused(result: Any, because: str) -> None:
    assert result.returncode != 0, f"the API server took it: {result.stdout}"
    assert because in result.stderr, result.stderr


def taken_back(cluster: LocalCluster, namespace: str, pod: str, timeout: float = TAKEN_BACK) -> None:
    """POD is deleted (or being deleted) within TIMEOUT."""
    wait_for(
        lambda: (
            "deletionTimestamp" in get_object(cluster, "pod", pod, namespace).get("metadata", {"deletionTimestamp": 1})
        ),
        timeout,
        f"pod {pod} to be deleted",
    )


def test_a_tenant_cannot_strip_or_forge_the_operators_word_on_a_worker(
    cluster: LocalCluster, namespace: str, tenant: Tenant, pod_policies: None
) -> None:
    pod = a_running_worker(cluster, namespace, "j")["metadata"]["name"]

    refused(tenant("label", "pod", pod, "aisched.io/job-name-"), "cannot be removed")
    refused(
        tenant("label", "pod", pod, "aisched.io/kind-", "aisched.io/job-name-", "aisched.io/rank-"), "cannot be removed"
    )
    refused(tenant("annotate", "pod", pod, "aisched.io/gpu-share=gpu-0,10,1"), "annotations under aisched.io/")
    for path, because in (
        ("/metadata/finalizers", "checkpoint-report"),
        ("/metadata/ownerReferences", "ownerReferences"),
    ):
        patch = json.dumps([{"op": "remove", "path": path}])
        refused(tenant("patch", "pod", pod, "--type=json", "-p", patch), because)
    refused(
        tenant("create", "-f", "-", obj=a_pod("mine", {"aisched.io/kind": "TrainingJob"})), "labels under aisched.io/"
    )
    annotated = a_pod("mine", {}, annotations={"aisched.io/gpu-share": "gpu-0,10,1"})
    refused(tenant("create", "-f", "-", obj=annotated), "annotations under aisched.io/")
    ok(tenant("label", "pod", pod, "team=a"))  # its own labels are its own
    if tenant("auth", "can-i", "create", "resourceclaimtemplates.resource.k8s.io").stdout.strip() == "yes":
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "j-g2-w0"},
            "spec": {"spec": {}},
        }
        refused(tenant("create", "-f", "-", obj=template), "which only the aisched operator makes")
    assert "deletionTimestamp" not in get_object(cluster, "pod", pod, namespace)["metadata"]

    # Deleted with its pods orphaned: the garbage collector takes the owner reference off, and the
    # operator deletes the worker, which would otherwise run on uncharged.
    ok(tenant("delete", "trainingjob", "j", "--cascade=orphan", "--wait=false"))
    wait_for(lambda: not get_object(cluster, "trainingjob", "j", namespace), TIMEOUT, "the job to go")
    taken_back(cluster, namespace, pod)


def test_the_operator_deletes_a_worker_stripped_of_its_labels(
    cluster: LocalCluster, namespace: str, tenant: Tenant
) -> None:
    pod = a_running_worker(cluster, namespace, "s")["metadata"]["name"]
    ok(
        tenant(
            "label",
            "pod",
            pod,
            "aisched.io/kind-",
            "aisched.io/job-name-",
            "aisched.io/rank-",
            "aisched.io/gang-generation-",
        )
    )
    taken_back(cluster, namespace, pod, TIMEOUT)

    def told() -> bool:
        events = json.loads(ok(cluster.kubectl("get", "events", "-n", namespace, "-o", "json")))["items"]
        return any(e.get("reason") == STRAY_WORKER_DELETED and pod in e.get("message", "") for e in events)

    wait_for(told, TIMEOUT, "the job's StrayWorkerDeleted event")


def test_the_operator_deletes_a_worker_stripped_of_its_owners_whose_job_was_deleted(
    cluster: LocalCluster, namespace: str, tenant: Tenant
) -> None:
    pod = a_running_worker(cluster, namespace, "o")["metadata"]["name"]
    strip = [{"op": "remove", "path": "/metadata/ownerReferences"}, {"op": "remove", "path": "/metadata/finalizers"}]
    ok(tenant("patch", "pod", pod, "--type=json", "-p", json.dumps(strip)))
    ok(tenant("delete", "trainingjob", "o", "--wait=false"))
    wait_for(lambda: not get_object(cluster, "trainingjob", "o", namespace), TIMEOUT, "the job to go")
    ok(tenant("label", "pod", pod, "aisched.io/job-name-"))  # no job's by its labels now, and no collector's
    taken_back(cluster, namespace, pod)
