"""One tenant's metric queries never hold up another's autoscaler; a query that cannot be confined is refused.

The controller's loop on a fake loop clock, a kube double that fails on any call not set up, and a
Prometheus source whose httpx MockTransport answers in-process: team-b's queries hang, team-a's answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import parse_qs

import httpx
import pytest

from aisched.controller.serving import InferenceServiceController
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.settings import Settings
from aisched.sources.prometheus import PrometheusSource, Retry
from tests.unit.controller.test_serving_loop import Cluster, KubeDouble, a_service, loop_clock, running

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


def promql_service(name: str, namespace: str, query: str) -> dict[str, Any]:
    obj = a_service(name, autoscaled=True)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["autoscaling"]["metric"] = {"type": "PromQL", "query": query, "targetPerReplica": 10}
    return obj


class TwoTenants:
    """team-b's queries hang until cancelled; team-a's answer 35 at once."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        query = parse_qs(request.content.decode())["query"][0]
        self.queries.append(query)
        if 'namespace="team-b"' in query:
            await asyncio.sleep(3600)
        evaluated = loop_clock().timestamp()
        vector = {"resultType": "vector", "result": [{"metric": {}, "value": [evaluated, "35"]}]}
        return httpx.Response(200, json={"status": "success", "data": vector})


@pytest.fixture
def prometheus() -> tuple[PrometheusSource, TwoTenants]:
    handler = TwoTenants()
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    source = PrometheusSource(
        "http://prometheus", client=client, timeout_seconds=5.0, retry=Retry(retries=0, clock=loop_clock)
    )
    return source, handler


@pytest.fixture
def kube() -> Iterator[KubeDouble]:
    double = KubeDouble()
    yield double
    assert not double.unexpected, f"calls the test did not set up: {double.unexpected}"


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def controller(
    kube: KubeDouble, cluster: Cluster, prometheus: tuple[PrometheusSource, TwoTenants]
) -> InferenceServiceController:
    settings = Settings()
    return InferenceServiceController(
        settings,
        cast(KubeClient, kube),
        Inventory(settings),
        cluster_snapshot=cluster.snapshot,
        prometheus=prometheus[0],
        clock=loop_clock,
    )


async def test_a_hanging_tenant_does_not_hold_up_another_tenants_decision(
    controller: InferenceServiceController, kube: KubeDouble
) -> None:
    async with running(controller):
        for name in ("slow-1", "slow-2", "slow-3"):
            controller.service_seen(promql_service(name, "team-b", "sum(x)"))
        controller.service_seen(promql_service("fast", "team-a", "sum(x)"))
        await asyncio.sleep(0.5)
        # team-a decided and scaled while team-b's three queries still hang (5 s deadline each).
        assert "scale_custom" in kube.of("fast")
        assert all("annotate_custom" not in kube.of(name) for name in ("slow-1", "slow-2", "slow-3"))
        await asyncio.sleep(5)
        assert all("annotate_custom" in kube.of(name) for name in ("slow-1", "slow-2", "slow-3"))
        condition = next(c for c in kube.statuses["slow-1"]["conditions"] if c["type"] == "ScalingActive")
        assert (condition["status"], condition["reason"]) == ("False", "MetricUnavailable")
        assert "did not answer within 5 s" in condition["message"]


async def test_one_tenants_open_circuit_leaves_the_others_asked(
    controller: InferenceServiceController, kube: KubeDouble, prometheus: tuple[PrometheusSource, TwoTenants]
) -> None:
    source, handler = prometheus
    async with running(controller):
        for name in ("slow-1", "slow-2", "slow-3"):
            controller.service_seen(promql_service(name, "team-b", "sum(x)"))
        await asyncio.sleep(6)  # three timeouts: team-b's circuit opens
        assert source.circuit("team-b").is_open
        controller.service_seen(promql_service("fast", "team-a", "sum(x)"))
        await asyncio.sleep(0.5)
        assert "scale_custom" in kube.of("fast")
        assert not source.circuit("team-a").failures
        assert any('namespace="team-a"' in query for query in handler.queries)


async def test_a_query_that_cannot_be_confined_is_refused_with_its_own_reason(
    controller: InferenceServiceController, kube: KubeDouble, prometheus: tuple[PrometheusSource, TwoTenants]
) -> None:
    async with running(controller):
        controller.service_seen(promql_service("odd", "team-a", "sum(info(up))"))
        await asyncio.sleep(0.5)
    condition = next(c for c in kube.statuses["odd"]["conditions"] if c["type"] == "ScalingActive")
    assert (condition["status"], condition["reason"]) == ("False", "MetricQueryRefused")
    assert condition["message"].endswith(
        "(metric.query is not sent: info() reads series beyond its arguments and is not allowed in metric.query)"
    )
    assert len(condition["message"]) <= 512
    assert ("post_event", "MetricQueryRefused") in kube.calls
    assert prometheus[1].queries == []  # never sent


async def test_a_query_too_costly_as_a_whole_is_refused_on_the_service(
    controller: InferenceServiceController, kube: KubeDouble, prometheus: tuple[PrometheusSource, TwoTenants]
) -> None:
    # Each subquery alone is within bounds; nested, 3600 x 3600 evaluations of a series per value.
    attack = 'max_over_time(max_over_time(count_values("v", timestamp(vector(1)))[1h:1s])[1h:1s])'
    async with running(controller):
        controller.service_seen(promql_service("costly", "team-a", attack))
        await asyncio.sleep(0.5)
    condition = next(c for c in kube.statuses["costly"]["conditions"] if c["type"] == "ScalingActive")
    assert (condition["status"], condition["reason"]) == ("False", "MetricQueryRefused")
    assert "nested ones multiplied; this one, 3600 x 3600 = 12960000" in condition["message"]
    assert prometheus[1].queries == []  # never sent
