"""A TTL cache in front of any carbon source, which also rides out the source's outages."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from aisched.policy.carbon import Forecast, ForecastCoverageError, IntensityPoint
from aisched.sources.carbon.base import CarbonSource, CarbonSourceError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class _Entry(Generic[T]):
    fetched_at: datetime
    start: datetime
    end: datetime
    value: T


class CachedCarbonSource:
    """Answers from memory for `ttl`; on a failure, from an answer up to `max_stale` old.

    A forecast is fetched for a little longer than asked (one TTL) so that the next
    calls, made a little later for a window a little later, are answered from it.
    `last_error` keeps the failure behind the latest stale answer (None once fresh).
    """

    def __init__(
        self,
        inner: CarbonSource,
        *,
        ttl: timedelta,
        max_stale: timedelta,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.name = inner.name
        self._inner = inner
        self._ttl = ttl
        self._max_stale = max_stale
        self._clock = clock
        self._forecasts: dict[str, _Entry[Forecast]] = {}
        self._currents: dict[str, _Entry[IntensityPoint]] = {}
        self.last_error: CarbonSourceError | None = None

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        now = self._clock()
        entry = self._forecasts.get(region)
        if entry and now - entry.fetched_at < self._ttl and entry.start <= start and end <= entry.end:
            return self._clip(entry.value, start, end)
        try:
            value = await self._inner.forecast(region, start, end + self._ttl)
        except CarbonSourceError as exc:
            if entry is None or now - entry.fetched_at > self._max_stale or entry.value.end <= start:
                raise
            self._note_stale(exc, entry.fetched_at)
            return self._clip(entry.value, start, end)
        self.last_error = None
        self._forecasts[region] = _Entry(now, start, end + self._ttl, value)
        return self._clip(value, start, end)

    async def current(self, region: str) -> IntensityPoint:
        now = self._clock()
        entry = self._currents.get(region)
        if entry and now - entry.fetched_at < self._ttl:
            return entry.value
        try:
            value = await self._inner.current(region)
        except CarbonSourceError as exc:
            if entry is None or now - entry.fetched_at > self._max_stale:
                raise
            self._note_stale(exc, entry.fetched_at)
            return entry.value
        self.last_error = None
        self._currents[region] = _Entry(now, now, now, value)
        return value

    def _note_stale(self, error: CarbonSourceError, fetched_at: datetime) -> None:
        self.last_error = error
        log.warning("%s; using the answer fetched at %s", error, fetched_at.isoformat())

    @staticmethod
    def _clip(forecast: Forecast, start: datetime, end: datetime) -> Forecast:
        try:
            return forecast.clip(start, end)
        except ForecastCoverageError:
            return forecast
