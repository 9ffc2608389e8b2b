"""The GB National Grid (NESO) Carbon Intensity API: national and regional half-hourly forecasts, no key.

Regions: "GB" (or "national") for Great Britain, or a DNO region id 1-17 (13 is London).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx
from pydantic import BaseModel, ConfigDict, Field

from aisched.policy.carbon import Forecast, IntensityPoint, forecast_from_points
from aisched.sources.carbon.base import (
    CarbonSourceDataError,
    CarbonSourceError,
    HttpPolicy,
    as_utc,
    get_json,
    parse_payload,
)

_NAME = "nationalgrid"
_STEP = timedelta(minutes=30)
_NATIONAL = {"gb", "national", ""}


class _Intensity(BaseModel):
    model_config = ConfigDict(extra="ignore")

    forecast: float | None = None
    actual: float | None = None
    index: str | None = None


class _Period(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    intensity: _Intensity

    @property
    def grams_per_kwh(self) -> float | None:
        # The estimated actual, where the period has one, beats the forecast made before it.
        return self.intensity.actual if self.intensity.actual is not None else self.intensity.forecast


class _National(BaseModel):
    data: list[_Period]


class _Region(BaseModel):
    model_config = ConfigDict(extra="ignore")

    regionid: int
    shortname: str | None = None
    data: list[_Period]


class _Regional(BaseModel):
    # One region is an object under "data" for a time range and a one-element list for "now".
    data: _Region | list[_Region]

    def periods(self) -> list[_Period]:
        regions = self.data if isinstance(self.data, list) else [self.data]
        return [period for region in regions for period in region.data]


def _api_time(when: datetime) -> str:
    return as_utc(when).strftime("%Y-%m-%dT%H:%MZ")


def _region_id(region: str) -> int | None:
    if region.strip().lower() in _NATIONAL:
        return None
    if region.isdigit() and 1 <= int(region) <= 17:
        return int(region)
    raise CarbonSourceError(_NAME, f"use region {region!r}", "regions are GB or a region id from 1 to 17")


class NationalGridSource:
    name = _NAME

    def __init__(self, client: httpx.AsyncClient, base_url: str, policy: HttpPolicy) -> None:
        self._client = client
        self._base = base_url.rstrip("/")
        self._policy = policy

    async def _periods(self, path: str, regional: bool, what: str) -> list[_Period]:
        body = await get_json(self._client, f"{self._base}/{path}", source=_NAME, what=what, policy=self._policy)
        if regional:
            return parse_payload(_Regional, body, source=_NAME, what=what).periods()
        return parse_payload(_National, body, source=_NAME, what=what).data

    @staticmethod
    def _points(periods: list[_Period]) -> list[IntensityPoint]:
        return [IntensityPoint(as_utc(p.start), g) for p in periods if (g := p.grams_per_kwh) is not None]

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        region_id = _region_id(region)
        span = f"{_api_time(start)}/{_api_time(end)}"
        what = f"forecast for {region} {span}"
        if region_id is None:
            periods = await self._periods(f"intensity/{span}", False, what)
        else:
            periods = await self._periods(f"regional/intensity/{span}/regionid/{region_id}", True, what)
        points = self._points(periods)
        if not points:
            raise CarbonSourceDataError(_NAME, what, "no half-hour in the answer has a value")
        return forecast_from_points(region, points, step=_STEP).clip(start, end)

    async def current(self, region: str) -> IntensityPoint:
        region_id = _region_id(region)
        what = f"current intensity of {region}"
        if region_id is None:
            periods = await self._periods("intensity", False, what)
        else:
            periods = await self._periods(f"regional/regionid/{region_id}", True, what)
        points = self._points(periods)
        if not points:
            raise CarbonSourceDataError(_NAME, what, "the current half-hour has no value")
        return points[-1]
