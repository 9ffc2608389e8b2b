"""The cache: answers from memory while fresh, stale while a fresh one is fetched beside the caller,
bounded by deadlines and a circuit against hanging and dripping sources (real local HTTP servers)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from aisched.policy.carbon import Forecast, IntensityPoint, forecast_from_points
from aisched.policy.circuit import Breaker
from aisched.settings import CarbonSettings
from aisched.sources.carbon import (
    CachedCarbonSource,
    CarbonForecastPendingError,
    CarbonSourceError,
    CarbonSourceHTTPError,
    CarbonSourceTimeoutError,
    NationalGridSource,
    build_carbon_source,
)
from tests.unit.sources.carbon import payloads
from tests.unit.sources.carbon.conftest import Reply, ScriptedServer
from tests.unit.sources.carbon.running import FAST

pytestmark = pytest.mark.loopback  # a server on 127.0.0.1 (tests/unit/conftest.py)

T0 = datetime(2024, 5, 21, 10, tzinfo=UTC)
ROWS = [(10, 0, 200.0, None), (10, 30, 180.0, None), (11, 0, 150.0, None), (11, 30, 120.0, None), (12, 0, 100.0, None)]


@pytest.mark.asyncio
async def test_fresh_answers_come_from_memory_and_stale_ones_ride_out_an_outage(server: ScriptedServer) -> None:
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
            # Stale: answered from memory at once, while a fresh answer is fetched beside the caller.
            seen.append((await cached.forecast("GB", now[0], now[0] + timedelta(hours=2))).values)
            await cached.fetcher.settle()
            assert isinstance(cached.last_error, CarbonSourceHTTPError)
            now[0] = T0 + timedelta(hours=7)
            with pytest.raises(CarbonSourceHTTPError):
                await cached.forecast("GB", now[0], now[0] + timedelta(hours=2))
            return seen

    seen = await scenario()
    assert seen == [
        (200.0, 180.0, 150.0, 120.0),
        (200.0, 180.0, 150.0, 120.0, 100.0),
        (200.0, 180.0, 150.0, 120.0, 100.0),
    ]


def bounded(server: ScriptedServer, clock: list[datetime]) -> Callable[[httpx.AsyncClient], CachedCarbonSource]:
    """A cache whose fetches end after half a second and whose callers wait a fifth of one."""

    def make(client: httpx.AsyncClient) -> CachedCarbonSource:
        return CachedCarbonSource(
            NationalGridSource(client, server.url, FAST),
            ttl=timedelta(minutes=5),
            max_stale=timedelta(hours=6),
            deadline=timedelta(seconds=0.5),
            answer_wait=timedelta(seconds=0.2),
            breaker=Breaker(threshold=2, open_for=timedelta(minutes=1)),
            clock=lambda: clock[0],
        )

    return make


async def answered(ask: Awaitable[object]) -> object:
    """The ask's answer, or the error it raised."""
    try:
        return await ask
    except CarbonSourceError as error:
        return error


@pytest.mark.parametrize(
    "reply",
    [Reply(payloads.gb_national(ROWS), delay_s=30), Reply(payloads.gb_national(ROWS), drip_s=0.05)],
    ids=["hanging", "dripping"],
)
@pytest.mark.asyncio
async def test_a_hanging_or_dripping_source_costs_the_caller_its_answer_wait_only(
    server: ScriptedServer, reply: Reply
) -> None:
    # A drip sends a byte every 50 ms: well inside the 200 ms per-read timeout, so only the fetch's
    # deadline ends it. The caller waits its answer wait and goes on; the circuit then opens.
    clock = [T0]
    server.reply("/intensity/2024-05-21T10:00Z/2024-05-21T12:05Z", reply)

    async def scenario() -> None:
        async with httpx.AsyncClient(trust_env=False) as client:
            cached = bounded(server, clock)(client)
            answer = await answered(cached.forecast("GB", T0, T0 + timedelta(hours=2)))
            # The caller has its answer (a timeout) while the fetch still runs: it waited its answer
            # wait, not the source (no stopwatch, which a busy machine fails).
            assert isinstance(answer, CarbonSourceTimeoutError), answer
            assert cached.fetcher.fetching(("forecast", "GB"))
            await cached.fetcher.settle()
            assert isinstance(cached.last_error, CarbonSourceTimeoutError)
            await answered(cached.forecast("GB", T0, T0 + timedelta(hours=2)))
            await cached.fetcher.settle()
            assert cached.fetcher.circuit("GB").is_open
            asked = len(server.requests)
            answer = await answered(cached.forecast("GB", T0, T0 + timedelta(hours=2)))
            # An open circuit answers without asking the source, so without waiting on it.
            assert isinstance(answer, CarbonSourceError) and "not asked about GB until" in str(answer)
            assert len(server.requests) == asked and not cached.fetcher.fetching(("forecast", "GB"))

    await scenario()


@pytest.mark.asyncio
async def test_a_stale_answer_serves_at_once_while_a_hung_source_is_asked_beside_the_caller(
    server: ScriptedServer,
) -> None:
    clock = [T0]
    server.reply("/intensity/2024-05-21T10:00Z/2024-05-21T12:05Z", Reply(payloads.gb_national(ROWS)))
    server.reply("/intensity/2024-05-21T10:06Z/2024-05-21T12:11Z", Reply(payloads.gb_national(ROWS), delay_s=30))

    async def scenario() -> None:
        async with httpx.AsyncClient(trust_env=False) as client:
            cached = bounded(server, clock)(client)
            await cached.forecast("GB", T0, T0 + timedelta(hours=2))
            clock[0] = T0 + timedelta(minutes=6)
            answer = await cached.forecast("GB", clock[0], clock[0] + timedelta(hours=2))
            # Served while the hung fetch still runs: the caller did not wait for it (no stopwatch,
            # which a busy machine fails).
            assert isinstance(answer, Forecast)
            assert cached.fetcher.fetching(("forecast", "GB"))
            await cached.fetcher.settle()
            assert isinstance(cached.last_error, CarbonSourceTimeoutError)

    await scenario()


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


@pytest.mark.asyncio
async def test_zones_the_source_does_not_know_open_their_own_circuits_only(server: ScriptedServer) -> None:
    # Four tenants' jobs name zones the source does not know, each asked until its circuit opens.
    server.reply("/intensity/2024-05-21T10:00Z/2024-05-21T12:05Z", Reply(payloads.gb_national(ROWS)))
    clock = [T0]
    async with httpx.AsyncClient(trust_env=False) as client:
        cached = bounded(server, clock)(client)
        for _ in range(3):
            for zone in ("atlantis", "lemuria", "mu", "hy-brasil"):
                answer = await answered(cached.forecast(zone, T0, T0 + timedelta(hours=2)))
                assert isinstance(answer, CarbonSourceError) and zone in str(answer)
                await cached.fetcher.settle()
        assert all(cached.fetcher.circuit(zone).is_open for zone in ("atlantis", "lemuria", "mu", "hy-brasil"))
        # Another tenant's job in a zone the source knows is still planned on its forecast.
        forecast = await cached.forecast("GB", T0, T0 + timedelta(hours=2))
        assert forecast.values[:3] == (200.0, 180.0, 150.0)
        assert not cached.fetcher.circuit("GB").is_open
        assert len(server.requests) == 1


@pytest.mark.asyncio
async def test_a_tenant_inventing_zones_grows_the_circuits_kept_no_further_than_their_bound(
    server: ScriptedServer,
) -> None:
    clock = [T0]
    async with httpx.AsyncClient(trust_env=False) as client:
        cached = bounded(server, clock)(client)
        cached.fetcher.max_circuits = 16
        for index in range(200):
            clock[0] += timedelta(seconds=10)  # the budget for zones never answered: one each 10 s
            await answered(cached.forecast(f"zone-{index}", T0, T0 + timedelta(hours=2)))
            await cached.fetcher.settle()
        assert cached.fetcher.failing_subjects() == 16
        assert cached.fetcher.error("zone-199") is not None  # the latest are kept, the oldest forgotten
        assert cached.fetcher.error("zone-0") is None
        assert not cached.fetcher.fetching(("forecast", "zone-199"))
        assert not cached.fetcher._tasks  # a fetch that ended leaves nothing behind


@pytest.mark.asyncio
async def test_zones_never_answered_are_asked_within_a_budget_and_known_ones_are_never_held_by_it(
    server: ScriptedServer,
) -> None:
    """A tenant naming a new zone each job would have the source asked without end (a shared API key's
    rate limit spent on it): zones never answered get a burst of 8, then 6 a minute."""
    server.reply("/intensity/2024-05-21T10:00Z/2024-05-21T12:05Z", Reply(payloads.gb_national(ROWS)))
    clock = [T0]
    async with httpx.AsyncClient(trust_env=False) as client:
        cached = bounded(server, clock)(client)
        await cached.forecast("GB", T0, T0 + timedelta(hours=2))  # answered: known from here on
        for index in range(100):
            await answered(cached.forecast(f"zone-{index}", T0, T0 + timedelta(hours=2)))
            await cached.fetcher.settle()
        assert cached.fetcher.failing_subjects() == 7  # asked and refused; GB took one of the burst of 8
        clock[0] += timedelta(minutes=6)  # the GB answer is stale now, and the budget refilled
        for index in range(100, 200):
            await answered(cached.forecast(f"zone-{index}", T0, T0 + timedelta(hours=2)))
            await cached.fetcher.settle()
        assert cached.fetcher.failing_subjects() == 7 + 8
        # Its budget spent, a known zone is still asked for a fresh answer.
        await cached.forecast("GB", T0, T0 + timedelta(hours=2))
        await cached.fetcher.settle()
        assert len(server.requests) == 2


class Gated:
    """A source that answers GB only once the test opens its gate, and knows no other zone."""

    name = "Gated"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.asked: list[str] = []

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        self.asked.append(region)
        if region != "GB":
            raise CarbonSourceHTTPError(self.name, f"forecast for {region}", "404 unknown region", status=404)
        await self.gate.wait()
        return forecast_from_points("GB", [IntensityPoint(start, 200.0), IntensityPoint(end, 100.0)])

    async def current(self, region: str) -> IntensityPoint:
        raise AssertionError("not asked")


@pytest.mark.asyncio
async def test_a_zone_not_answered_yet_is_told_from_a_failing_one_and_a_priority_read_skips_the_budget() -> None:
    """A restarted operator's first reads are under way, or wait for the budget: that is no source down
    (a caller may wait a bounded while), and a zone a running job depends on is read at once."""
    clock = [T0]
    inner = Gated()
    cached = CachedCarbonSource(
        inner, ttl=timedelta(minutes=5), max_stale=timedelta(hours=6), answer_wait=timedelta(0), clock=lambda: clock[0]
    )
    first = await answered(cached.forecast("GB", T0, T0 + timedelta(hours=2)))
    assert isinstance(first, CarbonForecastPendingError) and first.since == T0, first
    clock[0] += timedelta(seconds=5)
    again = await answered(cached.forecast("GB", T0, T0 + timedelta(hours=2)))
    assert isinstance(again, CarbonForecastPendingError) and again.since == T0  # asked for since the first ask
    inner.gate.set()
    await cached.fetcher.settle()
    assert (await cached.forecast("GB", T0, T0 + timedelta(hours=2))).values[0] == 200.0
    # Invented zones spend the budget of zones never answered (GB took one of its 8) ...
    for index in range(7):
        await answered(cached.forecast(f"zone-{index}", T0, T0 + timedelta(hours=2)))
        await cached.fetcher.settle()
    asked = len(inner.asked)
    # ... so a new zone waits its turn, pending (not failing) meanwhile, and is not asked ...
    waiting = await answered(cached.forecast("FR", T0, T0 + timedelta(hours=2)))
    assert isinstance(waiting, CarbonForecastPendingError) and len(inner.asked) == asked
    # ... unless a running job depends on it: then it is asked at once, and its failure is a failure.
    await answered(cached.forecast("FR", T0, T0 + timedelta(hours=2), priority=True))
    await cached.fetcher.settle()
    assert inner.asked[asked:] == ["FR"]
    failed = await answered(cached.forecast("FR", T0, T0 + timedelta(hours=2)))
    assert isinstance(failed, CarbonSourceHTTPError) and not isinstance(failed, CarbonForecastPendingError)
