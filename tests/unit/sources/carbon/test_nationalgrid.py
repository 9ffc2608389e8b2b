"""The GB carbon intensity API (national and regional) against a local server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aisched.sources.carbon import CarbonSourceDataError, CarbonSourceError, NationalGridSource
from tests.unit.sources.carbon import payloads
from tests.unit.sources.carbon.conftest import Reply, ScriptedServer
from tests.unit.sources.carbon.running import FAST, call

pytestmark = pytest.mark.loopback  # a server on 127.0.0.1 (tests/unit/conftest.py)

START = datetime(2024, 5, 21, 10, 10, tzinfo=UTC)
END = START + timedelta(hours=1, minutes=30)


def test_national_forecast_prefers_actuals_and_asks_for_the_window(server: ScriptedServer) -> None:
    path = "/intensity/2024-05-21T10:10Z/2024-05-21T11:40Z"
    rows = [(10, 0, 200.0, 190.0), (10, 30, 180.0, None), (11, 0, 150.0, None), (11, 30, 120.0, None)]
    server.reply(path, Reply(payloads.gb_national(rows)))
    fc = call(lambda c: NationalGridSource(c, server.url, FAST), lambda s: s.forecast("GB", START, END))
    assert fc.start == datetime(2024, 5, 21, 10, tzinfo=UTC)
    assert fc.step == timedelta(minutes=30)
    assert fc.values == (190.0, 180.0, 150.0, 120.0)
    assert len(server.asked(path)) == 1


def test_regional_forecast_reads_the_region_object(server: ScriptedServer) -> None:
    path = "/regional/intensity/2024-05-21T10:10Z/2024-05-21T11:40Z/regionid/13"
    rows = [(10, 0, 90.0), (10, 30, 80.0), (11, 0, 70.0), (11, 30, 60.0)]
    server.reply(path, Reply(payloads.gb_region(rows, as_list=False)))
    fc = call(lambda c: NationalGridSource(c, server.url, FAST), lambda s: s.forecast("13", START, END))
    assert fc.values == (90.0, 80.0, 70.0, 60.0)
    assert fc.region == "13"


def test_current_national_and_regional(server: ScriptedServer) -> None:
    server.reply("/intensity", Reply(payloads.gb_national([(10, 0, 210.0, None)])))
    server.reply("/regional/regionid/13", Reply(payloads.gb_region([(10, 0, 95.0)], as_list=True)))

    async def both(s: NationalGridSource) -> tuple[float, float]:
        return (await s.current("GB")).grams_per_kwh, (await s.current("13")).grams_per_kwh

    assert call(lambda c: NationalGridSource(c, server.url, FAST), both) == (210.0, 95.0)


def test_a_gap_in_the_half_hours_holds_the_previous_value(server: ScriptedServer) -> None:
    path = "/intensity/2024-05-21T10:10Z/2024-05-21T11:40Z"
    rows = [(10, 0, 200.0, None), (11, 0, 150.0, None), (11, 30, 120.0, None)]
    server.reply(path, Reply(payloads.gb_national(rows)))
    fc = call(lambda c: NationalGridSource(c, server.url, FAST), lambda s: s.forecast("GB", START, END))
    assert fc.values == (200.0, 200.0, 150.0, 120.0)


def test_periods_without_values_are_a_data_error(server: ScriptedServer) -> None:
    server.reply(
        "/intensity", Reply({"data": [{"from": "2024-05-21T10:00Z", "to": "2024-05-21T10:30Z", "intensity": {}}]})
    )
    with pytest.raises(CarbonSourceDataError, match="no value"):
        call(lambda c: NationalGridSource(c, server.url, FAST), lambda s: s.current("GB"))


def test_a_wrongly_shaped_answer_is_a_data_error(server: ScriptedServer) -> None:
    server.reply("/intensity", Reply({"data": {"error": {"code": "400 Bad Request", "message": "Invalid date"}}}))
    with pytest.raises(CarbonSourceDataError, match="unexpected response shape"):
        call(lambda c: NationalGridSource(c, server.url, FAST), lambda s: s.current("GB"))


def test_an_unknown_region_is_refused_before_asking(server: ScriptedServer) -> None:
    with pytest.raises(CarbonSourceError, match="region id from 1 to 17"):
        call(lambda c: NationalGridSource(c, server.url, FAST), lambda s: s.current("London"))
    assert server.requests == []


def test_a_flaky_server_is_retried(server: ScriptedServer) -> None:
    server.reply(
        "/intensity", Reply("upstream timeout", status=504), Reply(payloads.gb_national([(10, 0, 99.0, 98.0)]))
    )
    point = call(lambda c: NationalGridSource(c, server.url, FAST), lambda s: s.current("GB"))
    assert point.grams_per_kwh == 98.0
