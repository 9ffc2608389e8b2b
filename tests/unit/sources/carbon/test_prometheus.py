"""A Prometheus metric as the carbon source, against a local server speaking the HTTP API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aisched.sources.carbon import CarbonSourceDataError, CarbonSourceHTTPError, PrometheusSource
from tests.unit.sources.carbon import payloads
from tests.unit.sources.carbon.conftest import Reply, ScriptedServer
from tests.unit.sources.carbon.running import FAST, call

pytestmark = pytest.mark.loopback  # a server on 127.0.0.1 (tests/unit/conftest.py)

START = datetime(2024, 5, 21, 10, tzinfo=UTC)
QUERY = 'grid_carbon_intensity_grams_per_kwh{region="{region}"} offset 1d'


def test_query_range_with_the_region_and_step(server: ScriptedServer) -> None:
    t0 = START.timestamp()
    samples = [(t0, "200"), (t0 + 1800, "NaN"), (t0 + 3600, "150.5")]
    server.reply("/api/v1/query_range", Reply(payloads.prometheus_matrix(samples)))
    fc = call(
        lambda c: PrometheusSource(c, server.url, QUERY, timedelta(minutes=30), FAST),
        lambda s: s.forecast("GB", START, START + timedelta(hours=2)),
    )
    assert fc.start == START
    assert fc.values == (200.0, 200.0, 150.5)  # the NaN gap holds the previous value
    (asked,) = server.asked("/api/v1/query_range")
    assert asked.query == {
        "query": 'grid_carbon_intensity_grams_per_kwh{region="GB"} offset 1d',
        "start": f"{t0:.3f}",
        "end": f"{t0 + 7200:.3f}",
        "step": "1800s",
    }


def test_instant_query_for_now(server: ScriptedServer) -> None:
    server.reply("/api/v1/query", Reply(payloads.prometheus_vector(START.timestamp(), "123.4")))
    point = call(
        lambda c: PrometheusSource(c, server.url, QUERY, timedelta(minutes=30), FAST), lambda s: s.current("GB")
    )
    assert (point.time, point.grams_per_kwh) == (START, 123.4)


def test_a_region_cannot_close_the_string_it_is_spliced_into(server: ScriptedServer) -> None:
    # A region comes from a tenant's spec; the CRD refuses quotes, but an object from before it must not
    # turn the query into one that selects someone else's series.
    server.reply("/api/v1/query", Reply(payloads.prometheus_vector(START.timestamp(), "1")))
    hostile = 'GB"} or vector(0) or {a="'
    call(lambda c: PrometheusSource(c, server.url, QUERY, timedelta(minutes=30), FAST), lambda s: s.current(hostile))
    (asked,) = server.asked("/api/v1/query")
    assert (
        asked.query["query"] == 'grid_carbon_intensity_grams_per_kwh{region="GB\\"} or vector(0) or {a=\\""} offset 1d'
    )


def test_more_than_one_series_is_refused(server: ScriptedServer) -> None:
    server.reply("/api/v1/query_range", Reply(payloads.prometheus_matrix([(START.timestamp(), "1")], series=2)))
    with pytest.raises(CarbonSourceDataError, match="returned 2 series"):
        call(
            lambda c: PrometheusSource(c, server.url, QUERY, timedelta(minutes=30), FAST),
            lambda s: s.forecast("GB", START, START + timedelta(hours=1)),
        )


def test_a_bad_query_reports_prometheus_error(server: ScriptedServer) -> None:
    server.reply("/api/v1/query", Reply(payloads.prometheus_error('1:12: parse error: unexpected "}"'), status=400))
    with pytest.raises(CarbonSourceHTTPError, match="parse error") as raised:
        call(lambda c: PrometheusSource(c, server.url, "x}", timedelta(minutes=30), FAST), lambda s: s.current("GB"))
    assert raised.value.status == 400


def test_no_samples_is_a_data_error(server: ScriptedServer) -> None:
    server.reply("/api/v1/query_range", Reply(payloads.prometheus_matrix([(START.timestamp(), "NaN")])))
    with pytest.raises(CarbonSourceDataError, match="no usable samples"):
        call(
            lambda c: PrometheusSource(c, server.url, QUERY, timedelta(minutes=30), FAST),
            lambda s: s.forecast("GB", START, START + timedelta(hours=1)),
        )
