"""Electricity Maps v3 against a local server answering in the documented shapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from aisched.policy.carbon import Forecast
from aisched.sources.carbon import (
    CarbonSourceDataError,
    CarbonSourceError,
    CarbonSourceHTTPError,
    ElectricityMapsSource,
)
from tests.unit.sources.carbon import payloads
from tests.unit.sources.carbon.conftest import Reply, ScriptedServer
from tests.unit.sources.carbon.running import FAST, call

pytestmark = pytest.mark.loopback  # a server on 127.0.0.1 (tests/unit/conftest.py)

START = datetime(2024, 5, 21, 10, 40, tzinfo=UTC)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "api-key"
    path.write_text("s3cret-token\n")
    return path


def forecast(server: ScriptedServer, key_file: Path | None, hours: int = 4) -> Forecast:
    def make(client: httpx.AsyncClient) -> ElectricityMapsSource:
        return ElectricityMapsSource(client, f"{server.url}/v3", key_file, FAST)

    async def ask(source: ElectricityMapsSource) -> Forecast:
        return await source.forecast("DE", START, START + timedelta(hours=hours))

    return call(make, ask)


def test_forecast_sends_the_token_and_zone_and_fills_the_current_hour(server: ScriptedServer, key_file: Path) -> None:
    server.reply("/v3/carbon-intensity/forecast", Reply(payloads.electricitymaps_forecast()))
    server.reply("/v3/carbon-intensity/latest", Reply(payloads.electricitymaps_latest()))
    fc = forecast(server, key_file)
    assert fc.start == datetime(2024, 5, 21, 10, tzinfo=UTC)
    assert fc.step == timedelta(hours=1)
    assert fc.values == (302.0, 269.0, 254.0, 210.0, 198.0)
    assert fc.issued_at == datetime(2024, 5, 21, 10, 45, 51, 290000, tzinfo=UTC)
    (asked,) = server.asked("/v3/carbon-intensity/forecast")
    assert asked.query == {"zone": "DE"}
    assert asked.headers["auth-token"] == "s3cret-token"


def test_current_reads_the_latest_value(server: ScriptedServer, key_file: Path) -> None:
    server.reply("/v3/carbon-intensity/latest", Reply(payloads.electricitymaps_latest("FR", 41.0)))
    point = call(
        lambda client: ElectricityMapsSource(client, f"{server.url}/v3", key_file, FAST),
        lambda source: source.current("FR"),
    )
    assert (point.time, point.grams_per_kwh) == (datetime(2024, 5, 21, 10, tzinfo=UTC), 41.0)


def test_a_zone_without_a_current_value_is_a_data_error(server: ScriptedServer, key_file: Path) -> None:
    server.reply("/v3/carbon-intensity/latest", Reply(payloads.electricitymaps_latest(value=None)))
    with pytest.raises(CarbonSourceDataError, match="no current value"):
        call(
            lambda client: ElectricityMapsSource(client, f"{server.url}/v3", key_file, FAST),
            lambda source: source.current("DE"),
        )


def test_a_bad_token_is_an_http_error_without_retries(server: ScriptedServer, key_file: Path) -> None:
    server.reply("/v3/carbon-intensity/forecast", Reply({"status": "error", "message": "Invalid token"}, status=401))
    with pytest.raises(CarbonSourceHTTPError, match="Invalid token") as raised:
        forecast(server, key_file)
    assert raised.value.status == 401
    assert len(server.asked("/v3/carbon-intensity/forecast")) == 1


def test_a_body_without_a_forecast_is_a_data_error(server: ScriptedServer, key_file: Path) -> None:
    server.reply("/v3/carbon-intensity/forecast", Reply({"zone": "DE", "history": []}))
    with pytest.raises(CarbonSourceDataError, match="at forecast"):
        forecast(server, key_file)


def test_html_instead_of_json_is_a_data_error(server: ScriptedServer, key_file: Path) -> None:
    server.reply("/v3/carbon-intensity/forecast", Reply("<html><body>Maintenance</body></html>"))
    with pytest.raises(CarbonSourceDataError, match=r"not JSON.*Maintenance"):
        forecast(server, key_file)


def test_a_missing_key_file_says_so(server: ScriptedServer, tmp_path: Path) -> None:
    with pytest.raises(CarbonSourceError, match="read the API key"):
        forecast(server, tmp_path / "absent")
    assert server.requests == []
