"""Carbon intensity from a CSV file (time, intensity in gCO2eq/kWh), e.g. a mounted ConfigMap.

The first column whose header names a time (time, date, timestamp, from) gives the time
and the first that names an intensity (intensity, carbon, co2, value) the value; failing
that, the first two columns. Times without a zone are UTC. ``{region}`` in the path is
replaced by the region, so one directory can hold a file per region.
"""

from __future__ import annotations

import asyncio
import csv
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aisched.policy.carbon import Forecast, ForecastCoverageError, IntensityPoint, forecast_from_points
from aisched.sources.carbon.base import CarbonSourceDataError, CarbonSourceError, as_utc

_NAME = "file"
_TIME_WORDS = ("time", "date", "timestamp", "from")
_VALUE_WORDS = ("intensity", "carbon", "co2", "value")


def _column(header: list[str], words: tuple[str, ...], fallback: int, skip: int | None = None) -> int:
    for i, name in enumerate(header):
        if i != skip and any(word in name.strip().lower() for word in words):
            return i
    return fallback


def read_intensity_csv(path: Path, region: str, *, step: timedelta | None = None) -> Forecast:
    """Parse the whole file into a fixed-step forecast; the step is the smallest gap unless
    given (a coarser step keeps the reading at or before each step's start)."""
    what = f"read {path}"
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except OSError as exc:
        raise CarbonSourceError(_NAME, what, exc.strerror or str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise CarbonSourceDataError(_NAME, what, f"not text: {exc}") from exc
    if len(rows) < 2 or len(rows[0]) < 2:
        raise CarbonSourceDataError(_NAME, what, "needs a header and at least one row of time,intensity")
    header = rows[0]
    t_col = _column(header, _TIME_WORDS, 0)
    v_col = _column(header, _VALUE_WORDS, 1 if t_col == 0 else 0, skip=t_col)
    points = []
    for number, row in enumerate(rows[1:], start=2):
        if not row or not any(cell.strip() for cell in row):
            continue
        try:
            when = as_utc(datetime.fromisoformat(row[t_col].strip()))
            points.append(IntensityPoint(when, float(row[v_col])))
        except (ValueError, IndexError) as exc:
            raise CarbonSourceDataError(_NAME, what, f"line {number}: {exc}") from exc
    try:
        return forecast_from_points(region, points, step=step)
    except ValueError as exc:
        raise CarbonSourceDataError(_NAME, what, str(exc)) from exc


class FileSource:
    name = _NAME

    def __init__(self, path: Path, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._path = path
        self._clock = clock
        self._parsed: dict[Path, tuple[tuple[int, int], Forecast]] = {}

    async def _load(self, region: str) -> Forecast:
        if "/" in region or "\\" in region or region.startswith("."):
            # The CRD refuses such regions; this holds for objects that got in before it did.
            raise CarbonSourceDataError(_NAME, f"forecast for {region!r}", "a region is not a path")
        path = Path(str(self._path).replace("{region}", region))
        try:
            stat = os.stat(path)  # follows the symlink a ConfigMap update swaps
        except OSError as exc:
            raise CarbonSourceError(_NAME, f"read {path}", exc.strerror or str(exc)) from exc
        version = (stat.st_mtime_ns, stat.st_size)
        cached = self._parsed.get(path)
        if cached is None or cached[0] != version:
            cached = (version, await asyncio.to_thread(read_intensity_csv, path, region))
            self._parsed[path] = cached
        return cached[1]

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        whole = await self._load(region)
        try:
            return whole.clip(start, end)
        except ForecastCoverageError as exc:
            raise CarbonSourceDataError(_NAME, f"forecast for {region}", str(exc)) from exc

    async def current(self, region: str) -> IntensityPoint:
        whole = await self._load(region)
        now = self._clock()
        try:
            return IntensityPoint(now, whole.intensity_at(now))
        except ForecastCoverageError as exc:
            raise CarbonSourceDataError(_NAME, f"current intensity of {region}", str(exc)) from exc
