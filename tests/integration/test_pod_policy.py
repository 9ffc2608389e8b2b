"""A tenant gets no more than its own rights (#27), against the real API server with the operator running.

The tenant is a ServiceAccount that may read its namespace (view) and write TrainingJobs and
InferenceServices, and may not create pods. Its attacks: a template that is privileged, in the
host's PID and network namespaces, with the host's root filesystem and another ServiceAccount;
and one with priorityClassName system-node-critical. The chart's admission policy refuses the
first at apply; in a namespace the administrator exempted from it, the queue's podPolicy refuses
it (Admitted=False, PodPolicyViolation, no pod). The CRD refuses the second. A queue that allows
it all, deliberately, runs it. Another tenant's plain job is admitted all the while.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from aisched.policy.pod_policy import POD_POLICY_VIOLATION
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, get_object, job, wait_for, wait_phase, workers
from tests.builders import a_queue, a_training_job, an_inference_service
from tests.tools.binaries import render

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
TENANT = "tenant"
EXEMPT = "aisched.io/privileged-workloads"
ATTACK_SPEC: dict[str, Any] = {
    "hostPID": True,
    "hostNetwork": True,
    "serviceAccountName": "deployer",
    "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    "containers": [
        {
            "name": "trainer",
            "image": "python:3.11-slim",
            "securityContext": {"privileged": True},
            "volumeMounts": [{"name": "root", "mountPath": "/host"}],
        }
    ],
}


def kubectl_as_tenant(cluster: LocalCluster, namespace: str, *args: str, obj: dict[str, Any] | None = None) -> Any:
    user = f"--as=system:serviceaccount:{namespace}:{TENANT}"
    return cluster.kubectl(user, "-n", namespace, *args, input=yaml.safe_dump(obj) if obj else None)


def ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    return str(result.stdout)


@pytest.fixture
def tenant(cluster: LocalCluster, namespace: str) -> str:
    """NAMESPACE's tenant: view, and write access to our kinds; the ServiceAccount it wants to be too."""
    rights = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "aisched-tenant", "namespace": namespace},
        "rules": [
            {
                "apiGroups": ["aisched.io"],
                "resources": ["trainingjobs", "inferenceservices"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            }
        ],
    }
    ok(cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(rights)))
    for account in (TENANT, "deployer"):
        ok(cluster.kubectl("-n", namespace, "create", "serviceaccount", account))
    subject = f"--serviceaccount={namespace}:{TENANT}"
    ok(cluster.kubectl("-n", namespace, "create", "rolebinding", "tenant-view", "--clusterrole=view", subject))
    ok(cluster.kubectl("-n", namespace, "create", "rolebinding", "tenant-jobs", "--role=aisched-tenant", subject))
    assert kubectl_as_tenant(cluster, namespace, "auth", "can-i", "create", "pods").stdout.strip() == "no"
    assert kubectl_as_tenant(cluster, namespace, "auth", "can-i", "create", "trainingjobs").stdout.strip() == "yes"
    return TENANT


@pytest.fixture
def admission_policy(cluster: LocalCluster, namespace: str) -> Iterator[None]:
    """The chart's ValidatingAdmissionPolicy and binding, as `helm template` renders them, in force."""
    objects = render(show_only="templates/admission/template-ceiling.yaml")
    manifest = yaml.safe_dump_all(objects)
    ok(cluster.kubectl("apply", "-f", "-", input=manifest))
    probe = a_training_job("probe").gpus(1).set("template.spec.hostNetwork", True).obj()

    def in_force() -> bool:  # the API server picks policies up from a watch: wait until it refuses
        result = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(probe))
        return result.returncode != 0 and "hostNetwork" in result.stderr

    wait_for(in_force, TIMEOUT, "the admission policy to be in force")
    yield
    cluster.kubectl("delete", "-f", "-", "--wait=false", input=manifest)


@pytest.fixture
def other_namespace(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    name = f"{namespace}-other"
    ok(cluster.kubectl("create", "namespace", name))
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


def admitted(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == "Admitted"), None)


def refused(cluster: LocalCluster, kind: str, namespace: str, name: str) -> dict[str, Any]:
    condition: dict[str, Any] = wait_for(
        lambda: (
            (c := admitted(get_object(cluster, kind, name, namespace)))
            and c["status"] == "False"
            and c["reason"] == POD_POLICY_VIOLATION
            and c
        ),
        TIMEOUT,
        f"{kind} {namespace}/{name} to be refused for its pod policy",
    )
    return condition


def test_a_tenant_gets_through_the_operator_no_more_than_its_own_rights(
    cluster: LocalCluster, namespace: str, other_namespace: str, tenant: str, admission_policy: None
) -> None:
    attack = a_training_job("attack").gpus(1).set("template.spec", ATTACK_SPEC).obj()
    priority = a_training_job("urgent").gpus(1).set("template.spec.priorityClassName", "system-node-critical").obj()

    # At the API server: the chart's admission policy, and the CRD's rule on priority.
    at_apply = kubectl_as_tenant(cluster, namespace, "apply", "-f", "-", obj=attack)
    assert at_apply.returncode != 0 and "hostNetwork, hostPID and hostIPC are not allowed" in at_apply.stderr
    at_apply = kubectl_as_tenant(cluster, namespace, "apply", "-f", "-", obj=priority)
    assert at_apply.returncode != 0
    assert "template.spec.priorityClassName is not allowed: the operator sets its pods' priority" in at_apply.stderr

    # The administrator exempts the namespace from the admission policy: the queue still holds.
    ok(cluster.kubectl("label", "namespace", namespace, f"{EXEMPT}=true"))
    service = an_inference_service("sniffer").set("template.spec.hostNetwork", True).obj()
    wait_for(
        lambda: kubectl_as_tenant(cluster, namespace, "apply", "-f", "-", obj=attack).returncode == 0,
        TIMEOUT,
        "the exempt namespace to take the attack's TrainingJob",
    )
    ok(kubectl_as_tenant(cluster, namespace, "apply", "-f", "-", obj=service))
    apply(cluster, other_namespace, a_training_job("plain").gpus(1).obj())  # another tenant's job

    condition = refused(cluster, "trainingjob", namespace, "attack")
    assert condition["message"].startswith("spec.template.spec.serviceAccountName: ServiceAccount deployer")
    assert "queue default does not allow (podPolicy level baseline)" in condition["message"]
    assert job(cluster, namespace, "attack")["status"]["phase"] == "Queued"
    assert "hostNetwork" in refused(cluster, "inferenceservice", namespace, "sniffer")["message"]
    wait_phase(cluster, other_namespace, "plain", "Running")
    pods = json.loads(ok(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json")))["items"]
    assert pods == [], [p["metadata"]["name"] for p in pods]
    assert get_object(cluster, "service", "sniffer", namespace) == {}
    plain = workers(cluster, other_namespace, "plain")[0]["spec"]
    assert "priorityClassName" not in plain and plain.get("priority", 0) == 0

    # A queue that allows all of it, deliberately, set by the administrator: the attack runs.
    trusted = a_queue(f"trusted-{namespace}", nominal_gpus=8).obj()
    trusted["spec"]["podPolicy"] = {
        "level": "privileged",
        "allowedServiceAccountNames": ["deployer"],
    }
    apply(cluster, "default", trusted)
    try:
        patch = {"spec": {"queue": trusted["metadata"]["name"]}}
        ok(
            kubectl_as_tenant(
                cluster, namespace, "patch", "trainingjob", "attack", "--type=merge", "-p", json.dumps(patch)
            )
        )
        wait_phase(cluster, namespace, "attack", "Running")
        (pod,) = workers(cluster, namespace, "attack")
        assert pod["spec"]["hostPID"] and pod["spec"]["serviceAccountName"] == "deployer"
    finally:
        cluster.kubectl("delete", "trainingjob", "attack", "-n", namespace, "--wait=false")
        cluster.kubectl("delete", "queue", trusted["metadata"]["name"], "--wait=false")
