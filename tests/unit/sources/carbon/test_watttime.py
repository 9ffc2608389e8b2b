"""WattTime v3 against a local server: login, bearer token, units, re-login on 401."""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from aisched.policy.carbon import Forecast, IntensityPoint
from aisched.sources.carbon import CarbonSourceDataError, CarbonSourceHTTPError, WattTimeSource
from tests.unit.sources.carbon import payloads
from tests.unit.sources.carbon.conftest import Reply, ScriptedServer
from tests.unit.sources.carbon.running import FAST, call

pytestmark = pytest.mark.loopback  # a server on 127.0.0.1 (tests/unit/conftest.py)

NOW = datetime(2024, 5, 21, 10, 2, tzinfo=UTC)


def make(server: ScriptedServer, tmp_path: Path) -> Callable[[httpx.AsyncClient], WattTimeSource]:
    password = tmp_path / "password"
    password.write_text("hunter2")

    def build(client: httpx.AsyncClient) -> WattTimeSource:
        return WattTimeSource(
            client, f"{server.url}/v3", f"{server.url}/login", "alice", password, policy=FAST, clock=lambda: NOW
        )

    return build


def test_logs_in_once_and_converts_pounds_per_mwh(server: ScriptedServer, tmp_path: Path) -> None:
    server.reply("/login", Reply({"token": "tok-1"}))
    server.reply("/v3/forecast", Reply(payloads.watttime_forecast((1000.0, 800.0, 600.0, 400.0))))

    async def twice(source: WattTimeSource) -> tuple[Forecast, IntensityPoint]:
        first = await source.forecast("CAISO_NORTH", NOW, NOW + timedelta(minutes=15))
        return first, await source.current("CAISO_NORTH")

    fc, point = call(make(server, tmp_path), twice)
    assert fc.step == timedelta(minutes=5)
    assert fc.values == pytest.approx((453.59237, 362.873896, 272.155422, 181.436948))
    assert point.grams_per_kwh == pytest.approx(453.59237)
    (login,) = server.asked("/login")
    assert login.headers["authorization"] == "Basic " + base64.b64encode(b"alice:hunter2").decode()
    asked = server.asked("/v3/forecast")
    assert [r.headers["authorization"] for r in asked] == ["Bearer tok-1", "Bearer tok-1"]
    assert asked[0].query["region"] == "CAISO_NORTH"
    assert asked[0].query["signal_type"] == "co2_moer"


def test_an_expired_token_logs_in_again_once(server: ScriptedServer, tmp_path: Path) -> None:
    server.reply("/login", Reply({"token": "old"}), Reply({"token": "new"}))
    server.reply(
        "/v3/forecast",
        Reply({"error": "token expired"}, status=401),
        Reply(payloads.watttime_forecast((500.0, 500.0))),
    )
    fc = call(make(server, tmp_path), lambda s: s.forecast("CAISO_NORTH", NOW, NOW + timedelta(minutes=5)))
    assert fc.values == pytest.approx((226.796185, 226.796185))
    assert [r.headers["authorization"] for r in server.asked("/v3/forecast")] == ["Bearer old", "Bearer new"]


def test_wrong_password_is_an_http_error(server: ScriptedServer, tmp_path: Path) -> None:
    server.reply("/login", Reply({"error": "invalid credentials"}, status=403))
    with pytest.raises(CarbonSourceHTTPError, match="log in: HTTP 403"):
        call(make(server, tmp_path), lambda s: s.current("CAISO_NORTH"))


def test_signal_index_is_a_percentile(server: ScriptedServer, tmp_path: Path) -> None:
    server.reply("/login", Reply({"token": "t"}))
    server.reply("/v3/signal-index", Reply(payloads.watttime_signal_index(47.0)))
    assert call(make(server, tmp_path), lambda s: s.signal_index("CAISO_NORTH")) == 47.0


def test_a_forecast_in_percentiles_is_refused(server: ScriptedServer, tmp_path: Path) -> None:
    server.reply("/login", Reply({"token": "t"}))
    server.reply("/v3/forecast", Reply(payloads.watttime_forecast((40.0,), units="percentile")))
    with pytest.raises(CarbonSourceDataError, match="not an emissions rate"):
        call(make(server, tmp_path), lambda s: s.current("CAISO_NORTH"))


def test_an_empty_forecast_is_a_data_error(server: ScriptedServer, tmp_path: Path) -> None:
    server.reply("/login", Reply({"token": "t"}))
    server.reply("/v3/forecast", Reply({"data": [], "meta": {"units": "lbs_co2_per_mwh"}}))
    with pytest.raises(CarbonSourceDataError, match="no data points"):
        call(make(server, tmp_path), lambda s: s.current("CAISO_NORTH"))
