"""The operator's relist against a real API server: it repairs watch gaps and never undoes newer state.

The operator runs behind a proxy (aisched.testing.api_proxy) that can cut a
resource's watch (the client must list again and never hears of deletions made
meanwhile) and make the operator's own lists stale. The session's operator is
stopped meanwhile: beside this one it would act too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from aisched.testing.api_proxy import ApiProxy
from aisched.testing.cluster import TIMEOUT, LocalCluster, apply, job, wait_for, wait_phase
from aisched.testing.operator import OperatorProcess
from tests.builders import a_queue, a_training_job

pytestmark = pytest.mark.integration
RELIST_SECONDS = 3


@pytest.fixture
def proxied_operator(
    cluster: LocalCluster, operator: OperatorProcess, tmp_path: Path
) -> Iterator[tuple[OperatorProcess, ApiProxy]]:
    """An operator that relists every few seconds, through the proxy, in place of the session's."""
    proxy = ApiProxy(cluster)
    proxy.start()
    env = {
        "KUBECONFIG": str(proxy.write_kubeconfig(tmp_path / "proxy.kubeconfig")),
        "AISCHED_RELIST_SECONDS": str(RELIST_SECONDS),
    }
    proxied = OperatorProcess(cluster, tmp_path / "operator.log", extra_env=env)
    operator.stop()
    try:
        proxied.start()
        yield proxied, proxy
    finally:
        proxied.stop()
        proxy.stop()
        operator.start()


@pytest.fixture
def queue(cluster: LocalCluster) -> Iterator[str]:
    """A Queue of 8 GPUs of its own, deleted afterwards."""
    name = f"q-{uuid.uuid4().hex[:6]}"
    apply(cluster, "default", a_queue(name, nominal_gpus=8).obj())
    yield name
    cluster.kubectl("delete", "queue", name, "--wait=false")


def test_a_job_deleted_while_the_watch_was_away_frees_its_quota(
    cluster: LocalCluster, namespace: str, queue: str, proxied_operator: tuple[OperatorProcess, ApiProxy]
) -> None:
    operator, proxy = proxied_operator
    apply(cluster, namespace, a_training_job("first").queue(queue).replicas(2).gpus(4).obj())
    wait_phase(cluster, namespace, "first", "Running")
    apply(cluster, namespace, a_training_job("second").queue(queue).replicas(1).gpus(4).obj())
    wait_for(
        lambda: job(cluster, namespace, "second").get("status", {}).get("reason") == "QuotaExceeded",
        TIMEOUT,
        "the second job to wait for quota",
    )
    with proxy.watch_gap("trainingjobs"):
        deleted = cluster.kubectl("delete", "tj", "first", "-n", namespace, "--wait=true")
        assert deleted.returncode == 0, deleted.stderr
        listed = proxy.lists["trainingjobs"]
        # kopf lists again after the deletion: from now on no watch will ever report it.
        wait_for(lambda: proxy.lists["trainingjobs"] > listed, TIMEOUT, "kopf to list TrainingJobs again")
    assert not proxy.saw("trainingjobs", "DELETED", namespace, "first")
    # No watch will say that `first` is gone: the operator's relist must (its own log, read whole).
    # Its quota may be handed on a moment before, once the garbage collector has taken its workers.
    wait_for(
        lambda: "was deleted while the watch was away" in operator.log_path.read_text(errors="replace"),
        TIMEOUT,
        "the relist to find the job gone",
    )
    wait_phase(cluster, namespace, "second", "Running")


def l4x4_node(api: client.ApiClient) -> str:
    """The small preset's one 4-GPU L4 node (spot)."""
    nodes = client.CoreV1Api(api).list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4").items
    (node,) = (n.metadata.name for n in nodes if n.status.allocatable.get("nvidia.com/gpu") == "4")
    return str(node)


def a_hog(name: str, node: str, gpus: int) -> dict[str, Any]:
    """Someone else's pod, bound to NODE, holding its GPUs."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "hog", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }


def test_a_relist_read_before_a_pod_went_does_not_bring_it_back(
    cluster: LocalCluster,
    namespace: str,
    api_client: client.ApiClient,
    proxied_operator: tuple[OperatorProcess, ApiProxy],
) -> None:
    _, proxy = proxied_operator
    core = client.CoreV1Api(api_client)
    node = l4x4_node(api_client)
    wait_for(
        lambda: not core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items,
        TIMEOUT,
        f"{node} to be free of earlier tests' pods",
    )
    # kopf lists pods before it watches them: a deletion before its watch is open reaches it as a
    # list without the hog, never as an event (the operator had just started; once in CI, under load).
    wait_for(lambda: proxy.watching("pods"), TIMEOUT, "the operator to watch pods")
    core.create_namespaced_pod(namespace, a_hog("hog", node, 4))
    wait_for(lambda: core.read_namespaced_pod("hog", namespace).status.phase == "Running", TIMEOUT, "the hog to run")
    with proxy.stale_lists("pods"):  # every relist from here on reads the cluster as it was with the hog
        core.delete_namespaced_pod("hog", namespace, grace_period_seconds=0)
        wait_for(lambda: proxy.saw("pods", "DELETED", namespace, "hog"), TIMEOUT, "the watch to report the deletion")
        # Relists older than that deletion run every few seconds meanwhile; the job needs the hog's GPUs.
        spot_l4 = a_training_job("after-hog").gpu_type("NVIDIA-L4").spot("Only").replicas(1).gpus(4)
        apply(cluster, namespace, spot_l4.set("checkpoint.path", "/ckpt").obj())
        status = wait_phase(cluster, namespace, "after-hog", "Running")["status"]
        assert status["placement"]["nodes"] == [node]
        # Its worker, created after the stale list was read, survives the stale relists that follow.
        served = proxy.stale_served["pods"]
        wait_for(lambda: proxy.stale_served["pods"] >= served + 2, RELIST_SECONDS * 10, "two more stale relists")
        status = job(cluster, namespace, "after-hog")["status"]
        assert (status["phase"], status["gangGeneration"], status.get("restarts", 0)) == ("Running", 1, 0)
