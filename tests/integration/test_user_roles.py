"""The chart's user roles on the real API server: once aggregated into the built-in roles, a
namespace `edit` user submits a TrainingJob, a `view` user only reads it, and neither writes
status; Queues are read-only for everyone but the cluster administrator.

Only the rendered user roles are applied (no operator runs): kube-controller-manager's
clusterrole-aggregation controller copies their rules into view, edit and admin.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
import yaml

from aisched.testing.cluster import LocalCluster, wait_for
from tests.builders import a_training_job
from tests.paths import CHART
from tests.tools.binaries import kubernetes_version

pytestmark = pytest.mark.integration
RELEASE = "user-roles"
AGGREGATION_TIMEOUT = 60  # the aggregation controller reacts to a watch event; seconds at most


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{' '.join(map(str, result.args))}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def can_i(cluster: LocalCluster, user: str, verb: str, resource: str, namespace: str | None, *, sub: str = "") -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={user}"]
    args += ["-n", namespace] if namespace else []
    args += [f"--subresource={sub}"] if sub else []
    answer = cluster.kubectl(*args).stdout.strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


@pytest.fixture(scope="module")
def user_roles(cluster: LocalCluster, crds_installed: None) -> Iterator[None]:
    rendered = ok(
        cluster.run(
            "helm", "template", RELEASE, str(CHART), "--kube-version", kubernetes_version(),
            "--show-only", "templates/rbac/user-roles.yaml", timeout=120,
        )
    )  # fmt: skip
    ok(cluster.kubectl("apply", "-f", "-", input=rendered))
    yield
    cluster.kubectl("delete", "-f", "-", "--wait=false", input=rendered)


@pytest.fixture
def bound(cluster: LocalCluster, namespace: str, user_roles: None) -> Iterator[str]:
    """alice holds edit, bob view, dana admin in the namespace; carol views the whole cluster."""
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{user}-{role}", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
        for user, role in (("alice", "edit"), ("bob", "view"), ("dana", "admin"))
    ]
    carol_binding = f"carol-view-{namespace}"
    carol = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": carol_binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}],
    }
    manifest = yaml.safe_dump_all([*bindings, carol])
    ok(cluster.kubectl("apply", "-f", "-", input=manifest))
    wait_for(
        lambda: all(
            can_i(cluster, user, "list", "trainingjobs.aisched.io", namespace) for user in ("alice", "bob", "dana")
        ),
        AGGREGATION_TIMEOUT,
        "the user roles to be aggregated into view, edit and admin",
    )
    yield namespace
    cluster.kubectl("delete", "clusterrolebinding", carol_binding, "--wait=false")


def test_an_edit_user_submits_and_cancels_a_training_job(cluster: LocalCluster, bound: str) -> None:
    job = a_training_job("by-alice").replicas(1).gpus(1).namespace(bound).obj()
    ok(cluster.kubectl("create", "-f", "-", "--as=alice", input=json.dumps(job)))
    got = json.loads(ok(cluster.kubectl("get", "trainingjob", "by-alice", "-n", bound, "-o", "json", "--as=alice")))
    assert got["metadata"]["name"] == "by-alice"
    for verb in ("update", "patch", "delete", "deletecollection"):
        assert can_i(cluster, "alice", verb, "trainingjobs.aisched.io", bound), verb
    assert can_i(cluster, "alice", "create", "inferenceservices.aisched.io", bound)
    assert can_i(cluster, "alice", "patch", "inferenceservices.aisched.io", bound, sub="scale")
    ok(cluster.kubectl("delete", "trainingjob", "by-alice", "-n", bound, "--as=alice", "--wait=false"))


def test_a_view_user_only_reads(cluster: LocalCluster, bound: str) -> None:
    job = a_training_job("seen-by-bob").replicas(1).gpus(1).namespace(bound).obj()
    ok(cluster.kubectl("create", "-f", "-", input=json.dumps(job)))
    listed = json.loads(ok(cluster.kubectl("get", "trainingjobs", "-n", bound, "-o", "json", "--as=bob")))
    assert [item["metadata"]["name"] for item in listed["items"]] == ["seen-by-bob"]
    refused = cluster.kubectl("delete", "trainingjob", "seen-by-bob", "-n", bound, "--as=bob")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    other = a_training_job("by-bob").replicas(1).gpus(1).namespace(bound).obj()
    refused = cluster.kubectl("create", "-f", "-", "--as=bob", input=json.dumps(other))
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    for verb in ("create", "update", "patch", "delete"):
        for kind in ("trainingjobs", "inferenceservices"):
            assert not can_i(cluster, "bob", verb, f"{kind}.aisched.io", bound), (verb, kind)
    assert can_i(cluster, "bob", "watch", "inferenceservices.aisched.io", bound)


def test_no_user_writes_status(cluster: LocalCluster, bound: str) -> None:
    for user in ("alice", "bob", "dana", "carol"):
        for kind in ("trainingjobs", "inferenceservices"):
            for verb in ("update", "patch"):
                assert not can_i(cluster, user, verb, f"{kind}.aisched.io", bound, sub="status"), (user, kind, verb)
    # Admin of the namespace is edit and more: it submits jobs, and still writes no status.
    assert can_i(cluster, "dana", "create", "trainingjobs.aisched.io", bound)


def test_queues_are_read_only_for_users(cluster: LocalCluster, bound: str) -> None:
    # A Queue is cluster-scoped: a namespace binding reaches none; a cluster-wide view reads them.
    assert not can_i(cluster, "alice", "list", "queues.aisched.io", None)
    assert can_i(cluster, "carol", "list", "queues.aisched.io", None)
    for user in ("alice", "bob", "carol", "dana"):
        for verb in ("create", "update", "patch", "delete"):
            assert not can_i(cluster, user, verb, "queues.aisched.io", None), (user, verb)
        assert not can_i(cluster, user, "patch", "queues.aisched.io", None, sub="status"), user
