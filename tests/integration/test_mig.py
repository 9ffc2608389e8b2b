"""MIG instances for real: the device plugin's "mixed" resources, and a repartition by the MIG manager's label (#29).

Two on-demand H100 KWOK nodes get a MIG manager (the stand-in, aisched.testing.mig_manager, with
a 2 s delay) and the config `all-1g.10gb`. A worker asking `1g.10gb` lands on one of them with
`nvidia.com/mig-1g.10gb: 1` and no `nvidia.com/gpu`. A gang of 16 workers asking `3g.40gb`, which
neither node has, makes the operator repartition the other, idle node (cordon, `nvidia.com/mig.config`,
uncordon once applied) and then lands there: 16 x 3g fill its 8 GPUs (two to a GPU), what a
repartition is bounded by (issue 37: one worker's 3/7 of a GPU slices no 8-GPU node); the node
running the 1g worker keeps its config and its worker. The nodes go back to whole GPUs afterwards,
for the rest of the session.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
import yaml
from kubernetes import client

from aisched.api.crd import all_crds
from aisched.kube.mig_nodes import CORDONED_ANNOTATION
from aisched.policy.sharing.mig_configs import CONFIG_LABEL, STATE_LABEL, STATE_SUCCESS
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, list_objects, wait_for
from tests.builders import a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("operator")]
H100 = "NVIDIA-H100-80GB-HBM3"
NODES = ("us-east-1a-r02-n01", "us-east-1a-r02-n02")  # the small preset's second on-demand H100 rack


def _relabel(core: client.CoreV1Api, config: str) -> None:
    # With the state `pending`, as the operator writes it: a `success` left from the config before
    # would read as this one applied, and the nodes would keep their MIG instances.
    for node in NODES:
        core.patch_node(node, {"metadata": {"labels": {CONFIG_LABEL: config, STATE_LABEL: "pending"}}})


def _idle(core: client.CoreV1Api) -> bool:
    for node in NODES:
        pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        if any(p.status.phase not in ("Succeeded", "Failed") for p in pods):
            return False
    return True


def _applied(core: client.CoreV1Api, node: str, config: str) -> dict[str, Any] | None:
    live = core.api_client.sanitize_for_serialization(core.read_node(node))
    labels = live["metadata"]["labels"]
    if labels.get(CONFIG_LABEL) == config and labels.get(STATE_LABEL) == STATE_SUCCESS:
        return dict(live)
    return None


@pytest.fixture(scope="module")
def mig_nodes(cluster: LocalCluster, api_client: client.ApiClient, crds_installed: None) -> Iterator[None]:
    for crd in all_crds():  # the CRDs as the models make them now (see test_gpu_sharing.py)
        result = cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(crd))
        assert result.returncode == 0, result.stderr
    command = [sys.executable, "-m", "aisched.testing.mig_manager", "--kubeconfig", str(cluster.kubeconfig)]
    stand_in = subprocess.Popen([*command, "--delay-seconds", "2"])
    core = client.CoreV1Api(api_client)
    try:
        # Workers of earlier tests' namespaces may still be going: the MIG manager would refuse them.
        wait_for(partial(_idle, core), TIMEOUT * 2, "the MIG nodes' earlier pods to be gone")
        _relabel(core, "all-1g.10gb")
        for node in NODES:
            wait_for(partial(_applied, core, node, "all-1g.10gb"), TIMEOUT, f"all-1g.10gb on {node}")
        yield
    finally:
        # Whole GPUs again, and no MIG manager: the session's other tests see the nodes as before.
        # The MIG manager refuses a node where a pod still holds a GPU, and the test's namespace
        # (with its workers) goes away in the background: repartition once they are gone.
        wait_for(partial(_idle, core), TIMEOUT * 2, "the MIG nodes' pods to be gone")
        _relabel(core, "all-disabled")
        for node in NODES:
            wait_for(partial(_applied, core, node, "all-disabled"), TIMEOUT, f"all-disabled on {node}")
        stand_in.terminate()
        stand_in.wait(timeout=30)
        off = {CONFIG_LABEL: None, STATE_LABEL: None, "nvidia.com/mig.strategy": None}
        off |= {"aisched.io/mig-manager-applied": None}
        for node in NODES:
            core.patch_node(node, {"metadata": {"labels": off}, "spec": {"unschedulable": False}})
            allocatable = core.read_node(node).status.allocatable
            assert not [r for r in allocatable if r.startswith("nvidia.com/mig-")], (node, allocatable)


def _running(cluster: LocalCluster, namespace: str, job: str) -> dict[str, Any] | None:
    pods = _all_running(cluster, namespace, job, 1)
    return pods[0] if pods else None


def _all_running(cluster: LocalCluster, namespace: str, job: str, count: int) -> list[dict[str, Any]] | None:
    pods = list_objects(cluster, "pods", namespace, f"aisched.io/job-name={job}")
    return pods if len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods) else None


@pytest.mark.usefixtures("mig_nodes")
def test_a_mig_profile_binds_and_an_idle_node_is_repartitioned_for_another(
    cluster: LocalCluster, namespace: str, api_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(api_client)
    apply(cluster, namespace, a_training_job("small").gpu_type(H100).gpu_share(migProfile="1g.10gb").obj())
    small = wait_for(lambda: _running(cluster, namespace, "small"), TIMEOUT, "the 1g.10gb worker running")
    limits = small["spec"]["containers"][0]["resources"]["limits"]
    assert limits.get("nvidia.com/mig-1g.10gb") == "1" and "nvidia.com/gpu" not in limits, limits
    busy = small["spec"]["nodeName"]
    assert busy in NODES, f"the 1g.10gb worker runs on {busy}, which has no MIG"
    (idle,) = (n for n in NODES if n != busy)

    big_job = a_training_job("big").gpu_type(H100).gpu_share(migProfile="3g.40gb").replicas(16).obj()
    apply(cluster, namespace, big_job)
    big = wait_for(lambda: _all_running(cluster, namespace, "big", 16), TIMEOUT, "the 3g.40gb workers running")
    assert {pod["spec"]["nodeName"] for pod in big} == {idle}
    assert all(p["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/mig-3g.40gb") == "1" for p in big)
    repartitioned = _applied(core, idle, "all-3g.40gb")
    assert repartitioned is not None, "the idle node holds the 3g.40gb config"
    assert repartitioned["status"]["allocatable"].get("nvidia.com/mig-3g.40gb") == "16"
    assert not repartitioned["spec"].get("unschedulable"), "uncordoned once applied"
    assert CORDONED_ANNOTATION not in (repartitioned["metadata"].get("annotations") or {})
    # Never under a running pod: the busy node kept its config, and its worker never restarted.
    assert _applied(core, busy, "all-1g.10gb") is not None
    still = _running(cluster, namespace, "small")
    assert still is not None and still["metadata"]["uid"] == small["metadata"]["uid"]
