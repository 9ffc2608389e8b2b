"""The TTL cache: answers from memory while fresh, from a stale answer while the source is down."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from aisched.settings import CarbonSettings
from aisched.sources.carbon import (
    CachedCarbonSource,
    CarbonSourceHTTPError,
    NationalGridSource,
    build_carbon_source,
)
from tests.unit.sources.carbon import payloads
from tests.unit.sources.carbon.conftest import Reply, ScriptedServer
from tests.unit.sources.carbon.running import FAST

T0 = datetime(2024, 5, 21, 10, tzinfo=UTC)
ROWS = [(10, 0, 200.0, None), (10, 30, 180.0, None), (11, 0, 150.0, None), (11, 30, 120.0, None), (12, 0, 100.0, None)]


def test_fresh_answers_come_from_memory_and_stale_ones_ride_out_an_outage(server: ScriptedServer) -> None:
    now = [T0]
    server.reply("/intensity/2024-05-21T10:00Z/2024-05-21T12:05Z", Reply(payloads.gb_national(ROWS)))
    server.reply("/intensity/2024-05-21T10:06Z/2024-05-21T12:11Z", Reply("down", status=503))
    server.reply("/intensity/2024-05-21T17:00Z/2024-05-21T19:05Z", Reply("down", status=503))

    async def scenario() -> list[tuple[float, ...]]:
        async with httpx.AsyncClient(trust_env=False) as client:
            cached = CachedCarbonSource(
                NationalGridSource(client, server.url, FAST),
                ttl=timedelta(minutes=5),
                max_stale=timedelta(hours=6),
                clock=lambda: now[0],
            )
            seen = [(await cached.forecast("GB", T0, T0 + timedelta(hours=2))).values]
            now[0] = T0 + timedelta(minutes=3)
            seen.append((await cached.forecast("GB", now[0], now[0] + timedelta(hours=2))).values)
            assert len(server.requests) == 1, "the second ask is answered from memory"
            now[0] = T0 + timedelta(minutes=6)
            seen.append((await cached.forecast("GB", now[0], now[0] + timedelta(hours=2))).values)
            assert isinstance(cached.last_error, CarbonSourceHTTPError)
            now[0] = T0 + timedelta(hours=7)
            with pytest.raises(CarbonSourceHTTPError):
                await cached.forecast("GB", now[0], now[0] + timedelta(hours=2))
            return seen

    seen = asyncio.run(scenario())
    assert seen == [
        (200.0, 180.0, 150.0, 120.0),
        (200.0, 180.0, 150.0, 120.0, 100.0),
        (200.0, 180.0, 150.0, 120.0, 100.0),
    ]


def test_settings_build_each_provider_behind_the_cache(tmp_path: Path) -> None:
    async def build(settings: CarbonSettings) -> str | None:
        async with httpx.AsyncClient(trust_env=False) as client:
            source = build_carbon_source(settings, client)
            return None if source is None else source.name

    csv = tmp_path / "gb.csv"
    assert asyncio.run(build(CarbonSettings(provider="none"))) is None
    assert asyncio.run(build(CarbonSettings(provider="nationalgrid"))) == "nationalgrid"
    assert asyncio.run(build(CarbonSettings(provider="electricitymaps", api_key_file=csv))) == "electricitymaps"
    assert asyncio.run(build(CarbonSettings(provider="watttime", watttime_username="u"))) == "watttime"
    assert asyncio.run(build(CarbonSettings(provider="file", file_path=csv))) == "file"
    assert asyncio.run(build(CarbonSettings(provider="prometheus", prometheus_url="http://p:9090"))) == "prometheus"
    with pytest.raises(ValueError, match="needs file_path"):
        asyncio.run(build(CarbonSettings(provider="file")))


def test_power_per_gpu_falls_back_to_the_default() -> None:
    settings = CarbonSettings(default_gpu_power_watts=123.0)
    assert settings.power_per_gpu("NVIDIA-H100-80GB-HBM3") == 700.0
    assert settings.power_per_gpu("Mystery-GPU") == 123.0
    assert settings.power_per_gpu(None) == 123.0
