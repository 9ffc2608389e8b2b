"""GPU energy from DCGM's counter, against a local server answering as Prometheus's query API does."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aisched.sources.energy import GpuEnergySource
from aisched.sources.prometheus import PrometheusError, PrometheusSource, Retry
from tests.unit.sources.carbon.conftest import Reply, ScriptedServer

pytestmark = pytest.mark.loopback  # a server on 127.0.0.1 (tests/unit/conftest.py)

END = datetime(2024, 5, 21, 10, 1, tzinfo=UTC)
START = END - timedelta(minutes=1)
PODS = ["llama-worker-0", "llama-worker-1"]


def _summed(millijoules: str) -> dict[str, Any]:
    """The reply to sum(...): one series without labels, [evaluation time, value as a string]."""
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [END.timestamp(), millijoules]}]},
    }


def _joules(source: GpuEnergySource, pods: list[str] = PODS, start: datetime = START) -> float | None:
    async def ask() -> float | None:
        try:
            return await source.joules("ml", pods, start, END)
        finally:
            await source.prometheus.aclose()

    return asyncio.run(ask())


def _source(server: ScriptedServer, **labels: str) -> GpuEnergySource:
    return GpuEnergySource(PrometheusSource(server.url, timeout_seconds=2.0, retry=Retry(clock=lambda: END)), **labels)


def test_the_counter_increase_over_the_pods_is_the_energy_in_joules(server: ScriptedServer) -> None:
    # Two 700 W GPUs for a minute: 84 kJ, which the counter gives in millijoules.
    server.reply("/api/v1/query", Reply(_summed("84000000")))
    assert _joules(_source(server)) == pytest.approx(84_000.0)
    (asked,) = server.asked("/api/v1/query")
    assert asked.query["query"] == (
        'sum(increase({__name__="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",namespace="ml",'
        'pod=~"llama\\\\-worker\\\\-0|llama\\\\-worker\\\\-1"}[60s]))'
    )
    assert float(asked.query["time"]) == END.timestamp()


def test_exported_labels_where_the_exporter_is_scraped_without_honor_labels(server: ScriptedServer) -> None:
    server.reply("/api/v1/query", Reply(_summed("1000")))
    assert _joules(_source(server, namespace_label="exported_namespace", pod_label="exported_pod")) == 1.0
    (asked,) = server.asked("/api/v1/query")
    assert 'exported_namespace="ml"' in asked.query["query"]
    assert "exported_pod=~" in asked.query["query"]


def test_no_series_for_the_pods_means_no_measurement(server: ScriptedServer) -> None:
    server.reply("/api/v1/query", Reply({"status": "success", "data": {"resultType": "vector", "result": []}}))
    assert _joules(_source(server)) is None


def test_nothing_is_asked_without_pods_or_time(server: ScriptedServer) -> None:
    assert _joules(_source(server), pods=[]) is None
    assert _joules(_source(server), start=END) is None
    assert server.asked("/api/v1/query") == []


def test_a_rejected_query_is_an_error_with_prometheus_reason_in_the_log(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    error = {"status": "error", "errorType": "bad_data", "error": 'unknown function "increse"'}
    server.reply("/api/v1/query", Reply(error, status=400))
    with pytest.raises(PrometheusError, match=r"rejected the query \(bad_data, HTTP 400\)"):
        _joules(_source(server))
    assert 'unknown function "increse"' in caplog.text


def test_garbage_is_an_error_not_a_measurement(server: ScriptedServer) -> None:
    server.reply("/api/v1/query", Reply("<html>502 Bad Gateway</html>", status=502))
    with pytest.raises(PrometheusError, match="502"):
        _joules(_source(server))
