"""A tenant's PromQL metric reads its own namespace only, and one tenant's hanging queries stop no one else.

The load exporter and the real Prometheus of test_inferenceservice serve
`http_requests_total{namespace, pod}`. The operator reads that Prometheus through
a proxy this module runs, which holds every query naming one namespace (the slow
tenant) far past the operator's query timeout and passes the others through.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
from kubernetes import client

from aisched.testing.cluster import LocalCluster, apply, free_ports, wait_for
from aisched.testing.operator import OperatorProcess
from tests.integration.test_inferenceservice import (
    TIMEOUT,
    LoadExporter,
    autoscaled,
    load,
    prometheus,
    spec_replicas,
    status_of,
    wait_ready,
)

__all__ = ["load", "prometheus"]  # module fixtures this module uses too

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("proxied_operator")]
HOLD_SECONDS = 30


class SlowTenantProxy:
    """Forwards /api/v1/query to Prometheus; holds the queries that name `slow_namespace`."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.slow_namespace = ""
        self.released = threading.Event()
        self.held = 0
        self.queries: list[str] = []
        self.url = ""


@pytest.fixture(scope="module")
def proxy(prometheus: str) -> Iterator[SlowTenantProxy]:
    state = SlowTenantProxy(prometheus)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            query = parse_qs(body.decode()).get("query", [""])[0]
            state.queries.append(query)
            if state.slow_namespace and f'namespace="{state.slow_namespace}"' in query:
                state.held += 1
                state.released.wait(HOLD_SECONDS)
            request = urllib.request.Request(state.upstream + self.path, data=body, method="POST")
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
            try:
                with urllib.request.urlopen(request, timeout=10) as upstream:
                    status, payload = upstream.status, upstream.read()
            except urllib.error.HTTPError as error:
                status, payload = error.code, error.read()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the operator gave up on a held query

        def log_message(self, format: str, *args: Any) -> None:
            pass

    (port,) = free_ports(1)
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        state.released.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def proxied_operator(operator: OperatorProcess, proxy: SlowTenantProxy) -> Iterator[OperatorProcess]:
    saved = dict(operator.extra_env)
    operator.stop()
    operator.extra_env.update(
        {
            "AISCHED_AUTOSCALER__PROMETHEUS_URL": proxy.url,
            "AISCHED_AUTOSCALER__INTERVAL_SECONDS": "1",
            "AISCHED_AUTOSCALER__QUERY_TIMEOUT_SECONDS": "1",
            "AISCHED_AUTOSCALER__RATE_WINDOW": "5s",
        }
    )
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
        operator.extra_env.clear()
        operator.extra_env.update(saved)
        operator.start()


@pytest.fixture
def other_namespace(api_client: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    name = f"test-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    wait_for(
        lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
        30,
        f"the default ServiceAccount of {name}",
    )
    yield name
    core.delete_namespace(name)


def promql(name: str, query: str) -> dict[str, Any]:
    return autoscaled(name, metric={"type": "PromQL", "query": query, "targetPerReplica": 10}).obj()


def scaling_condition(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    conditions = status_of(cluster, namespace, name).get("conditions", [])
    return next((c for c in conditions if c["type"] == "ScalingActive"), {})


def test_a_query_naming_another_namespace_reads_only_its_own(
    cluster: LocalCluster, namespace: str, other_namespace: str, load: LoadExporter
) -> None:
    # The other team serves 200 requests a second; this one 15. Unscoped, the query below sums 215.
    load.set_rate(other_namespace, "victim", 200.0)
    apply(cluster, other_namespace, autoscaled("victim").obj())
    load.set_rate(namespace, "chat", 15.0)
    apply(cluster, namespace, promql("chat", "sum(rate(http_requests_total[5s]))"))
    apply(cluster, namespace, promql("snoop", f'sum(rate(http_requests_total{{namespace="{other_namespace}"}}[5s]))'))
    wait_ready(cluster, namespace, "chat", 2, timeout=TIMEOUT)
    assert spec_replicas(cluster, namespace, "chat") == 2  # 15 at 10 per replica: its own load, not 215
    wait_for(
        lambda: scaling_condition(cluster, namespace, "snoop").get("reason") == "MetricUnavailable",
        TIMEOUT,
        "the snooping service to find no series",
    )
    assert status_of(cluster, namespace, "snoop").get("currentMetricValue") is None
    assert spec_replicas(cluster, namespace, "snoop") == 1


def test_a_query_that_cannot_be_confined_is_refused_with_a_condition(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, promql("odd", "sum(info(up))"))
    wait_for(
        lambda: scaling_condition(cluster, namespace, "odd").get("reason") == "MetricQueryRefused",
        TIMEOUT,
        "the refusal",
    )
    assert "info() reads series beyond its arguments" in scaling_condition(cluster, namespace, "odd")["message"]


def test_one_tenants_hanging_queries_stop_no_other_tenant(
    cluster: LocalCluster, namespace: str, other_namespace: str, load: LoadExporter, proxy: SlowTenantProxy
) -> None:
    proxy.slow_namespace = other_namespace
    for name in ("slow-a", "slow-b", "slow-c"):
        load.set_rate(other_namespace, name, 0.0)
        apply(cluster, other_namespace, promql(name, "sum(rate(http_requests_total[5s]))"))
    wait_for(
        lambda: any(
            "failures in a row" in scaling_condition(cluster, other_namespace, name).get("message", "")
            for name in ("slow-a", "slow-b", "slow-c")
        ),
        TIMEOUT,
        "the slow tenant's circuit to open",
    )
    assert proxy.held >= 3

    load.set_rate(namespace, "fast", 30.0)
    apply(cluster, namespace, promql("fast", "sum(rate(http_requests_total[5s]))"))
    wait_ready(cluster, namespace, "fast", 3, timeout=TIMEOUT)
    assert scaling_condition(cluster, namespace, "fast").get("status") == "True"
