"""The local GPU cluster itself: the nodes, scheduling, controllers, tools, and simulated lifecycles."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from aisched.settings import DEFAULT_INTERRUPTION_TAINTS
from aisched.testing.cluster import (
    HACK_DIR,
    INTERRUPTION_TAINTS,
    Kubectl,
    LocalCluster,
    Provider,
    expected_nodes,
    interrupt_node,
    make_pod_exit,
    wait_for,
)

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
TOPOLOGY_LABELS = (
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "aisched.io/rack",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "karpenter.sh/capacity-type",
    "node.kubernetes.io/instance-type",
)


def gpu_pod(name: str, gpus: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "worker", "image": "trainer:latest", "resources": {"limits": {GPU: gpus}}}],
            **spec,
        },
    }


def running_pod(core: client.CoreV1Api, name: str, namespace: str) -> client.V1Pod:
    def is_running() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase == "Running" else None

    pod: client.V1Pod = wait_for(is_running, 60, f"pod {name} to run")
    return pod


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def restore_nodes(core: client.CoreV1Api) -> Iterator[None]:
    """Put back the small preset's nodes a test took away, so later tests see the whole cluster."""
    yield
    present = {n.metadata.name for n in core.list_node().items}
    missing = [n for n in expected_nodes("small") if n["metadata"]["name"] not in present]
    for node in missing:
        core.create_node(node)

    def usable(name: str) -> bool:
        node = core.read_node(name)
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        return ready and not node.spec.taints

    for node in missing:
        wait_for(partial(usable, node["metadata"]["name"]), 60, "the restored node to be Ready")


def test_nodes_show_gpu_labels_and_capacity(kubectl: Kubectl) -> None:
    result = kubectl("get", "nodes", "-o", "json")
    assert result.returncode == 0, result.stderr
    nodes = {n["metadata"]["name"]: n for n in json.loads(result.stdout)["items"]}
    expected = {n["metadata"]["name"]: n for n in expected_nodes("small")}

    assert nodes.keys() == expected.keys()
    for name, node in nodes.items():
        labels = node["metadata"]["labels"]
        for key in TOPOLOGY_LABELS:
            assert labels[key] == expected[name]["metadata"]["labels"][key]
        assert node["status"]["allocatable"][GPU] == labels["nvidia.com/gpu.count"]
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        assert not node["spec"].get("taints")
    assert {n["metadata"]["labels"]["karpenter.sh/capacity-type"] for n in nodes.values()} == {
        "spot",
        "on-demand",
    }
    assert len({n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes.values()}) == 2

    table = kubectl("get", "nodes", "-L", "nvidia.com/gpu.product")
    assert "NVIDIA-H100-80GB-HBM3" in table.stdout and "NVIDIA-A100-SXM4-40GB" in table.stdout


def test_pod_asking_8_gpus_is_bound_to_a_node_with_8_free_and_runs(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, gpu_pod("eight", 8))

    pod = running_pod(core, "eight", namespace)

    node = core.read_node(pod.spec.node_name)
    on_node = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={pod.spec.node_name}").items
    requested = sum(int((c.resources.limits or {}).get(GPU, 0)) for p in on_node for c in p.spec.containers)
    assert int(node.status.allocatable[GPU]) >= requested >= 8
    assert pod.status.pod_ip
    assert all(s.ready and s.state.running for s in pod.status.container_statuses)


def test_pod_asking_more_gpus_than_any_node_has_stays_pending_with_the_reason(
    core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, gpu_pod("too-big", 16))

    def unschedulable() -> client.V1PodCondition | None:
        conditions = core.read_namespaced_pod("too-big", namespace).status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    condition = wait_for(unschedulable, 60, "the scheduler to give up on the pod")
    assert condition.reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in condition.message
    # The scheduler records its event after the condition, through its own broadcaster: wait for it too.
    wait_for(
        lambda: any(
            e.reason == "FailedScheduling"
            for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=too-big").items
        ),
        60,
        "the FailedScheduling event",
    )
    assert core.read_namespaced_pod("too-big", namespace).status.phase == "Pending"


def test_deployment_gets_running_pods(api_client: client.ApiClient, namespace: str) -> None:
    apps = client.AppsV1Api(api_client)
    labels = {"app": "server"}
    apps.create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "server"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [{"name": "server", "image": "server:1", "resources": {"limits": {GPU: 1}}}]
                    },
                },
            },
        },
    )

    def all_ready() -> bool:
        status = apps.read_namespaced_deployment_status("server", namespace).status
        return bool(status.ready_replicas == 3)

    wait_for(all_ready, 60, "3 ready replicas")


def test_kubectl_and_helm_talk_to_the_cluster(cluster: LocalCluster, namespace: str, tmp_path: Path) -> None:
    versions = dict(line.split("=", 1) for line in (HACK_DIR / "versions.env").read_text().splitlines() if "=" in line)
    kubectl_version = cluster.kubectl("version", "-o", "json")
    assert kubectl_version.returncode == 0, kubectl_version.stderr
    assert json.loads(kubectl_version.stdout)["serverVersion"]["gitVersion"] == versions["KUBERNETES_VERSION"]

    helm_version = cluster.run("helm", "version", "--short")
    assert helm_version.stdout.startswith(versions["HELM_VERSION"])
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\ndata: {release: '{{ .Release.Name }}'}\n"
    )
    install = cluster.run("helm", "install", "probe", str(chart), "-n", namespace, "--wait")
    assert install.returncode == 0, install.stderr
    configmap = cluster.kubectl("get", "configmap", "probe", "-n", namespace, "-o", "jsonpath={.data.release}")
    assert configmap.stdout == "probe"


@pytest.mark.parametrize(
    ("phase", "exit_code", "expected"),
    [("Succeeded", None, (0, "Completed")), ("Failed", None, (1, "Error")), ("Failed", 137, (137, "Error"))],
)
def test_fake_exit_ends_the_pod_with_the_termination_message(
    api_client: client.ApiClient, namespace: str, phase: Any, exit_code: int | None, expected: tuple[int, str]
) -> None:
    """EXPECTED: the container's exit code and reason."""
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, gpu_pod("worker", 1))
    running_pod(core, "worker", namespace)

    make_pod_exit(api_client, "worker", namespace, phase, message='{"step": 1200}', exit_code=exit_code)

    def ended() -> client.V1Pod | None:
        pod = core.read_namespaced_pod("worker", namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = wait_for(ended, 60, "the pod to end")
    assert pod.status.phase == phase
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason, terminated.message) == (*expected, '{"step": 1200}')


def test_a_deleted_pod_stops_its_containers_before_it_goes(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    pod = gpu_pod("worker", 1)
    pod["metadata"]["annotations"] = {"aisched.io/fake-termination-message": "checkpoint step=42"}
    core.create_namespaced_pod(namespace, pod)
    version = running_pod(core, "worker", namespace).metadata.resource_version

    core.delete_namespaced_pod("worker", namespace)

    seen: list[tuple[str, str | None]] = []
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        namespace,
        field_selector="metadata.name=worker",
        resource_version=version,
        timeout_seconds=30,
    )
    for event in stream:
        terminated = event["object"].status.container_statuses[0].state.terminated
        seen.append((event["type"], terminated and terminated.message))
        if event["type"] == "DELETED":
            break
    assert ("MODIFIED", "checkpoint step=42") in seen
    assert seen[-1][0] == "DELETED"


def test_interruption_taints_are_the_ones_the_operator_watches() -> None:
    assert {key for key, _ in INTERRUPTION_TAINTS.values()} <= set(DEFAULT_INTERRUPTION_TAINTS)


def spot_node(core: client.CoreV1Api) -> str:
    nodes = core.list_node(label_selector="karpenter.sh/capacity-type=spot,nvidia.com/gpu.count=8").items
    name: str = nodes[0].metadata.name
    return name


@pytest.mark.parametrize("provider", ["aws", "karpenter", "gke"])
@pytest.mark.usefixtures("restore_nodes")
def test_interrupting_a_node_taints_it_then_deletes_it_and_its_pods(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, provider: Provider
) -> None:
    node = spot_node(core)
    core.create_namespaced_pod(namespace, gpu_pod("victim", 8, nodeSelector={"kubernetes.io/hostname": node}))
    running_pod(core, "victim", namespace)
    key, _ = INTERRUPTION_TAINTS[provider]

    with ThreadPoolExecutor(max_workers=1) as pool:
        interruption = pool.submit(interrupt_node, api_client, node, provider, 3)
        taint = wait_for(
            lambda: next((t for t in core.read_node(node).spec.taints or [] if t.key == key), None),
            10,
            f"the {key} taint",
        )
        assert taint.effect == "NoSchedule"
        assert core.read_node(node).spec.unschedulable == (True if provider == "aws" else None)
        interruption.result(timeout=90)
    assert not core.list_node(field_selector=f"metadata.name={node}").items
    assert not core.list_namespaced_pod(namespace).items


@pytest.mark.usefixtures("restore_nodes")
def test_interrupt_node_script_does_the_same(cluster: LocalCluster, core: client.CoreV1Api) -> None:
    node = spot_node(core)
    script = subprocess.Popen(
        [str(HACK_DIR / "interrupt-node.sh"), node, "--provider", "gke", "--notice", "2"],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: any(
                t.key == "cloud.google.com/impending-node-termination" for t in core.read_node(node).spec.taints or []
            ),
            10,
            "the GKE taint",
        )
    finally:
        _, stderr = script.communicate(timeout=90)
    assert script.returncode == 0, stderr
    assert not core.list_node(field_selector=f"metadata.name={node}").items
