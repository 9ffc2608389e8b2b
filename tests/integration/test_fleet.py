"""A fleet that grows: the operator asks a real Karpenter (its KWOK provider) for whole gangs' nodes.

Its own cluster: the `empty` preset (no GPU node at all) with Karpenter beside it
(`start_cluster(karpenter=True)`, which builds Karpenter first if the cache lacks it), and the
operator with provisioning on. Every GPU node here is one Karpenter made for a gang.
"""

from __future__ import annotations

import atexit
import functools
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from aisched.testing.cluster import (
    LocalCluster,
    apply,
    job,
    make_pod_exit,
    open_default_queue,
    running_pods,
    save_on_sigterm,
    start_cluster,
    stop_cluster,
    wait_for,
    wait_phase,
)
from aisched.testing.operator import OperatorProcess
from tests.builders import a_queue, a_training_job

pytestmark = [pytest.mark.integration, pytest.mark.minutes]

REPO = Path(__file__).resolve().parents[2]
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"
FOR = "aisched.io/provisioned-for"
# Karpenter launches a KWOK node in about a second; the bound leaves room for a loaded machine.
PROVISIONED = 90


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    state_dir = tmp_path_factory.mktemp("fleet")
    started = time.monotonic()
    try:
        local = start_cluster(state_dir, "empty", karpenter=True)
    except BaseException:
        stop_cluster(state_dir)
        raise
    print(f"\nempty cluster with Karpenter up in {time.monotonic() - started:.1f}s")
    atexit.register(stop_cluster, state_dir)
    try:
        yield local
    finally:
        stop_cluster(state_dir)
        atexit.unregister(stop_cluster)


@pytest.fixture(scope="module")
def fleet_api(fleet: LocalCluster) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=str(fleet.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="module")
def fleet_operator(
    fleet: LocalCluster, fleet_api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    applied = fleet.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    assert applied.returncode == 0, applied.stderr
    # Not `kubectl wait`: on a CRD whose status has no conditions yet it fails rather than waits.
    for crd in ("trainingjobs.aisched.io", "inferenceservices.aisched.io", "queues.aisched.io"):
        wait_for(functools.partial(established, fleet, crd), 60, f"the {crd} CRD to be established")
    open_default_queue(fleet_api)
    process = OperatorProcess(
        fleet,
        tmp_path_factory.mktemp("operator") / "operator.log",
        extra_env={
            "AISCHED_PROVISIONING__ENABLED": "true",
            "AISCHED_PROVISIONING__INSTANCE_TYPES_FILE": str(REPO / "hack" / "karpenter" / "instance-types.json"),
            "AISCHED_PROVISIONING__BOOT_SECONDS": "30",
        },
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def established(fleet: LocalCluster, crd: str) -> bool:
    jsonpath = 'jsonpath={.status.conditions[?(@.type=="Established")].status}'
    return fleet.kubectl("get", "crd", crd, "-o", jsonpath).stdout == "True"


@pytest.fixture
def namespace(fleet: LocalCluster, fleet_operator: OperatorProcess) -> Iterator[str]:
    name = f"fleet-{uuid.uuid4().hex[:8]}"
    created = fleet.kubectl("create", "namespace", name)
    assert created.returncode == 0, created.stderr
    wait_for(lambda: fleet.kubectl("get", "serviceaccount", "default", "-n", name).returncode == 0, 30, "its SA")
    yield name
    fleet.kubectl("delete", "namespace", name, "--wait=false")


def claims_for(fleet: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    result = fleet.kubectl("get", "nodeclaims", "-l", FOR, "-o", "json")
    assert result.returncode == 0, result.stderr
    items: list[dict[str, Any]] = json.loads(result.stdout)["items"]
    return [c for c in items if c["metadata"]["annotations"].get(FOR) == f"{namespace}/{name}"]


def nodes(fleet: LocalCluster) -> dict[str, dict[str, str]]:
    """Every Node's labels, by name."""
    result = fleet.kubectl("get", "nodes", "-o", "json")
    assert result.returncode == 0, result.stderr
    items = json.loads(result.stdout)["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in items}


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def gang(name: str, replicas: int, queue: str | None = None) -> dict[str, Any]:
    builder = a_training_job(name).replicas(replicas).gpus(8).set("gpuType", H100).set("spot", {"policy": "Prefer"})
    if queue is not None:
        builder.set("queue", queue)
    return builder.obj()


def test_a_gang_on_a_cluster_without_gpus_gets_its_nodes_in_one_zone_runs_and_they_go_after(
    fleet: LocalCluster, fleet_api: client.ApiClient, namespace: str
) -> None:
    assert not [n for n, labels in nodes(fleet).items() if "nvidia.com/gpu.product" in labels]  # from zero
    submitted = time.monotonic()
    apply(fleet, namespace, gang("big", 4))
    status = wait_phase(fleet, namespace, "big", "Running", timeout=PROVISIONED)["status"]
    to_running = time.monotonic() - submitted
    print(f"\n4 x 8-GPU gang from submission to Running through provisioning: {to_running:.1f}s")
    placed = status["placement"]["nodes"]
    labels = nodes(fleet)
    assert len(set(placed)) == 4
    assert {labels[n]["topology.kubernetes.io/zone"] for n in placed} == {"us-east-1a"}  # one zone, the cheapest
    assert {labels[n]["karpenter.sh/capacity-type"] for n in placed} == {"spot"}
    assert {labels[n]["node.kubernetes.io/instance-type"] for n in placed} == {"p5.48xlarge"}
    assert {labels[n]["nvidia.com/gpu.product"] for n in placed} == {H100}
    claims = claims_for(fleet, namespace, "big")
    assert sorted(c["status"]["nodeName"] for c in claims) == sorted(placed)  # asked once: four, no more
    pods = running_pods(fleet, namespace, "big")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(placed)
    assert all(p["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true" for p in pods)

    for pod in pods:
        make_pod_exit(fleet_api, pod["metadata"]["name"], namespace, "Succeeded")
    wait_phase(fleet, namespace, "big", "Succeeded")
    finished = time.monotonic()
    # Karpenter consolidates them (consolidateAfter 10 s in hack/karpenter/fleet.yaml).
    wait_for(
        lambda: not set(placed) & set(nodes(fleet)) and not claims_for(fleet, namespace, "big"),
        150,
        "the gang's empty nodes to go",
    )
    print(f"its four nodes consolidated away {time.monotonic() - finished:.1f}s after it finished")


def test_a_gang_over_its_queues_quota_gets_no_nodes(fleet: LocalCluster, namespace: str) -> None:
    queue = a_queue(f"tight-{namespace}", nominal_gpus=16).obj()
    queue["spec"]["namespaces"] = [namespace]
    apply(fleet, "default", queue)
    try:
        apply(fleet, namespace, gang("over", 4, queue=f"tight-{namespace}"))  # 32 GPUs, no borrowing
        apply(fleet, namespace, gang("within", 2, queue=f"tight-{namespace}"))  # 16
        # The gang within the quota is provisioned and runs: the cycles that did so saw the other.
        wait_phase(fleet, namespace, "within", "Running", timeout=PROVISIONED)
        assert job(fleet, namespace, "over")["status"]["reason"] == "QuotaExceeded"
        assert claims_for(fleet, namespace, "over") == []
        assert len(claims_for(fleet, namespace, "within")) == 2
        placed = job(fleet, namespace, "within")["status"]["placement"]["nodes"]
        assert len(Counter(nodes(fleet)[n]["topology.kubernetes.io/zone"] for n in placed)) == 1
    finally:
        fleet.kubectl("delete", "trainingjobs", "--all", "-n", namespace, "--wait=false")
        fleet.kubectl("delete", "queue", f"tight-{namespace}", "--wait=false")


def test_a_node_karpenter_takes_from_a_running_gang_goes_through_the_interruption_path(
    fleet: LocalCluster, fleet_api: client.ApiClient, namespace: str
) -> None:
    obj = gang("spotty", 2)
    obj["spec"]["checkpoint"] = {"path": "/ckpt"}
    apply(fleet, namespace, obj)
    status = wait_phase(fleet, namespace, "spotty", "Running", timeout=PROVISIONED)["status"]
    first, generation = status["placement"]["nodes"], status.get("gangGeneration") or 1
    # Stopped for the disruption, the workers save step 700 as real ones would on SIGTERM.
    for pod in running_pods(fleet, namespace, "spotty"):
        save_on_sigterm(fleet_api, pod["metadata"]["name"], namespace, 700)
    # Its nodes may be ones asked for another gang (still up, empty): any NodeClaim of the node.
    listed = json.loads(fleet.kubectl("get", "nodeclaims", "-o", "json").stdout)["items"]
    (doomed,) = [c["metadata"]["name"] for c in listed if c.get("status", {}).get("nodeName") == first[0]]
    # Deleting the NodeClaim is Karpenter's own path for a node it takes away: it taints the node
    # karpenter.sh/disrupted and drains it (our workers, do-not-disrupt, it leaves to us).
    started = time.monotonic()
    deleted = fleet.kubectl("delete", "nodeclaim", doomed, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    status = wait_for(
        lambda: (
            (s := job(fleet, namespace, "spotty")["status"]).get("phase") == "Running"
            and (s.get("gangGeneration") or 0) > generation
            and s
        ),
        PROVISIONED,
        "the gang to run again",
    )
    print(f"\ngang stopped and running again on new capacity {time.monotonic() - started:.1f}s after the disruption")
    assert status["interruptions"] >= 1
    assert status["lastCheckpoint"]["step"] == 700  # the gang saved before it let the node go
    pods = running_pods(fleet, namespace, "spotty")
    assert {_env(p)["AISCHED_RESUME_STEP"] for p in pods} == {"700"}  # and resumed from it
    assert first[0] not in status["placement"]["nodes"]
    assert len({nodes(fleet)[n]["topology.kubernetes.io/zone"] for n in status["placement"]["nodes"]}) == 1
    wait_for(lambda: first[0] not in nodes(fleet), 60, "the disrupted node to go")


def test_a_gang_beyond_its_node_pools_gpu_limit_gets_no_nodes(fleet: LocalCluster, namespace: str) -> None:
    # Karpenter checks a NodePool's limits only for the NodeClaims it makes itself. The on-demand
    # pool has no claim here (every gang above is on spot): room for one 8-GPU node, A100s, which
    # no node left by the tests above has.
    def limit(gpus: str) -> None:
        patch = json.dumps({"spec": {"limits": {"nvidia.com/gpu": gpus}}})
        patched = fleet.kubectl("patch", "nodepool", "gpu-on-demand", "--type=merge", "-p", patch)
        assert patched.returncode == 0, patched.stderr

    def a100(name: str, replicas: int) -> dict[str, Any]:
        return a_training_job(name).replicas(replicas).gpus(8).set("gpuType", A100).obj()  # spot policy Never

    limit("8")
    try:
        apply(fleet, namespace, a100("two", 2))  # first in line, 16 GPUs: over the pool's limit
        apply(fleet, namespace, a100("one", 1))
        wait_phase(fleet, namespace, "one", "Running", timeout=PROVISIONED)
        # The cycles that asked for "one" saw "two" first, and asked nothing for it.
        assert claims_for(fleet, namespace, "two") == []
        assert job(fleet, namespace, "two")["status"]["phase"] == "Queued"
    finally:
        limit("512")
        fleet.kubectl("delete", "trainingjobs", "--all", "-n", namespace, "--wait=false")
