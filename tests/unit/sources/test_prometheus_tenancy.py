"""The Prometheus source keeps tenants apart: scoped queries, their own circuits, capped answers.

An httpx MockTransport answers in-process (no socket); time is a fake clock and sleeps are recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from aisched.api.inference_service import MetricSpec, MetricType
from aisched.policy.circuit import Breaker
from aisched.policy.promql_scope import TenantScope, check_scoped
from aisched.sources.prometheus import (
    MAX_ANSWER_BYTES,
    PER_TENANT_IN_FLIGHT,
    MetricQueryRefusedError,
    PrometheusError,
    PrometheusSource,
    PrometheusUnavailableError,
    Retry,
)

NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
ONE = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1.7e9, "3"]}]}}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


async def no_sleep(_seconds: float) -> None:
    return None


def query_of(request: httpx.Request) -> str:
    return parse_qs(request.content.decode())["query"][0]


def source(handler: Callable[[httpx.Request], httpx.Response], clock: Clock | None = None) -> PrometheusSource:
    breaker = Breaker(threshold=3, open_for=timedelta(minutes=1))
    retry = Retry(retries=0, breaker=breaker, clock=clock or (lambda: NOW), sleep=no_sleep)
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return PrometheusSource("http://prometheus", client=client, retry=retry)


def promql(query: str) -> MetricSpec:
    return MetricSpec(type=MetricType.PROMQL, query=query, target_per_replica=1)


@pytest.mark.asyncio
async def test_a_tenants_promql_is_sent_confined_to_its_namespace() -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(query_of(request))
        return httpx.Response(200, json=ONE)

    prometheus = source(handler)
    sample = await prometheus.service_metric(promql('sum(secret_metric{namespace="team-b"})'), "team-a", [])
    assert sample is not None and sample.value == 3
    (query,) = sent
    assert query == 'sum ({__name__="secret_metric", namespace="team-b", namespace="team-a"})'
    check_scoped(query, TenantScope("team-a"))


@pytest.mark.asyncio
async def test_a_query_that_cannot_be_confined_is_never_sent() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"must not be asked {query_of(request)}")

    prometheus = source(handler)
    with pytest.raises(MetricQueryRefusedError, match=r"info\(\) reads series"):
        await prometheus.service_metric(promql("info(up)"), "team-a", [])
    assert not prometheus.circuit("team-a").failures


@pytest.mark.asyncio
async def test_operator_queries_are_sent_as_written() -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(query_of(request))
        return httpx.Response(200, json=ONE)

    await source(handler).query("sum(DCGM_FI_DEV_POWER_USAGE)")
    assert sent == ["sum(DCGM_FI_DEV_POWER_USAGE)"]


@pytest.mark.asyncio
async def test_one_tenants_failures_open_only_its_own_circuit() -> None:
    clock = Clock()
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        query = query_of(request)
        asked.append(query)
        if 'namespace="team-b"' in query:
            raise httpx.ReadTimeout("hangs", request=request)
        return httpx.Response(200, json=ONE)

    prometheus = source(handler, clock)
    for _ in range(3):
        with pytest.raises(PrometheusUnavailableError, match="did not answer"):
            await prometheus.service_metric(promql("sum(slow)"), "team-b", [])
        assert await prometheus.service_metric(promql("sum(fast)"), "team-a", []) is not None
    assert prometheus.circuit("team-b").is_open
    assert not prometheus.circuit("team-a").failures
    assert not prometheus.circuit().failures  # the operator's own queries: another circuit again

    asked.clear()
    with pytest.raises(PrometheusUnavailableError, match="namespace team-b's queries"):
        await prometheus.service_metric(promql("sum(slow)"), "team-b", [])
    assert await prometheus.service_metric(promql("sum(fast)"), "team-a", []) is not None
    assert len(asked) == 1  # team-b's open circuit answered without asking

    clock.now += timedelta(minutes=1)  # the trial goes through and fails: open twice as long
    with pytest.raises(PrometheusUnavailableError):
        await prometheus.service_metric(promql("sum(slow)"), "team-b", [])
    assert prometheus.circuit("team-b").open_for == timedelta(minutes=2)


def counting_source(release: asyncio.Event, most: dict[str, int]) -> PrometheusSource:
    """Team-b's queries hang until RELEASE; MOST records the most of each namespace's asked at once."""
    asking: dict[str, int] = {}

    async def slow(request: httpx.Request) -> httpx.Response:
        tenant = "team-b" if 'namespace="team-b"' in query_of(request) else "team-a"
        asking[tenant] = asking.get(tenant, 0) + 1
        most[tenant] = max(most.get(tenant, 0), asking[tenant])
        try:
            if tenant == "team-b":
                await release.wait()
            return httpx.Response(200, json=ONE)
        finally:
            asking[tenant] -= 1

    client = httpx.AsyncClient(transport=httpx.MockTransport(slow))
    return PrometheusSource(
        "http://prometheus", client=client, retry=Retry(retries=0, clock=lambda: NOW, sleep=no_sleep)
    )


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_tenants_queries_over_its_cap_wait_their_turn() -> None:
    release, most = asyncio.Event(), dict[str, int]()
    prometheus = counting_source(release, most)
    hanging = [
        asyncio.create_task(prometheus.service_metric(promql("sum(x)"), "team-b", []))
        for _ in range(PER_TENANT_IN_FLIGHT + 2)
    ]
    await asyncio.sleep(1)
    assert prometheus.in_flight("team-b") == PER_TENANT_IN_FLIGHT
    # Another namespace is asked at once, past team-b's waiting queries.
    assert await prometheus.service_metric(promql("sum(x)"), "team-a", []) is not None
    release.set()
    samples = await asyncio.gather(*hanging)
    assert all(sample is not None for sample in samples)  # each took its turn
    assert most == {"team-b": PER_TENANT_IN_FLIGHT, "team-a": 1}
    assert not prometheus._turns  # nothing kept for namespaces with nothing in flight


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_query_still_waiting_for_its_turn_is_not_sent_and_opens_no_circuit() -> None:
    release, most = asyncio.Event(), dict[str, int]()
    prometheus = counting_source(release, most)
    asked = 2 * PER_TENANT_IN_FLIGHT
    hanging = [asyncio.create_task(prometheus.service_metric(promql("sum(x)"), "team-b", [])) for _ in range(asked)]
    done = await asyncio.gather(*hanging, return_exceptions=True)
    skipped = [e for e in done if isinstance(e, PrometheusUnavailableError) and "not sent this turn" in str(e)]
    timed_out = [e for e in done if isinstance(e, PrometheusUnavailableError) and "did not answer" in str(e)]
    assert (len(skipped), len(timed_out)) == (PER_TENANT_IN_FLIGHT, PER_TENANT_IN_FLIGHT)
    assert most == {"team-b": PER_TENANT_IN_FLIGHT}
    # Those that were asked and hung count; those never sent do not.
    assert prometheus.circuit("team-b").failures == PER_TENANT_IN_FLIGHT
    assert not prometheus.circuit("team-a").failures


class Endless(httpx.AsyncByteStream):
    """A body that never ends; counts what was read of it."""

    def __init__(self) -> None:
        self.read = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            self.read += 65536
            yield b" " * 65536


@pytest.mark.asyncio
async def test_an_answer_is_cut_off_past_the_cap_as_it_is_read() -> None:
    stream = Endless()

    def handler(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=stream)

    with pytest.raises(PrometheusError, match="answer too large"):
        await source(handler).query("up")
    assert stream.read <= MAX_ANSWER_BYTES + 65536


@pytest.mark.asyncio
async def test_a_declared_length_past_the_cap_is_not_read() -> None:
    stream = Endless()

    def handler(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Length": str(MAX_ANSWER_BYTES + 1)}, stream=stream)

    with pytest.raises(PrometheusError, match="answer too large"):
        await source(handler).query("up")
    assert stream.read == 0


@pytest.mark.asyncio
async def test_a_large_answer_is_no_outage() -> None:
    big = json.dumps({"status": "success", "data": {"resultType": "vector", "result": ["x" * MAX_ANSWER_BYTES]}})

    def handler(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=big.encode())

    prometheus = source(handler)
    for _ in range(4):
        with pytest.raises(PrometheusError, match="answer too large"):
            await prometheus.query("up")
    assert not prometheus.circuit().is_open


@pytest.mark.asyncio
async def test_many_series_are_refused_by_count_never_listed() -> None:
    result: list[dict[str, Any]] = [
        {"metric": {"namespace": "team-a", "pod": f"p{i}"}, "value": [1.7e9, "1"]} for i in range(500)
    ]

    def handler(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "vector", "result": result}})

    with pytest.raises(PrometheusError) as raised:
        await source(handler).service_metric(promql("x"), "team-a", [])
    assert str(raised.value) == "the query returned 500 series; wrap it in sum() to get one value"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_waiting_for_a_place_among_all_tenants_opens_no_circuit() -> None:
    release = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        if 'namespace="team-b"' in query_of(request):
            await release.wait()
        return httpx.Response(200, json=ONE)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    retry = Retry(retries=0, clock=Clock(), sleep=no_sleep)
    prometheus = PrometheusSource("http://prometheus", client=client, retry=retry, max_in_flight=1)
    hanging = asyncio.create_task(prometheus.service_metric(promql("sum(x)"), "team-b", []))
    await asyncio.sleep(0)  # team-b takes the one place
    with pytest.raises(PrometheusUnavailableError, match="other namespaces kept Prometheus busy for 5 s"):
        await prometheus.service_metric(promql("sum(x)"), "team-a", [])
    assert not prometheus.circuit("team-a").failures
    with pytest.raises(PrometheusUnavailableError, match="did not answer within 5 s"):
        await hanging
    assert prometheus.circuit("team-b").failures == 1
    assert await prometheus.service_metric(promql("sum(x)"), "team-a", []) is not None  # the place is free again
