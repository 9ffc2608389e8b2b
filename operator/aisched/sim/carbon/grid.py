"""The grid's actual carbon intensity, what a strategy knows of it at a decision, and the jobs' deadlines."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from aisched.policy.carbon import Forecast

HOUR = 3600.0
DAY = 24 * HOUR
WEEK = 7 * DAY
EPS = 1e-3


@dataclass(frozen=True)
class Grid:
    """The actual intensity, in seconds from its first half hour."""

    region: str
    start: datetime
    step: float
    actual: list[float]
    prefix: list[float]

    @classmethod
    def from_forecast(cls, fc: Forecast) -> Grid:
        """The grid whose actual intensity is FC's values (a file of past readings, read as a forecast)."""
        prefix = [0.0]
        for value in fc.values:
            prefix.append(prefix[-1] + value * fc.step_seconds)
        return cls(fc.region, fc.start, fc.step_seconds, list(fc.values), prefix)

    @property
    def end(self) -> float:
        return self.step * len(self.actual)

    def cumulative(self, x: float) -> float:
        i = min(len(self.actual) - 1, int(x // self.step))
        return self.prefix[i] + self.actual[i] * (x - i * self.step)

    def cost(self, runs: Sequence[tuple[float, float]]) -> float:
        """Actual intensity integrated over the runs (g/kWh * s)."""
        return sum(self.cumulative(b) - self.cumulative(a) for a, b in runs)

    def at(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)

    def offset(self, when: datetime) -> float:
        return (when - self.start).total_seconds()

    def noisy(self, error: float, seed: int) -> list[float]:
        if error == 0:
            return self.actual
        rng = random.Random(seed)
        sd = error * sum(self.actual) / len(self.actual)
        return [max(0.0, v + rng.gauss(0.0, sd)) for v in self.actual]


@dataclass(frozen=True)
class Job:
    arrival: float  # seconds from the grid start, on a half hour
    duration: float
    gpus: int


@dataclass
class View:
    """What a strategy knows at a decision: the actual value now, the forecast after."""

    grid: Grid
    forecast_values: list[float]

    def values(self, first: int, last: int) -> list[float]:
        return [self.grid.actual[first], *self.forecast_values[first + 1 : last]]

    def forecast(self, t: float, until: float) -> Forecast:
        first = int(t // self.grid.step)
        last = min(len(self.grid.actual), math.ceil(until / self.grid.step) + 1)
        start = self.grid.at(first * self.grid.step)
        return Forecast(self.grid.region, start, timedelta(seconds=self.grid.step), tuple(self.values(first, last)))


def next_workday_deadline(grid: Grid, arrival: float, duration: float) -> float:
    """The paper's rule, applied to the time the run would end if started at once."""
    finish = grid.at(arrival + duration)
    hour = finish.hour + finish.minute / 60 + finish.second / 3600
    nine = finish.replace(hour=9, minute=0, second=0, microsecond=0)
    if finish.weekday() == 5:  # Saturday: Monday morning
        return grid.offset(nine + timedelta(days=2))
    if finish.weekday() == 6 or hour > 17:  # Sunday, or an evening (a Friday one: Saturday 09:00)
        return grid.offset(nine + timedelta(days=1))
    if hour < 9:
        return grid.offset(nine)
    return arrival + duration  # a workday between 09:00 and 17:00: the result is awaited


DEADLINES: dict[str, Callable[[Grid, float, float], float]] = {
    "12h": lambda grid, arrival, duration: arrival + duration + 12 * HOUR,
    "next_workday": next_workday_deadline,
}
