"""A cache in front of any carbon source that reads it beside the loop and rides out its outages.

Callers (the scheduling loop) get an answer from memory at once: fresh for `ttl`, then stale
for up to `max_stale` while a fresh one is fetched in the background (`BackgroundFetcher`:
one fetch per region at a time, bounded as a whole by `deadline`, behind a circuit per region
that stops asking a failing source about that region for a while: a job naming a region the
source does not know opens that region's circuit, never another's). Only when memory has
nothing usable does a caller wait, and then at most `answer_wait`, for the fetch it started
(callers that find one under way do not wait); past that it gets a CarbonSourceError, as from
a source that is down, and the loop goes on without carbon. A region never answered and not failing
either (a restarted operator's first reads) is told apart: CarbonForecastPendingError, with when it
was first asked, so a caller may wait a bounded while for it rather than act as if the source were down.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from aisched.policy.carbon import Forecast, ForecastCoverageError, IntensityPoint
from aisched.policy.circuit import Breaker
from aisched.sources.background import MAX_CIRCUITS, BackgroundFetcher, FetchTimeoutError
from aisched.sources.carbon.base import (
    CarbonForecastPendingError,
    CarbonSource,
    CarbonSourceError,
    CarbonSourceTimeoutError,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class _Entry(Generic[T]):
    fetched_at: datetime
    start: datetime
    end: datetime
    value: T


class CachedCarbonSource:
    """Answers from memory; fetches beside the caller; a stale answer serves while a fresh one comes.

    A forecast is fetched for a little longer than asked (one TTL) so that the next
    calls, made a little later for a window a little later, are answered from it.
    `last_error` keeps the failure of the latest fetch of any region (None once one succeeds);
    what a caller is told about its region is that region's own.
    """

    def __init__(
        self,
        inner: CarbonSource,
        *,
        ttl: timedelta,
        max_stale: timedelta,
        deadline: timedelta = timedelta(seconds=30),
        answer_wait: timedelta = timedelta(seconds=2),
        breaker: Breaker | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.name = inner.name
        self._inner = inner
        self._ttl = ttl
        self._max_stale = max_stale
        self._answer_wait = answer_wait.total_seconds()
        self._clock = clock
        self.fetcher = BackgroundFetcher(
            f"carbon source {inner.name}",
            deadline_seconds=deadline.total_seconds(),
            breaker=breaker or Breaker(),
            clock=clock,
        )
        self._forecasts: dict[str, _Entry[Forecast]] = {}
        self._currents: dict[str, _Entry[IntensityPoint]] = {}
        self._pending_since: OrderedDict[str, datetime] = OrderedDict()
        """Regions asked for a forecast never answered, and when first asked (at most MAX_CIRCUITS)."""

    @property
    def last_error(self) -> CarbonSourceError | None:
        return self._as_source_error(self.fetcher.last_error, "fetch")

    async def forecast(self, region: str, start: datetime, end: datetime, *, priority: bool = False) -> Forecast:
        """The forecast of REGION over [start, end); a PRIORITY read (a zone a running job depends on) does
        not wait for the budget of zones never answered (`BackgroundFetcher.start`)."""
        now = self._clock()
        entry = self._forecasts.get(region)
        covers = entry is not None and entry.start <= start and end <= entry.end
        if entry is None or now - entry.fetched_at >= self._ttl or not covers:
            asked_end = end + self._ttl

            def keep(value: object) -> None:
                assert isinstance(value, Forecast)
                self._forecasts[region] = _Entry(now, start, asked_end, value)
                self._pending_since.pop(region, None)

            key = ("forecast", region)
            fetch = functools.partial(self._inner.forecast, region, start, asked_end)
            started = self.fetcher.start(key, fetch, keep, subject=region, budgeted=not priority)
            if started and not self._usable_forecast(entry, now, start):
                await self.fetcher.wait(key, self._answer_wait)
                entry = self._forecasts.get(region)
        if entry is None and self.fetcher.error(region) is None and not self.fetcher.circuit(region).is_open:
            raise self._pending(region, now)
        if entry is None or not self._usable_forecast(entry, now, start):
            raise self._no_answer(f"forecast for {region}", region)
        self._note_if_stale(entry, now, region)
        return self._clip(entry.value, start, end)

    async def current(self, region: str) -> IntensityPoint:
        now = self._clock()
        entry = self._currents.get(region)
        if entry is None or now - entry.fetched_at >= self._ttl:

            def keep(value: object) -> None:
                assert isinstance(value, IntensityPoint)
                self._currents[region] = _Entry(now, now, now, value)

            key = ("current", region)
            started = self.fetcher.start(key, functools.partial(self._inner.current, region), keep, subject=region)
            if started and (entry is None or now - entry.fetched_at > self._max_stale):
                await self.fetcher.wait(key, self._answer_wait)
                entry = self._currents.get(region)
        if entry is None or now - entry.fetched_at > self._max_stale:
            raise self._no_answer(f"intensity of {region}", region)
        self._note_if_stale(entry, now, region)
        return entry.value

    async def aclose(self) -> None:
        self.fetcher.cancel()

    def _usable_forecast(self, entry: _Entry[Forecast] | None, now: datetime, start: datetime) -> bool:
        return entry is not None and now - entry.fetched_at <= self._max_stale and entry.value.end > start

    def _note_if_stale(self, entry: _Entry[T], now: datetime, region: str) -> None:
        error = self.fetcher.error(region)
        if now - entry.fetched_at >= self._ttl and error is not None:
            log.warning(
                "%s; using the answer fetched at %s", self._as_source_error(error, region), entry.fetched_at.isoformat()
            )

    def _pending(self, region: str, now: datetime) -> CarbonForecastPendingError:
        since = self._pending_since.setdefault(region, now)
        while len(self._pending_since) > MAX_CIRCUITS:
            self._pending_since.popitem(last=False)
        return CarbonForecastPendingError(
            self.name,
            f"forecast for {region}",
            f"not answered yet (asked since {since.isoformat()}); still fetching beside the loop",
            since=since,
        )

    def _no_answer(self, what: str, region: str) -> CarbonSourceError:
        circuit = self.fetcher.circuit(region)
        if circuit.is_open:
            return CarbonSourceError(
                self.name,
                what,
                f"not asked about {region} until {circuit.reopens_at()} after {circuit.failures} failures in a row; "
                f"last: {self.fetcher.error(region)}",
            )
        error = self._as_source_error(self.fetcher.error(region), what)
        if error is not None:
            return error
        return CarbonSourceTimeoutError(
            self.name, what, f"no answer within {self._answer_wait:g} s; still fetching beside the loop"
        )

    def _as_source_error(self, error: Exception | None, what: str) -> CarbonSourceError | None:
        if error is None or isinstance(error, CarbonSourceError):
            return error
        if isinstance(error, FetchTimeoutError):
            return CarbonSourceTimeoutError(self.name, what, str(error))
        return CarbonSourceError(self.name, what, repr(error))

    @staticmethod
    def _clip(forecast: Forecast, start: datetime, end: datetime) -> Forecast:
        try:
            return forecast.clip(start, end)
        except ForecastCoverageError:
            return forecast
