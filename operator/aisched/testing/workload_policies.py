"""The chart's workload policies in force on the local cluster, for one test namespace.

`workload_policies(cluster, namespace)` applies the MutatingAdmissionPolicies that hold labelled
workloads and gate their pods (templates/admission/workload-gate.yaml) and the
ValidatingAdmissionPolicies that guard them (workload-guard.yaml), as the chart renders them,
with two changes: every binding matches NAMESPACE only, so tests on the same cluster are not
held, and the operator's ServiceAccount is replaced by the identity the test's kubectl runs as,
which then plays the operator (it may unsuspend, lift the gate, write aisched.io/ keys). It
waits until the API server applies each of them, and removes them afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from aisched.policy.workloads.model import ADMISSION_GATE, QUEUE_LABEL
from aisched.testing.cluster import REPO_ROOT, TIMEOUT, LocalCluster, wait_for
from aisched.testing.versions import pinned_version

TEMPLATES = ("templates/admission/workload-gate.yaml", "templates/admission/workload-guard.yaml")
CHART_OPERATOR = "system:serviceaccount:aisched-system:aisched"
# Someone who may do anything but is not the operator: what the guard refuses, it refuses them.
PROBE_USER = ("--as=aisched-policy-probe", "--as-group=system:masters")
PROBE_POD = "aisched-policy-probe"


CHART = REPO_ROOT / "helm" / "aisched"


def _ok(result: Any) -> str:
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, result.args))}\n{result.stderr}")
    return str(result.stdout)


def _render(cluster: LocalCluster, set_values: tuple[str, ...], show_only: str) -> list[dict[str, Any]]:
    """What `helm template` renders of the chart's SHOW_ONLY template, with SET_VALUES."""
    args = ["template", "aisched", str(CHART), "--namespace", "aisched-system", "--show-only", show_only]
    args += ["--kube-version", pinned_version("KUBERNETES_VERSION")]
    # What `helm install` learns of the cluster itself: whether it serves PodGroups (the gate policy names a
    # gang's pods into one only then).
    served = cluster.kubectl("get", "--raw", "/apis/scheduling.k8s.io/v1beta1")
    if served.returncode == 0 and '"podgroups"' in served.stdout:
        args += ["--api-versions", "scheduling.k8s.io/v1beta1/PodGroup"]
    for item in set_values:
        args += ["--set", item]
    return [doc for doc in yaml.safe_load_all(_ok(cluster.run("helm", *args))) if doc]


def admin_identity(cluster: LocalCluster) -> str:
    """The user name the test's kubectl (and the API client) act as."""
    return _ok(cluster.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")).strip()


def bound_to(objects: list[dict[str, Any]], namespace: str, operator: str) -> list[dict[str, Any]]:
    """OBJECTS renamed for NAMESPACE, their bindings matching it alone, OPERATOR in the chart's
    operator's place."""
    text = json.dumps(objects).replace(CHART_OPERATOR, operator)
    bound: list[dict[str, Any]] = json.loads(text)
    for obj in bound:
        obj["metadata"]["name"] += f"-{namespace}"
        if obj["kind"].endswith("Binding"):
            obj["spec"]["policyName"] += f"-{namespace}"
            selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            obj["spec"]["matchResources"] = {"namespaceSelector": selector}
    return bound


def _labelled(kind: str, name: str, spec: dict[str, Any], api_version: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "labels": {QUEUE_LABEL: "probe"}},
        "spec": spec,
    }


def _probes(cluster: LocalCluster, namespace: str) -> dict[str, Callable[[], bool]]:
    """A check per policy the chart names so (the native kinds'), true once the API server applies
    it; in order: the gate's guard probes a pod made gated."""
    pod_spec = {"containers": [{"name": "c", "image": "busybox"}]}
    template = {"metadata": {"labels": {"app": "probe"}}, "spec": pod_spec}
    selector = {"matchLabels": {"app": "probe"}}

    def dry_run(obj: dict[str, Any], *user: str) -> Any:
        args = ("create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-")
        return cluster.kubectl(*user, *args, input=yaml.safe_dump(obj))

    def created(obj: dict[str, Any]) -> dict[str, Any]:
        result = dry_run(obj)
        return json.loads(result.stdout) if result.returncode == 0 else {}

    def job_held() -> bool:
        job = _labelled("Job", "probe", {"template": {**template, "spec": {**pod_spec, "restartPolicy": "Never"}}})
        return created({**job, "apiVersion": "batch/v1"}).get("spec", {}).get("suspend") is True

    def template_labelled(kind: str) -> Callable[[], bool]:
        obj = _labelled(kind, "probe", {"selector": selector, "template": template}, "apps/v1")
        return lambda: (
            QUEUE_LABEL in created(obj).get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
        )

    def pod_gated() -> bool:
        gates = created(_labelled("Pod", "probe", pod_spec)).get("spec", {}).get("schedulingGates", [])
        return {"name": ADMISSION_GATE} in gates

    def workloads_guarded() -> bool:
        job = _labelled("Job", "probe", {"template": {**template, "spec": {**pod_spec, "restartPolicy": "Never"}}})
        job["apiVersion"] = "batch/v1"
        job["metadata"]["annotations"] = {"aisched.io/probe": "forged"}
        result = dry_run(job, *PROBE_USER)
        return result.returncode != 0 and "workload-guard" in result.stderr

    def gate_guarded() -> bool:
        if cluster.kubectl("get", "pod", PROBE_POD, "-n", namespace).returncode != 0:
            cluster.kubectl(
                "create", "-n", namespace, "-f", "-", input=yaml.safe_dump(_labelled("Pod", PROBE_POD, pod_spec))
            )
        ungate = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])
        result = cluster.kubectl(
            *PROBE_USER, "patch", "pod", PROBE_POD, "-n", namespace, "--dry-run=server", "--type=json", "-p", ungate
        )
        return result.returncode != 0 and "admission-gate" in result.stderr

    return {
        "hold-jobs": job_held,
        "hold-deployments": template_labelled("Deployment"),
        "hold-statefulsets": template_labelled("StatefulSet"),
        "gate-pods": pod_gated,
        "workload-guard": workloads_guarded,
        "admission-gate": gate_guarded,
    }


@contextmanager
def workload_policies(cluster: LocalCluster, namespace: str, *set_values: str) -> Iterator[None]:
    """The chart's workload policies (with SET_VALUES, `helm --set` style) in force in NAMESPACE,
    the test's own identity as the operator; removed on exit."""
    objects = [obj for show in TEMPLATES for obj in _render(cluster, set_values, show)]
    if not objects:
        raise RuntimeError("the chart rendered no workload policies (workloads.enabled, Kubernetes 1.36+)")
    manifest = yaml.safe_dump_all(bound_to(objects, namespace, admin_identity(cluster)))
    rendered = {obj["metadata"]["name"] for obj in objects}
    _ok(cluster.kubectl("apply", "-f", "-", input=manifest))
    try:
        for policy, probe in _probes(cluster, namespace).items():  # the API server picks policies up from a watch
            if any(name.endswith(f"-{policy}") for name in rendered):
                wait_for(probe, TIMEOUT, f"policy {policy} in force in {namespace}")
        cluster.kubectl("delete", "pod", PROBE_POD, "-n", namespace, "--ignore-not-found", "--wait=false")
        yield
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false", input=manifest)
