"""The chart on the local cluster's real API server: its rendering and the install bundle
pass a server-side dry run; `helm install`, `helm upgrade` and `helm uninstall` work in a
namespace that enforces the restricted Pod Security Standard; and the API server's access
reviews (`kubectl auth can-i`'s) show the operator's ServiceAccount can do exactly what
tests/operator_permissions.py lists, nothing else."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client

from aisched.testing.cluster import REPO_ROOT, LocalCluster, wait_for
from tests.operator_permissions import DEFAULT_PERMISSIONS, FORBIDDEN, LEASE_NAME, VERBS, allowed_verbs
from tests.paths import CHART, INSTALL_MANIFEST
from tests.tools.binaries import kubernetes_version

pytestmark = pytest.mark.integration
RELEASE = "aisched"
HELM_TIMEOUT = 300
CLUSTER_SCOPED_RESOURCES = {"nodes", "customresourcedefinitions", "queues", "queues/status", "namespaces"}
# What every authenticated user may do (system:basic-user, system:discovery, and since Kubernetes 1.37
# reading ClusterTrustBundles, which are public by design): not the chart's doing.
EVERYONE = {
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
    "selfsubjectreviews.authentication.k8s.io",
    "clustertrustbundles.certificates.k8s.io",
}


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{' '.join(map(str, result.args))}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def helm(cluster: LocalCluster, *args: str) -> str:
    return ok(cluster.run("helm", *args, timeout=HELM_TIMEOUT + 30))


def restricted_namespace(cluster: LocalCluster, name: str) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    ok(cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest)))


def get_json(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    result = cluster.kubectl("get", *args, "-o", "json")
    loaded: dict[str, Any] = json.loads(result.stdout) if result.returncode == 0 else {}
    return loaded


def chart_keeps_its_crds() -> bool:
    """Do the chart's CRDs survive `helm uninstall` (and with them every custom object)?"""
    return all(
        yaml.safe_load(path.read_text())["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep"
        for path in (CHART / "templates" / "crds").glob("*.yaml")
    )


@pytest.fixture
def release_namespace(cluster: LocalCluster) -> Iterator[str]:
    if not chart_keeps_its_crds():
        # Uninstalling would delete the CRDs the other tests share (test_chart.py fails on this).
        pytest.skip("the chart's CRDs lack helm.sh/resource-policy: keep")
    name = "aisched-helm-test"
    restricted_namespace(cluster, name)
    yield name
    cluster.run("helm", "uninstall", RELEASE, "-n", name, "--wait", timeout=HELM_TIMEOUT)
    cluster.kubectl("delete", "namespace", name, "--wait=false")


def server_dry_run(cluster: LocalCluster, manifest: str) -> str:
    return ok(
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=aisched-dry-run", "--dry-run=server",
            "-f", "-", input=manifest, timeout=120,
        )
    )  # fmt: skip


def test_rendered_chart_passes_a_server_side_dry_run(cluster: LocalCluster) -> None:
    namespace = "aisched-dry-run"
    restricted_namespace(cluster, namespace)
    try:
        rendered = helm(
            cluster, "template", RELEASE, str(CHART), "-n", namespace, "--kube-version", kubernetes_version(),
        )  # fmt: skip
        output = server_dry_run(cluster, rendered)
        assert "deployment.apps/aisched serverside-applied (server dry run)" in output
        assert output.count("(server dry run)") == len([d for d in yaml.safe_load_all(rendered) if d])
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_install_bundle_passes_a_server_side_dry_run(cluster: LocalCluster) -> None:
    documents = [doc for doc in yaml.safe_load_all(INSTALL_MANIFEST.read_text()) if doc]
    # A dry run creates nothing: the namespace the bundle makes first must exist for real.
    ok(cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(documents[0])))
    try:
        output = server_dry_run(cluster, INSTALL_MANIFEST.read_text())
        assert output.count("(server dry run)") == len(documents)
    finally:
        cluster.kubectl("delete", "namespace", documents[0]["metadata"]["name"], "--wait=false")


def test_install_upgrade_and_uninstall(cluster: LocalCluster, release_namespace: str) -> None:
    ns = release_namespace
    queue = "helm-test-queue"
    # --take-ownership: other tests may have applied the CRDs with kubectl already.
    # No queues yet: on a cluster new to the chart the Queue kind does not exist before its CRD.
    helm(
        cluster, "install", RELEASE, str(CHART), "-n", ns, "--wait", "--timeout", f"{HELM_TIMEOUT}s",
        "--take-ownership",
    )  # fmt: skip

    deployment = get_json(cluster, "deployment", RELEASE, "-n", ns)
    # Ready replicas in a namespace enforcing "restricted": the pods passed Pod Security admission.
    assert deployment["status"]["readyReplicas"] == 2
    for crd_name in ("trainingjobs.aisched.io", "inferenceservices.aisched.io", "queues.aisched.io"):
        annotations = get_json(cluster, "crd", crd_name)["metadata"]["annotations"]
        assert annotations["meta.helm.sh/release-name"] == RELEASE, f"{crd_name} is not upgraded with the chart"

    helm(
        cluster, "upgrade", RELEASE, str(CHART), "-n", ns, "--wait", "--timeout", f"{HELM_TIMEOUT}s",
        "--reuse-values", "--set", "settings.logLevel=DEBUG",
        "--set", f"queues[0].name={queue}", "--set", "queues[0].nominalGPUs=16",
    )  # fmt: skip
    status = json.loads(helm(cluster, "status", RELEASE, "-n", ns, "-o", "json"))
    assert (status["version"], status["info"]["status"]) == (2, "deployed")
    (container,) = get_json(cluster, "deployment", RELEASE, "-n", ns)["spec"]["template"]["spec"]["containers"]
    assert {"name": "AISCHED_LOG_LEVEL", "value": "DEBUG"} in container["env"]
    created = get_json(cluster, "queue", queue)
    assert created["spec"]["nominalGPUs"] == 16

    helm(
        cluster, "upgrade", RELEASE, str(CHART), "-n", ns, "--wait", "--timeout", f"{HELM_TIMEOUT}s",
        "--reuse-values", "--set", f"queues[0].name={queue}", "--set", "queues[0].nominalGPUs=32",
    )  # fmt: skip
    upgraded = get_json(cluster, "queue", queue)
    assert upgraded["spec"]["nominalGPUs"] == 32
    # Patched in place, never deleted and created again: the jobs queued in it keep their Queue.
    assert upgraded["metadata"]["uid"] == created["metadata"]["uid"]

    kept_crds = [
        get_json(cluster, "crd", f"{plural}.aisched.io") for plural in ("trainingjobs", "inferenceservices", "queues")
    ]
    helm(cluster, "uninstall", RELEASE, "-n", ns, "--wait", "--timeout", f"{HELM_TIMEOUT}s")
    assert not get_json(cluster, "deployment", RELEASE, "-n", ns)
    assert not get_json(cluster, "clusterrole", RELEASE)
    assert not get_json(cluster, "serviceaccount", RELEASE, "-n", ns)
    wait_for(
        lambda: not get_json(cluster, "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"], 60
    )
    for crd in kept_crds:  # kept, with every custom object in the cluster
        assert get_json(cluster, "crd", crd["metadata"]["name"])
    assert get_json(cluster, "queue", queue)["metadata"]["uid"] == created["metadata"]["uid"]  # kept too
    cluster.kubectl("delete", "queue", queue)


# -- RBAC -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def operator_account(cluster: LocalCluster) -> Iterator[tuple[str, str]]:
    """The chart's ServiceAccount and RBAC alone, in their own namespace: (namespace, account)."""
    namespace, release = "aisched-rbac-test", "rbac-probe"
    # can-i answers "no" for resources the API server does not know: our kinds must be defined.
    ok(cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO_ROOT / "crds")))
    restricted_namespace(cluster, namespace)
    templates = ["operator/serviceaccount.yaml", "rbac/clusterrole.yaml", "rbac/clusterrolebinding.yaml"]
    templates += ["rbac/role.yaml", "rbac/rolebinding.yaml"]
    show_only = [arg for template in templates for arg in ("--show-only", f"templates/{template}")]
    rendered = helm(
        cluster, "template", release, str(CHART), "-n", namespace, "--kube-version", kubernetes_version(), *show_only
    )
    ok(cluster.kubectl("apply", "-f", "-", input=rendered))
    yield namespace, f"{release}-aisched"
    cluster.kubectl("delete", "-f", "-", "--wait=false", input=rendered)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")


@dataclass(frozen=True)
class Question:
    verb: str
    group: str
    resource: str  # the plural
    name: str | None
    subresource: str
    namespace: str | None
    expected: bool

    def ask(self, authorization: client.AuthorizationV1Api, account: str, groups: list[str]) -> str | None:
        """None when the API server answers as expected, else what it said. A SubjectAccessReview asks
        what `kubectl auth can-i --as` asks, in one call and no process."""
        attributes = client.V1ResourceAttributes(
            verb=self.verb,
            group=self.group,
            resource=self.resource,
            subresource=self.subresource or None,
            name=self.name,
            namespace=self.namespace,
        )
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(user=account, groups=groups, resource_attributes=attributes)
        )
        allowed = bool(authorization.create_subject_access_review(review).status.allowed)
        if allowed == self.expected:
            return None
        target = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {target}/{self.name or ''} {self.subresource} in {self.namespace or 'cluster'}: {allowed}"


def matrix(own: str) -> list[Question]:
    """Every verb on every resource the operator uses or must not, here and in another namespace."""
    questions = []
    for group, resource in sorted({(p.group, p.resource) for p in DEFAULT_PERMISSIONS} | set(FORBIDDEN)):
        kind, _, subresource = resource.partition("/")
        namespaces: list[str | None] = [None] if resource in CLUSTER_SCOPED_RESOURCES else [own, "default"]
        names: list[str | None] = [None, LEASE_NAME, "someone-elses"] if resource == "leases" else [None]
        for namespace in namespaces:
            for name in names:
                allowed = allowed_verbs(group, resource, own_namespace=namespace == own, name=name)
                questions += [
                    Question(verb, group, kind, name, subresource, namespace, verb in allowed) for verb in VERBS
                ]
    return questions


def test_rbac_matrix_is_exactly_what_the_operator_needs(
    api_client: client.ApiClient, operator_account: tuple[str, str]
) -> None:
    own, name = operator_account
    account = f"system:serviceaccount:{own}:{name}"
    # The groups the API server gives a ServiceAccount's token (and `kubectl --as` its impersonation).
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{own}", "system:authenticated"]
    authorization = client.AuthorizationV1Api(api_client)
    questions = matrix(own)
    with ThreadPoolExecutor(max_workers=4) as pool:
        wrong = [answer for answer in pool.map(lambda q: q.ask(authorization, account, groups), questions) if answer]
    assert not wrong, f"{len(wrong)} of {len(questions)} answers differ:\n" + "\n".join(wrong)


def _listed_permissions(cluster: LocalCluster, account: str, namespace: str) -> set[tuple[str, str, str | None]]:
    """`kubectl auth can-i --list` as (resource.group[/sub], verb, resource name) triples."""
    output = ok(cluster.kubectl("auth", "can-i", "--list", f"--as={account}", "-n", namespace))
    triples = set()
    for line in output.splitlines()[1:]:
        match = re.match(r"^(\S+)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$", line)
        if not match:
            continue
        resource, urls, names, verbs = match.groups()
        if urls or resource in EVERYONE:
            continue
        for verb in verbs.split():
            for resource_name in names.split() or [None]:
                triples.add((resource, verb, resource_name))
    return triples


def test_can_i_list_shows_nothing_beyond_what_is_needed(
    cluster: LocalCluster, operator_account: tuple[str, str]
) -> None:
    own, name = operator_account
    account = f"system:serviceaccount:{own}:{name}"
    expected = set()
    for p in DEFAULT_PERMISSIONS:
        resource, _, sub = p.resource.partition("/")
        listed = (f"{resource}.{p.group}" if p.group else resource) + (f"/{sub}" if sub else "")
        expected |= {(listed, verb, p.resource_name) for verb in p.verbs}
    assert _listed_permissions(cluster, account, own) == expected
    elsewhere = {triple for triple in expected if not triple[0].startswith("leases.")}
    assert _listed_permissions(cluster, account, "default") == elsewhere
