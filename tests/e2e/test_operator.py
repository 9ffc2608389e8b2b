"""The operator in-cluster: the chart with the image built here, two replicas on the real nodes, one leader.

Installed into a namespace that enforces the restricted Pod Security Standard,
acting with its ServiceAccount's RBAC, handing over when the leader's pod is
deleted, and scraped by a real Prometheus that finds it through its Service.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from aisched.testing.cluster import LocalCluster, free_ports, wait_for
from tests.e2e.conftest import OPERATOR_NAMESPACE, REAL_NODE_LABEL, get_json, ok
from tests.e2e.training import apply, running_workers, training_job, workers

LEASE = "aisched-leader"
METRICS_SERVICE = "aisched-metrics"
SELECTOR = "app.kubernetes.io/component=operator"


def operator_pods(cluster: LocalCluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(cluster, "pods", "-n", OPERATOR_NAMESPACE, "-l", SELECTOR)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready_replicas(cluster: LocalCluster, count: int) -> list[dict[str, Any]] | None:
    pods = [p for p in operator_pods(cluster) if ready(p)]
    return pods if len(pods) == count else None


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def leader(cluster: LocalCluster) -> str | None:
    """The pod whose replica holds the Lease (identities are '<pod name>_<uuid>')."""
    lease = get_json(cluster, "lease", LEASE, "-n", OPERATOR_NAMESPACE)
    holder: str | None = lease.get("spec", {}).get("holderIdentity")
    return holder.rsplit("_", 1)[0] if holder else None


def test_chart_runs_two_replicas_on_the_real_nodes_under_restricted_pod_security(
    cluster: LocalCluster, operator_release: str
) -> None:
    pods = wait_for(lambda: ready_replicas(cluster, 2), 120, "two Ready replicas")
    nodes = {p["spec"]["nodeName"] for p in pods}
    for node in nodes:
        assert get_json(cluster, "node", node)["metadata"]["labels"].get(REAL_NODE_LABEL) == "true"
    namespace = get_json(cluster, "namespace", OPERATOR_NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # The operator acts as its ServiceAccount, not as an administrator.
    assert {p["spec"]["serviceAccountName"] for p in pods} == {"aisched"}
    # After the queue upgrade's rollout the Lease may still name an old ReplicaSet's pod until its
    # lease lapses and one of these takes it over: a leader among them, within a lease or two.
    names = {p["metadata"]["name"] for p in pods}
    wait_for(lambda: leader(cluster) in names, 120, f"a leader among {sorted(names)} (now {leader(cluster)})")
    listed = cluster.kubectl("get", "tj", "-A")
    assert listed.returncode == 0, listed.stderr


@pytest.fixture
def prometheus(cluster: LocalCluster, tmp_path: Path) -> Iterator[str]:
    """Debian's Prometheus, scraping the operator through its metrics Service.

    Debian builds Prometheus without Kubernetes service discovery, and the host
    has no route to ClusterIPs (kube-proxy's rules live in the nodes' network
    namespaces), so it goes through the API server's proxy to the Service, as
    `kubectl get --raw` would: each scrape reaches one of the Service's endpoints.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (make tools)")
    port = free_ports(1)[0]
    env = dict(line.split("=", 1) for line in (cluster.state_dir / "cluster.env").read_text().split())
    pki = cluster.state_dir / "pki"
    scrape = {
        "job_name": "aisched",
        "scrape_interval": "2s",
        "scheme": "https",
        "metrics_path": f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/services/{METRICS_SERVICE}:metrics/proxy/metrics",
        "tls_config": {
            "ca_file": str(pki / "ca.crt"),
            "cert_file": str(pki / "admin.crt"),
            "key_file": str(pki / "admin.key"),
        },
        "static_configs": [{"targets": [f"127.0.0.1:{env['APISERVER_PORT']}"]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": [scrape]}))
    with (tmp_path / "prometheus.log").open("wb") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=20)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"{base}/api/v1/query?query={urllib.parse.quote(promql)}", timeout=5) as r:
            result: list[dict[str, Any]] = json.loads(r.read())["data"]["result"]
            return result
    except OSError:
        return []


def test_prometheus_scrapes_the_operator_through_its_service(
    cluster: LocalCluster, operator_release: str, prometheus: str
) -> None:
    wait_for(lambda: ready_replicas(cluster, 2), 120, "two Ready replicas")
    wait_for(lambda: query(prometheus, 'up{job="aisched"} == 1'), 90, "the Service's target up")
    build = wait_for(lambda: query(prometheus, "aisched_build_info"), 60, "aisched_build_info scraped")
    assert build[0]["metric"]["job"] == "aisched"
    # Both replicas answer (the standby reports aisched_leader 0): whichever endpoint served it.
    leader = wait_for(lambda: query(prometheus, "aisched_leader"), 60, "aisched_leader scraped")
    assert float(leader[0]["value"][1]) in {0.0, 1.0}


def test_deleting_the_leader_hands_over_without_duplicate_workers(
    cluster: LocalCluster, api_client: client.ApiClient, namespace: str, checkpoint_root: Path
) -> None:
    wait_for(lambda: ready_replicas(cluster, 2), 120, "two Ready replicas")
    apply(cluster, training_job("handover", namespace, checkpoint_root))
    wait_for(lambda: running_workers(cluster, namespace, "handover", 1), 120, "the worker running")
    before = leader(cluster)
    assert before is not None
    ok(cluster.kubectl("delete", "pod", before, "-n", OPERATOR_NAMESPACE, "--wait=false"))
    after = wait_for(lambda: (holder := leader(cluster)) not in (None, before) and holder, 90, "a new leader")
    assert after in {p["metadata"]["name"] for p in operator_pods(cluster)}
    # The new leader adopts the running gang rather than starting another.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        live = [p for p in workers(cluster, namespace, "handover") if not p["metadata"].get("deletionTimestamp")]
        assert len(live) == 1, [p["metadata"]["name"] for p in live]
        time.sleep(1)
