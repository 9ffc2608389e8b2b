"""A tenant's PromQL metric reads its own namespace only, and one tenant's hanging queries stop no one else.

First, without a cluster: the Prometheus source against a real Prometheus scraping
two namespaces' series, asked what the attacks on tenancy ask.

Then the operator: the load exporter and the real Prometheus of test_inferenceservice
serve `http_requests_total{namespace, pod}`, and the operator reads that Prometheus
through a proxy this module runs, which holds every query naming one namespace (the
slow tenant) far past the operator's query timeout and passes the others through.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
import yaml
from kubernetes import client
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from aisched.api.inference_service import MetricSpec, MetricType
from aisched.sources.prometheus import PrometheusError, PrometheusSource
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

pytestmark = pytest.mark.integration
HOLD_SECONDS = 30
OWN, OTHER = "team-a", "team-b"


# -- the source against a real Prometheus ----------------------------------------------


@pytest.fixture(scope="module")
def two_tenants_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus scraping secret_metric: 1 per pod in team-a (two pods), 42 in team-b."""
    registry = CollectorRegistry()
    gauge = Gauge("secret_metric", "A value each team keeps to itself.", ["namespace", "pod"], registry=registry)
    gauge.labels(OWN, "a-1").set(1)
    gauge.labels(OWN, "a-2").set(1)
    gauge.labels(OTHER, "b-1").set(42)
    (exporter_port, port) = free_ports(2)
    server, thread = start_http_server(exporter_port, addr="127.0.0.1", registry=registry)
    workdir = tmp_path_factory.mktemp("prometheus-tenants")
    scrape = {"job_name": "tenants", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}
    (workdir / "prometheus.yml").write_text(
        yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [scrape]})
    )
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: hack/install-tools.sh (apt-get install -y prometheus)")
    url = f"http://127.0.0.1:{port}"
    with (workdir / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: _scraped(url), 60, "Prometheus to scrape both teams' series")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _scraped(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?query=count(secret_metric)", timeout=1) as response:
            result = json.loads(response.read())["data"]["result"]
    except OSError:
        return False
    return bool(result) and result[0]["value"][1] == "3"


def read_as_tenant(url: str, query: str) -> float | None:
    async def read() -> float | None:
        async with PrometheusSource(url, timeout_seconds=5) as source:
            spec = MetricSpec(type=MetricType.PROMQL, query=query, target_per_replica=1)
            sample = await source.service_metric(spec, OWN, [])
        return None if sample is None else sample.value

    return asyncio.run(read())


@pytest.mark.parametrize(
    ("query", "own_value"),
    [
        ("sum(secret_metric)", 2),
        ('sum(secret_metric{namespace="team-b"})', None),
        ('sum(secret_metric{namespace=~".*"})', 2),
        ('sum(secret_metric{namespace!="team-a"})', None),
        ('sum({__name__=~"secret.*"})', 2),
        ('sum(label_replace(secret_metric, "namespace", "team-b", "", ""))', 2),
        ('sum(secret_metric{namespace="team-b"} or secret_metric)', 2),
        ('max_over_time(sum(secret_metric{namespace="team-b"})[1m:1s])', None),
        ('sum(secret_metric{namespace="team-b"} @ end())', None),
        ('count(secret_metric{job="\\"} or secret_metric{namespace=\\"team-b\\""})', None),
        ('scalar(sum(secret_metric{namespace="team-b"}))', None),  # NaN: no value
    ],
)
def test_a_tenants_query_reads_only_its_own_namespace(
    two_tenants_prometheus: str, query: str, own_value: float | None
) -> None:
    assert read_as_tenant(two_tenants_prometheus, query) == own_value


def test_prometheus_error_text_never_reaches_the_tenant(two_tenants_prometheus: str) -> None:
    # Prometheus names the duplicate series, label sets and all, in this error.
    with pytest.raises(PrometheusError) as raised:
        read_as_tenant(two_tenants_prometheus, "vector(1) + on() secret_metric")
    assert str(raised.value) == "Prometheus rejected the query (execution, HTTP 422); the reason is in the operator log"


# -- the operator -----------------------------------------------------------------------


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


@pytest.mark.usefixtures("proxied_operator")
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


@pytest.mark.usefixtures("proxied_operator")
def test_a_query_that_cannot_be_confined_is_refused_with_a_condition(cluster: LocalCluster, namespace: str) -> None:
    apply(cluster, namespace, promql("odd", "sum(info(up))"))
    wait_for(
        lambda: scaling_condition(cluster, namespace, "odd").get("reason") == "MetricQueryRefused",
        TIMEOUT,
        "the refusal",
    )
    assert "info() reads series beyond its arguments" in scaling_condition(cluster, namespace, "odd")["message"]


@pytest.mark.usefixtures("proxied_operator")
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
