"""Carbon intensity forecasts: a step function of time, and questions about it.

A forecast is a step function: ``values[i]`` gCO2eq/kWh holds over
``[start + i*step, start + (i+1)*step)``. Emissions of a run are its power times the
integral of that function over the run, which prefix sums give in O(1) per window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from itertools import pairwise

# Float slack when comparing times in seconds and costs in g/kWh*s.
EPS_S = 1e-6


class ForecastCoverageError(ValueError):
    """A question about a time the forecast does not cover."""


@dataclass(frozen=True, slots=True)
class IntensityPoint:
    """Grid carbon intensity from `time` on (gCO2eq/kWh); `time` is timezone-aware."""

    time: datetime
    grams_per_kwh: float


@dataclass(frozen=True)
class Forecast:
    """Carbon intensity at a fixed step from `start`: a step function over [start, end)."""

    region: str
    start: datetime
    step: timedelta
    values: tuple[float, ...]
    issued_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.start.tzinfo is None:
            raise ValueError("forecast start must be timezone-aware")
        if self.step <= timedelta(0):
            raise ValueError(f"forecast step must be positive, got {self.step}")
        if not self.values:
            raise ValueError("a forecast needs at least one value")
        bad = [v for v in self.values if not math.isfinite(v) or v < 0]
        if bad:
            raise ValueError(f"carbon intensity must be a finite, non-negative number, got {bad[0]!r}")

    @property
    def end(self) -> datetime:
        return self.start + self.step * len(self.values)

    @property
    def points(self) -> tuple[IntensityPoint, ...]:
        return tuple(IntensityPoint(self.start + self.step * i, v) for i, v in enumerate(self.values))

    @cached_property
    def step_seconds(self) -> float:
        return self.step.total_seconds()

    @cached_property
    def _prefix(self) -> tuple[float, ...]:
        """prefix[i]: integral of intensity over the first i steps (g/kWh * s)."""
        sums = [0.0]
        for value in self.values:
            sums.append(sums[-1] + value * self.step_seconds)
        return tuple(sums)

    @property
    def total_seconds(self) -> float:
        return self.step_seconds * len(self.values)

    def offset(self, when: datetime) -> float:
        """Seconds from the forecast start to `when`."""
        return (when - self.start).total_seconds()

    def at_offset(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    def covers(self, start: datetime, end: datetime) -> bool:
        return self._covers_offsets(self.offset(start), self.offset(end))

    def _covers_offsets(self, a: float, b: float) -> bool:
        return a >= -EPS_S and b <= self.total_seconds + EPS_S and a <= b + EPS_S

    def intensity_at(self, when: datetime) -> float:
        x = self.offset(when)
        if not self._covers_offsets(x, x) or x >= self.total_seconds:
            raise ForecastCoverageError(f"{when.isoformat()} is outside the forecast [{self._span()}]")
        return self.values[self.step_index(x)]

    def integral(self, start: datetime, end: datetime) -> float:
        """Integral of intensity over [start, end), in g/kWh * s."""
        a, b = self.offset(start), self.offset(end)
        if not self._covers_offsets(a, b):
            raise ForecastCoverageError(
                f"[{start.isoformat()}, {end.isoformat()}) is outside the forecast [{self._span()}]"
            )
        return self.cumulative(b) - self.cumulative(a)

    def clip(self, start: datetime, end: datetime) -> Forecast:
        """The steps that overlap [start, end); the step grid stays where it is."""
        first = max(0, math.floor(self.offset(start) / self.step_seconds + EPS_S))
        last = min(len(self.values), math.ceil(self.offset(end) / self.step_seconds - EPS_S))
        if first >= last:
            raise ForecastCoverageError(f"the forecast [{self._span()}] has nothing in [{start}, {end})")
        return Forecast(self.region, self.start + self.step * first, self.step, self.values[first:last], self.issued_at)

    def step_index(self, x: float) -> int:
        """The step holding offset x, clamped to the first and last steps."""
        return min(len(self.values) - 1, max(0, int(x // self.step_seconds)))

    def cumulative(self, x: float) -> float:
        """Integral from the forecast start to offset x (clamped to the covered span)."""
        x = min(max(x, 0.0), self.total_seconds)
        i = self.step_index(x)
        return self._prefix[i] + self.values[i] * (x - i * self.step_seconds)

    def _span(self) -> str:
        return f"{self.start.isoformat()}, {self.end.isoformat()})"


def forecast_from_points(
    region: str,
    points: Sequence[IntensityPoint],
    *,
    step: timedelta | None = None,
    issued_at: datetime | None = None,
) -> Forecast:
    """A fixed-step forecast from points at any spacing.

    The step is the smallest gap between points unless given. Each step takes the value of
    the latest point at or before it, so gaps hold the previous value and points closer
    than the step are thinned to one per step.
    """
    if not points:
        raise ValueError("no carbon intensity points")
    by_time = {p.time: p.grams_per_kwh for p in points}
    times = sorted(by_time)
    if step is None:
        gaps = [b - a for a, b in pairwise(times)]
        if not gaps:
            raise ValueError("one point gives no step: pass step explicitly")
        step = min(gaps)
    values: list[float] = []
    next_point = 0
    current = by_time[times[0]]
    slot = times[0]
    while slot <= times[-1]:
        while next_point < len(times) and times[next_point] <= slot:
            current = by_time[times[next_point]]
            next_point += 1
        values.append(current)
        slot += step
    return Forecast(region, times[0], step, tuple(values), issued_at)


def shrink_forecast(forecast: Forecast, now: datetime, until: datetime, relative_error: float) -> Forecast:
    """The expected intensity given a forecast with independent errors of the given size.

    Over the steps after the one holding `now` and up to `until`, the forecast's variance is
    signal plus error; each value moves towards their mean by the error's share of it (the
    best linear predictor of the truth). The step holding `now` is left as it is.
    """
    first = forecast.step_index(forecast.offset(now)) + 1
    last = min(len(forecast.values), math.ceil(forecast.offset(until) / forecast.step_seconds))
    ahead = forecast.values[first:last]
    if len(ahead) < 2:
        return forecast
    mean = sum(ahead) / len(ahead)
    variance = sum((v - mean) ** 2 for v in ahead) / (len(ahead) - 1)
    noise = (relative_error * mean) ** 2
    keep = max(0.0, variance - noise) / variance if variance > 0 else 0.0
    shrunk = tuple(mean + keep * (v - mean) for v in ahead)
    values = forecast.values[:first] + shrunk + forecast.values[last:]
    return Forecast(forecast.region, forecast.start, forecast.step, values, forecast.issued_at)
