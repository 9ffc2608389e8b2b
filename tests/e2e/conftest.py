"""Fixtures of the e2e tier: the local cluster with two real nodes, images built here, the chart installed.

Everything is real: the kubelets run the operator's and the training image's
containers under containerd and runc, the operator runs in-cluster from the
Helm chart with its ServiceAccount, and interruptions reach the workers as the
kubelet's SIGTERM. Needs root (network namespaces, mounts, cgroups) and the
packages of hack/install-node-packages.sh; `make test-e2e` runs it.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from aisched.testing.cluster import (
    HACK_DIR,
    INTERRUPTION_TAINTS,
    REPO_ROOT,
    ClusterError,
    LocalCluster,
    start_cluster,
    stop_cluster,
    wait_for,
)

REAL_NODES = 2
RELEASE = "aisched"
OPERATOR_NAMESPACE = "aisched-system"
OPERATOR_IMAGE = "aisched.local/aisched:dev"
TRAINING_IMAGE = "aisched.local/training:dev"
TORCH_IMAGE = "aisched.local/torch-training:dev"
REAL_NODE_LABEL = "aisched.io/real-node"
REAL_NODE_TOLERATION = {"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
# What a worker gets to see the pods come and go: the operator's resync, shortened.
OPERATOR_RESYNC_SECONDS = 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.e2e)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{' '.join(map(str, result.args))}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="session")
def images() -> Path:
    """The pause, operator, training, model server and torch images (hack/build-images.sh; cached between runs)."""
    if os.geteuid() != 0:
        pytest.skip("the e2e tier needs root: real nodes use network namespaces, mounts and cgroups")
    build = [str(HACK_DIR / "build-images.sh"), "all", "torch"]
    result = subprocess.run(build, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.exit(f"hack/build-images.sh failed:\n{result.stderr[-3000:]}")
    cache = subprocess.run(
        ["bash", "-c", 'source "$1" && echo "$AISCHED_CACHE_DIR"', "bash", str(HACK_DIR / "lib.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(cache.stdout.strip()) / "images"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, images: Path) -> Iterator[LocalCluster]:
    state_dir = tmp_path_factory.mktemp("cluster")
    try:
        # With the real training-operator and KubeRay beside it: a team's PyTorchJob runs on the real nodes.
        local = start_cluster(state_dir, real_nodes=REAL_NODES, frameworks=True)
    except ClusterError as e:
        pytest.exit(f"the local cluster with real nodes could not start:\n{e}")
    except BaseException:
        stop_cluster(state_dir)
        raise
    atexit.register(stop_cluster, state_dir)
    try:
        archives = [str(images / f"{name}.tar") for name in ("operator", "training", "server", "torch")]
        ok(
            subprocess.run(
                [str(HACK_DIR / "real-nodes.sh"), "import", *archives],
                capture_output=True,
                text=True,
                env=local.env,
                check=False,
            )
        )
        yield local
    finally:
        stop_cluster(state_dir)
        atexit.unregister(stop_cluster)


@pytest.fixture(scope="session")
def api_client(cluster: LocalCluster) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="session")
def real_nodes(api_client: client.ApiClient) -> list[str]:
    nodes = client.CoreV1Api(api_client).list_node(label_selector=f"{REAL_NODE_LABEL}=true").items
    return sorted(n.metadata.name for n in nodes)


@pytest.fixture(scope="session")
def checkpoint_root(cluster: LocalCluster) -> Path:
    """A host directory both real nodes mount (hostPath), writable by the workers' non-root user."""
    root = cluster.state_dir / "checkpoints"
    root.mkdir(exist_ok=True)
    root.chmod(0o1777)
    return root


CHECKPOINTING_QUEUE = "real-nodes"


def chart_values(checkpoint_root: Path) -> dict[str, Any]:
    """The chart as a platform team would install it here: the image built here, on the real nodes,
    and a queue whose jobs may mount the shared checkpoint directory (a hostPath, which no queue
    allows unless told: docs/tenancy.md)."""
    repository, tag = OPERATOR_IMAGE.rsplit(":", 1)
    checkpoints = {"allowedHostPaths": [{"pathPrefix": str(checkpoint_root), "readOnly": False}]}
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "nodeSelector": {REAL_NODE_LABEL: "true"},
        "tolerations": [REAL_NODE_TOLERATION],
        "extraEnv": [{"name": "AISCHED_RESYNC_SECONDS", "value": str(OPERATOR_RESYNC_SECONDS)}],
        "settings": {"topology": {"preset": "local"}},  # the local cluster's nodes carry aisched.io/rack
        # Jobs that name no queue: the operator would create the default one granting nothing.
        "queues": [
            {"name": "default", "nominalGPUs": 1_000_000},
            {"name": CHECKPOINTING_QUEUE, "nominalGPUs": 1_000_000, "podPolicy": checkpoints},
        ],
    }


@pytest.fixture(scope="session")
def operator_release(cluster: LocalCluster, checkpoint_root: Path) -> str:
    """The chart installed into a namespace that enforces the restricted Pod Security Standard."""
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": OPERATOR_NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    ok(cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(namespace)))
    chart = str(REPO_ROOT / "helm" / "aisched")
    # As a platform team installs it: the chart first, then its Queues by an upgrade (the Queue kind
    # exists only once the chart's CRDs are in).
    full = chart_values(checkpoint_root)
    for step, values in (("install", {k: v for k, v in full.items() if k != "queues"}), ("upgrade", full)):
        path = cluster.state_dir / f"values-{step}.yaml"
        path.write_text(yaml.safe_dump(values))
        args = [step, RELEASE, chart, "-n", OPERATOR_NAMESPACE, "-f", str(path), "--wait", "--timeout", "240s"]
        ok(cluster.run("helm", *args, timeout=300))
    # The upgrade may roll the operator's pods: the tests start once only the new ones are left.
    ok(
        cluster.kubectl(
            "rollout", "status", f"deployment/{RELEASE}", "-n", OPERATOR_NAMESPACE, "--timeout=240s", timeout=300
        )
    )
    wait_for(lambda: _one_replica_set(cluster), 240, "the operator's pods of the last rollout alone")
    return OPERATOR_NAMESPACE


def _one_replica_set(cluster: LocalCluster) -> bool:
    listed = cluster.kubectl("get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "json")
    pods = json.loads(listed.stdout)["items"] if listed.returncode == 0 else []
    hashes = {p["metadata"].get("labels", {}).get("pod-template-hash") for p in pods}
    return bool(pods) and len(hashes) == 1


@pytest.fixture
def namespace(api_client: client.ApiClient, operator_release: str) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    # Its jobs mount a hostPath: the chart's admission policy lets them only in a namespace the
    # administrator (here, the test) marked so.
    core.create_namespace({"metadata": {"name": name, "labels": {"aisched.io/privileged-workloads": "true"}}})
    wait_for(
        lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
        30,
        f"the default ServiceAccount of {name}",
    )
    yield name
    core.delete_namespace(name)


def get_json(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    result = cluster.kubectl("get", *args, "-o", "json")
    loaded: dict[str, Any] = json.loads(result.stdout) if result.returncode == 0 else {}
    return loaded


@pytest.fixture
def interrupted(cluster: LocalCluster) -> Iterator[list[str]]:
    """Nodes a test announces the loss of; the notice is withdrawn afterwards (the node stays after all)."""
    nodes: list[str] = []
    yield nodes
    key, _ = INTERRUPTION_TAINTS["aws"]
    for node in nodes:
        cluster.kubectl("taint", "node", node, f"{key}-")
        cluster.kubectl("uncordon", node)
