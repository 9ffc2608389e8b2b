"""The Prometheus metric source against a real HTTP server on 127.0.0.1 speaking the documented API shapes."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs

import pytest

from aisched.api.inference_service import MetricSpec, MetricType
from aisched.policy.autoscale import MetricSample
from aisched.policy.circuit import Breaker
from aisched.sources.prometheus import (
    MetricNames,
    PrometheusError,
    PrometheusSource,
    PrometheusUnavailableError,
    Retry,
    builtin_query,
)

pytestmark = pytest.mark.loopback  # a server on 127.0.0.1 (tests/unit/conftest.py)

T = TypeVar("T")
EVAL_TIME = 1_740_830_400.5
NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
AT_NOW = Retry(clock=lambda: NOW)  # the circuit's clock: a unit test reads no wall clock


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    delay_seconds: float = 0.0
    drip_seconds: float = 0.0
    """Seconds between the body's bytes: every read gets a byte in time, the whole never comes."""


@dataclass
class FakePrometheus:
    """What the server answers next, and what it was asked."""

    url: str = ""
    reply: Reply = field(default_factory=Reply)
    requests: list[tuple[str, str, dict[str, list[str]]]] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    then: list[Reply] = field(default_factory=list)
    """Replies for the following requests, one each, before `reply` again."""

    def answer(self, status: int, body: Any) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.reply = Reply(status, raw)


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    state = FakePrometheus()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            form = parse_qs(self.rfile.read(length).decode())
            state.requests.append((self.command, self.path, form))
            reply = state.then.pop(0) if state.then else state.reply
            if reply.delay_seconds:
                state.released.wait(reply.delay_seconds)
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            try:
                if not reply.drip_seconds:
                    self.wfile.write(reply.body)
                for index in range(len(reply.body) if reply.drip_seconds else 0):
                    self.wfile.write(reply.body[index : index + 1])
                    self.wfile.flush()
                    if state.released.wait(reply.drip_seconds):
                        break
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield state
    finally:
        state.released.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


async def ask(url: str, promql: str = "up", timeout_seconds: float = 2.0) -> MetricSample | None:
    async with PrometheusSource(url, timeout_seconds=timeout_seconds, retry=AT_NOW) as source:
        return await source.query(promql)


def vector(*values: str) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"pod": f"p{i}"}, "value": [EVAL_TIME, v]} for i, v in enumerate(values)],
        },
    }


def test_one_series_gives_its_value_and_evaluation_time(prometheus: FakePrometheus) -> None:
    prometheus.answer(200, vector("42.5"))
    sample = run(ask(prometheus.url, "sum(x)"))
    assert sample == MetricSample(42.5, datetime.fromtimestamp(EVAL_TIME, UTC))
    ((method, path, form),) = prometheus.requests
    assert (method, path, form["query"], form["timeout"]) == ("POST", "/api/v1/query", ["sum(x)"], ["2s"])


def test_empty_vector_is_missing(prometheus: FakePrometheus) -> None:
    prometheus.answer(200, vector())
    assert run(ask(prometheus.url)) is None


def test_scalar_result(prometheus: FakePrometheus) -> None:
    prometheus.answer(200, {"status": "success", "data": {"resultType": "scalar", "result": [EVAL_TIME, "7"]}})
    sample = run(ask(prometheus.url, "scalar(x)"))
    assert sample is not None
    assert sample.value == 7.0


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
def test_non_numbers_are_missing(prometheus: FakePrometheus, value: str) -> None:
    prometheus.answer(200, vector(value))
    assert run(ask(prometheus.url)) is None


def test_several_series_is_an_error_that_says_what_to_do(prometheus: FakePrometheus) -> None:
    prometheus.answer(200, vector("1", "2"))
    with pytest.raises(PrometheusError, match=r"2 series; wrap it in sum\(\)"):
        run(ask(prometheus.url))


def test_matrix_is_refused(prometheus: FakePrometheus) -> None:
    prometheus.answer(200, {"status": "success", "data": {"resultType": "matrix", "result": []}})
    with pytest.raises(PrometheusError, match="returned a matrix"):
        run(ask(prometheus.url, "x[5m]"))


def test_api_error_names_its_class_and_status_never_its_text(prometheus: FakePrometheus) -> None:
    # Prometheus's error text can quote the label sets of any namespace's series.
    error = {"status": "error", "errorType": "execution", "error": 'found duplicate series: {namespace="team-b"}'}
    prometheus.answer(422, error)
    with pytest.raises(PrometheusError) as raised:
        run(ask(prometheus.url, "sum(}"))
    assert str(raised.value) == "Prometheus rejected the query (execution, HTTP 422); the reason is in the operator log"


def test_an_unknown_error_type_is_not_repeated(prometheus: FakePrometheus) -> None:
    prometheus.answer(400, {"status": "error", "errorType": 'secret{namespace="team-b"}', "error": "x"})
    with pytest.raises(PrometheusError) as raised:
        run(ask(prometheus.url))
    assert "team-b" not in str(raised.value)


def test_html_error_page_is_reported_with_its_status(prometheus: FakePrometheus) -> None:
    prometheus.answer(502, b"<html><body>Bad Gateway</body></html>")
    with pytest.raises(PrometheusError, match=r"HTTP 502 with a body that is not JSON") as raised:
        run(ask(prometheus.url))
    assert "Bad Gateway" not in str(raised.value)


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"[1, 2]", "unexpected JSON"),
        (b'{"status": "success"}', "without a data object"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": {}}}', "not a list"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": [7]}}', "not a series"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": [{"value": "x"}]}}', "not \\[time"),
        (b'{"status": "success", "data": {"resultType": "scalar", "result": [1, "many"]}}', "not \\[time"),
    ],
)
def test_garbage_is_an_error_not_a_value(prometheus: FakePrometheus, body: bytes, complaint: str) -> None:
    prometheus.answer(200, body)
    with pytest.raises(PrometheusError, match=complaint):
        run(ask(prometheus.url))


def test_slow_server_times_out(prometheus: FakePrometheus) -> None:
    prometheus.reply = Reply(200, json.dumps(vector("1")).encode(), delay_seconds=5)
    with pytest.raises(PrometheusError, match=r"did not answer within 0.2 s"):
        run(ask(prometheus.url, timeout_seconds=0.2))


@pytest.mark.parametrize(
    "reply",
    [Reply(200, b"x" * 1000, delay_seconds=30), Reply(200, b" " * 1000, drip_seconds=0.05)],
    ids=["hanging", "dripping"],
)
def test_a_hanging_or_dripping_server_costs_one_timeout_then_the_circuit_answers(
    prometheus: FakePrometheus, reply: Reply
) -> None:
    run(_hang_or_drip(prometheus, reply))


async def _hang_or_drip(prometheus: FakePrometheus, reply: Reply) -> None:
    # The drip's byte every 50 ms passes httpx's per-read timeout; only the query's deadline ends it.
    prometheus.reply = reply
    loop = asyncio.get_running_loop()
    retry = Retry(retries=1, breaker=Breaker(threshold=2, open_for=timedelta(minutes=1)), clock=lambda: NOW)
    async with PrometheusSource(prometheus.url, timeout_seconds=0.3, retry=retry) as source:
        for _ in range(2):
            start = loop.time()
            with pytest.raises(PrometheusUnavailableError, match=r"did not answer within 0\.3 s"):
                await source.query("up")
            assert loop.time() - start < 0.6
        asked = len(prometheus.requests)
        start = loop.time()
        with pytest.raises(PrometheusUnavailableError, match="not asked until"):
            await source.query("up")
        assert loop.time() - start < 0.05 and len(prometheus.requests) == asked


def test_429_and_5xx_are_retried_after_a_jittered_backoff(prometheus: FakePrometheus) -> None:
    run(_retried(prometheus))


async def _retried(prometheus: FakePrometheus) -> None:
    prometheus.answer(200, vector("3"))
    prometheus.then = [Reply(503, b"<html>busy</html>")]
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    retry = Retry(retries=1, backoff_seconds=0.2, clock=lambda: NOW, sleep=record, jitter=lambda: 0.5)
    async with PrometheusSource(prometheus.url, retry=retry) as source:
        sample = await source.query("up")
    assert sample is not None and sample.value == 3
    assert waits == [pytest.approx(0.15)]
    assert len(prometheus.requests) == 2


def test_a_rejected_query_is_no_outage_and_opens_no_circuit(prometheus: FakePrometheus) -> None:
    run(_rejected(prometheus))


async def _rejected(prometheus: FakePrometheus) -> None:
    prometheus.answer(400, {"status": "error", "errorType": "bad_data", "error": "parse error"})
    retry = Retry(breaker=Breaker(threshold=1), clock=lambda: NOW)
    async with PrometheusSource(prometheus.url, retry=retry) as source:
        for _ in range(3):
            with pytest.raises(PrometheusError, match="rejected the query"):
                await source.query("sum(}")
        assert not source.circuit().is_open
    assert len(prometheus.requests) == 3


def test_unreachable_server_is_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(PrometheusError, match=f"cannot reach Prometheus at http://127.0.0.1:{port}"):
        run(ask(f"http://127.0.0.1:{port}"))


def test_path_prefix_and_evaluation_time_are_kept(prometheus: FakePrometheus) -> None:
    prometheus.answer(200, vector("1"))

    async def query() -> None:
        async with PrometheusSource(prometheus.url + "/prometheus/", retry=AT_NOW) as source:
            await source.query("up", at=datetime.fromtimestamp(EVAL_TIME, UTC))

    run(query())
    ((_, path, form),) = prometheus.requests
    assert (path, form["time"]) == ("/prometheus/api/v1/query", [f"{EVAL_TIME:.3f}"])


def test_service_metric_sends_the_builtin_query(prometheus: FakePrometheus) -> None:
    prometheus.answer(200, vector("12"))
    spec = MetricSpec(type=MetricType.REQUESTS_PER_SECOND, target_per_replica=5)

    async def query() -> MetricSample | None:
        async with PrometheusSource(prometheus.url, retry=AT_NOW) as source:
            return await source.service_metric(spec, "ml", ["svc-0", "svc-1"])

    sample = run(query())
    assert sample is not None
    assert sample.value == 12
    ((_, _, form),) = prometheus.requests
    assert form["query"] == [builtin_query(spec, "ml", ["svc-0", "svc-1"])]


def test_service_without_pods_has_no_builtin_metric(prometheus: FakePrometheus) -> None:
    async def query() -> MetricSample | None:
        async with PrometheusSource(prometheus.url, retry=AT_NOW) as source:
            return await source.service_metric(MetricSpec(target_per_replica=5), "ml", [])

    assert run(query()) is None
    assert prometheus.requests == []


# --- the built-in queries -----------------------------------------------------------------------


def spec(kind: MetricType, query: str | None = None) -> MetricSpec:
    return MetricSpec(type=kind, query=query, target_per_replica=1)


def test_requests_per_second_query() -> None:
    assert builtin_query(spec(MetricType.REQUESTS_PER_SECOND), "ml", ["svc-b", "svc-a.x"]) == (
        'sum(rate({__name__="http_requests_total",namespace="ml",pod=~"svc\\\\-a\\\\.x|svc\\\\-b"}[1m]))'
    )


def test_concurrency_query_with_vllm_names() -> None:
    names = MetricNames(concurrency_gauge="vllm:num_requests_running")
    assert builtin_query(spec(MetricType.CONCURRENCY), "ml", ["p"], names) == (
        'sum({__name__="vllm:num_requests_running",namespace="ml",pod=~"p"})'
    )


def test_gpu_utilization_query_averages_per_pod_then_sums() -> None:
    names = MetricNames(gpu_namespace_label="exported_namespace", gpu_pod_label="exported_pod")
    assert builtin_query(spec(MetricType.GPU_UTILIZATION), "ml", ["p"], names) == (
        'sum(avg by (exported_pod) ({__name__="DCGM_FI_DEV_GPU_UTIL",exported_namespace="ml",exported_pod=~"p"}))'
    )


def test_promql_is_the_tenants_until_it_is_scoped() -> None:
    query = 'sum(rate(nginx_ingress_controller_requests{service="svc"}[1m]))'
    assert builtin_query(spec(MetricType.PROMQL, query), "ml", []) == query


def test_label_values_are_escaped() -> None:
    query = builtin_query(spec(MetricType.CONCURRENCY), 'a"b\\c', ["p"])
    assert 'namespace="a\\"b\\\\c"' in query
