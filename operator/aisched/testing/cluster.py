"""The local GPU cluster (hack/cluster.sh), for integration tests and benchmarks.

The cluster is real: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, with kwok playing the kubelets of fake GPU nodes. Pods on them
behave as hack/kwok/stages.yaml says; tests steer them with annotations
(`make_pod_exit`) and take nodes away as clouds do (`interrupt_node`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from kubernetes import client

from aisched.testing.nodes import load_description, render_nodes
from aisched.workload.contract import CHECKPOINTED_EXIT_CODE

# operator/aisched/testing/cluster.py: the checkout this (editable) install runs from.
REPO_ROOT = Path(__file__).resolve().parents[3]
HACK_DIR = REPO_ROOT / "hack"
CLUSTER_SCRIPT = HACK_DIR / "cluster.sh"
BUILD_SCRIPT = HACK_DIR / "build-k8s-binaries.sh"
CLUSTER_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl")
# Karpenter's KWOK provider and the CRDs the build copies beside it (start_cluster(karpenter=True)).
KARPENTER_BINARIES = ("karpenter-kwok", "karpenter-crds/.version")
KARPENTER_PORT_VARIABLES = ("AISCHED_KARPENTER_METRICS_PORT", "AISCHED_KARPENTER_HEALTH_PORT")
# The job frameworks' controllers and their CRDs (start_cluster(frameworks=True)).
FRAMEWORK_BINARIES = (
    "training-operator",
    "kuberay-operator",
    "training-operator-crds/.version",
    "kuberay-operator-crds/.version",
)
FRAMEWORK_PORT_VARIABLES = (
    "AISCHED_TRAINING_OPERATOR_METRICS_PORT",
    "AISCHED_TRAINING_OPERATOR_HEALTH_PORT",
    "AISCHED_TRAINING_OPERATOR_WEBHOOK_PORT",
    "AISCHED_KUBERAY_METRICS_PORT",
    "AISCHED_KUBERAY_HEALTH_PORT",
)

# Annotations read by the pod stages in hack/kwok/stages.yaml.
FAKE_EXIT = "aisched.io/fake-exit"
FAKE_EXIT_CODE = "aisched.io/fake-exit-code"
FAKE_TERMINATION_MESSAGE = "aisched.io/fake-termination-message"

Provider = Literal["aws", "karpenter", "gke"]
# What each cloud's node manager puts on a node it is about to lose: the AWS
# Node Termination Handler (value: the interruption event's id; it also
# cordons), Karpenter v1, and GKE's node maintenance handler. All NoSchedule.
INTERRUPTION_TAINTS: dict[Provider, tuple[str, str]] = {
    "aws": ("aws-node-termination-handler/spot-itn", "spot-itn-simulated"),
    "karpenter": ("karpenter.sh/disrupted", ""),
    "gke": ("cloud.google.com/impending-node-termination", ""),
}
# The ports hack/cluster.sh lets callers move, so a test cluster runs beside a developer's.
PORT_VARIABLES = (
    "AISCHED_APISERVER_PORT",
    "AISCHED_ETCD_CLIENT_PORT",
    "AISCHED_ETCD_PEER_PORT",
    "AISCHED_CONTROLLER_MANAGER_PORT",
    "AISCHED_SCHEDULER_PORT",
)

T = TypeVar("T")
TIMEOUT = 60  # seconds a test waits for the operator to act: many resync periods, well under a hang
# kubectl(*args, timeout=60, input=None) -> CompletedProcess: the cached kubectl, at the test cluster.
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


class ClusterError(RuntimeError):
    """The local cluster could not be built or started; the message says why and where to look."""


def bin_dir() -> Path:
    """The binary cache hack/lib.sh defines (one definition, asked rather than copied)."""
    out = subprocess.run(
        ["bash", "-c", 'source "$1" && echo "$AISCHED_BIN_DIR"', "bash", str(HACK_DIR / "lib.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def ensure_binaries(karpenter: bool = False, frameworks: bool = False) -> Path:
    """The binary directory, building what is missing (a cold build takes several minutes)."""
    binaries = bin_dir()
    wanted = CLUSTER_BINARIES + (KARPENTER_BINARIES if karpenter else ()) + (FRAMEWORK_BINARIES if frameworks else ())
    if all((binaries / name).exists() for name in wanted):
        return binaries
    if shutil.which("go") is None:
        raise ClusterError(
            f"the local cluster's binaries are not in {binaries} and Go is not installed to build them: "
            "install Go (https://go.dev/doc/install), then run 'make k8s-binaries'"
        )
    # The build's progress goes to the terminal: pytest would hold it back for minutes.
    print(f"building the local cluster's binaries into {binaries}; a cold build takes minutes", file=sys.__stderr__)
    result = subprocess.run([str(BUILD_SCRIPT)], stdout=subprocess.DEVNULL, stderr=sys.__stderr__, check=False)
    if result.returncode != 0:
        raise ClusterError("building the local cluster's binaries failed; its output is above")
    return binaries


def free_ports(count: int) -> list[int]:
    """Ports nobody listens on now; held open together so that they are distinct."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


@dataclass(frozen=True)
class LocalCluster:
    state_dir: Path
    bin_dir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "admin.kubeconfig"

    @property
    def env(self) -> dict[str, str]:
        """Environment for hack/ scripts and binaries to address this cluster."""
        helm_home = self.state_dir / "helm"  # keeps helm out of the user's ~/.config and ~/.cache
        return {
            **os.environ,
            "AISCHED_CLUSTER_DIR": str(self.state_dir),
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
        }

    def run(self, binary: str, *args: str, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run a cached binary (kubectl, helm) against this cluster; never raises on exit status."""
        return subprocess.run(
            [str(self.bin_dir / binary), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            env=self.env,
            **kwargs,
        )

    def kubectl(self, *args: str, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, timeout=timeout, **kwargs)


def start_cluster(
    state_dir: Path, preset: str = "small", real_nodes: int = 0, *, karpenter: bool = False, frameworks: bool = False
) -> LocalCluster:
    """`hack/cluster.sh up PRESET` on free ports in STATE_DIR; returns once the cluster is ready.

    REAL_NODES adds that many real nodes (kubelet and containerd, hack/real-nodes.sh; root only);
    KARPENTER runs Karpenter's KWOK provider beside it (built first if it is not in the cache);
    FRAMEWORKS the real training-operator and KubeRay operator, with their CRDs (likewise).
    """
    binaries = ensure_binaries(karpenter, frameworks)
    output = ""
    variables = PORT_VARIABLES + (KARPENTER_PORT_VARIABLES if karpenter else ())
    variables += FRAMEWORK_PORT_VARIABLES if frameworks else ()
    for _ in range(2):  # a port may be taken between choosing and binding it
        ports = dict(zip(variables, map(str, free_ports(len(variables))), strict=True))
        env = {**os.environ, **ports, "AISCHED_CLUSTER_DIR": str(state_dir), "AISCHED_REAL_NODES": str(real_nodes)}
        env["AISCHED_KARPENTER"] = "1" if karpenter else "0"
        env["AISCHED_FRAMEWORKS"] = "1" if frameworks else "0"
        result = subprocess.run(
            [str(CLUSTER_SCRIPT), "up", preset], capture_output=True, text=True, env=env, check=False
        )
        if result.returncode == 0:
            return LocalCluster(state_dir=state_dir, bin_dir=binaries)
        output = result.stderr
        stop_cluster(state_dir)
        if "is in use" not in output:
            break
    raise ClusterError(f"hack/cluster.sh up {preset} failed:\n{output.strip()[-3000:]}")


def stop_cluster(state_dir: Path) -> None:
    """`hack/cluster.sh down` for the cluster in STATE_DIR: its processes stop, the directory goes."""
    env = {**os.environ, "AISCHED_CLUSTER_DIR": str(state_dir)}
    subprocess.run([str(CLUSTER_SCRIPT), "down"], capture_output=True, env=env, check=False)


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str = "", interval: float = 0.25) -> T:
    """Poll PREDICATE until it returns something truthy, and return that; TimeoutError after TIMEOUT s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate}; last: {value!r}")
        time.sleep(interval)


def expected_nodes(preset: str = "small") -> list[dict[str, Any]]:
    """The Node manifests the preset's description renders to."""
    return render_nodes(load_description(HACK_DIR / "clusters" / f"{preset}.yaml"))


def save_on_sigterm(api: client.ApiClient, pod: str, namespace: str, step: int, path: str | None = None) -> None:
    """Arm a fake worker (KWOK plays it): stopped (SIGTERM), it saves STEP and reports it in its
    termination message, at PATH (default /ckpt/step-STEP), exiting as a worker that saved does."""
    report = json.dumps({"step": step, "path": path or f"/ckpt/step-{step}", "time": datetime.now(UTC).isoformat()})
    annotations = {FAKE_EXIT_CODE: str(CHECKPOINTED_EXIT_CODE), FAKE_TERMINATION_MESSAGE: report}
    client.CoreV1Api(api).patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": annotations}})


def make_pod_exit(
    api: client.ApiClient,
    name: str,
    namespace: str,
    phase: Literal["Succeeded", "Failed"],
    *,
    message: str | None = None,
    exit_code: int | None = None,
) -> None:
    """Make a running pod's containers exit: the pod ends in PHASE with MESSAGE as termination message."""
    annotations: dict[str, str] = {FAKE_EXIT: phase}
    if message is not None:
        annotations[FAKE_TERMINATION_MESSAGE] = message
    if exit_code is not None:
        annotations[FAKE_EXIT_CODE] = str(exit_code)
    client.CoreV1Api(api).patch_namespaced_pod(name, namespace, {"metadata": {"annotations": annotations}})


def open_default_queue(api: client.ApiClient, gpus: int = 1_000_000) -> None:
    """Give the default queue GPUS and lift its caps, as a cluster of one tenant (a test, a
    benchmark) wants: one nobody wrote grants nothing (`locked_default_queue`)."""
    custom = client.CustomObjectsApi(api)
    queue = {"apiVersion": "aisched.io/v1alpha1", "kind": "Queue", "metadata": {"name": "default"}}
    queue["spec"] = {"nominalGPUs": gpus}
    try:
        custom.create_cluster_custom_object("aisched.io", "v1alpha1", "queues", queue)
    except client.ApiException as error:
        if error.status != 409:
            raise
        opened = {"spec": {"nominalGPUs": gpus, "maxPriority": None, "allowedTolerations": None}}  # a merge patch
        custom.patch_cluster_custom_object("aisched.io", "v1alpha1", "queues", "default", opened)


def taint_for_interruption(api: client.ApiClient, node: str, provider: Provider = "aws") -> None:
    """Announce NODE's loss as PROVIDER's node manager does (taint; AWS NTH also cordons)."""
    key, value = INTERRUPTION_TAINTS[provider]
    core = client.CoreV1Api(api)
    taints = [t for t in core.read_node(node).spec.taints or [] if t.key != key]
    taints.append(client.V1Taint(key=key, value=value or None, effect="NoSchedule"))
    spec: dict[str, Any] = {"taints": [api.sanitize_for_serialization(t) for t in taints]}
    if provider == "aws":
        spec["unschedulable"] = True
    core.patch_node(node, {"spec": spec})


def remove_node(api: client.ApiClient, node: str, timeout: float = 60) -> None:
    """The machine goes: its pods are stopped (gracefully, as a shutting-down kubelet does), then the Node."""
    core = client.CoreV1Api(api)
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    for pod in pods:
        core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
    wait_for(
        lambda: not core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items,
        timeout,
        f"the pods of node {node} to stop",
    )
    core.delete_node(node)


def interrupt_node(api: client.ApiClient, node: str, provider: Provider = "aws", notice_seconds: float = 120) -> None:
    """A spot interruption: taint NODE as PROVIDER does, wait the notice, then take the node away.

    Blocks for the notice; run it in a thread to act during the notice.
    """
    taint_for_interruption(api, node, provider)
    time.sleep(notice_seconds)
    remove_node(api, node)


def get_object(cluster: LocalCluster, kind: str, name: str, namespace: str) -> dict[str, Any]:
    result = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json")
    if result.returncode != 0:
        return {}
    obj: dict[str, Any] = json.loads(result.stdout)
    return obj


def list_objects(cluster: LocalCluster, kind: str, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["get", kind, "-n", namespace, "-o", "json"]
    if selector:
        args += ["-l", selector]
    result = cluster.kubectl(*args)
    items: list[dict[str, Any]] = json.loads(result.stdout)["items"] if result.returncode == 0 else []
    return items


# -- TrainingJobs, as the tests of several modules look at them -----------------------------


def apply(cluster: LocalCluster, namespace: str, obj: dict[str, Any]) -> None:
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))
    assert result.returncode == 0, result.stderr


def job(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    return get_object(cluster, "trainingjob", name, namespace)


def phase_of(cluster: LocalCluster, namespace: str, name: str) -> str | None:
    phase: str | None = job(cluster, namespace, name).get("status", {}).get("phase")
    return phase


def workers(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return list_objects(cluster, "pods", namespace, f"aisched.io/job-name={name}")


def wait_phase(
    cluster: LocalCluster, namespace: str, name: str, phase: str, timeout: float = TIMEOUT
) -> dict[str, Any]:
    wait_for(lambda: phase_of(cluster, namespace, name) == phase, timeout, f"{name} to be {phase}")
    return job(cluster, namespace, name)


def running_pods(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return [p for p in workers(cluster, namespace, name) if p["status"].get("phase") == "Running"]


def node_labels(cluster: LocalCluster, node: str) -> dict[str, str]:
    labels: dict[str, str] = get_object(cluster, "node", node, "")["metadata"]["labels"]
    return labels
