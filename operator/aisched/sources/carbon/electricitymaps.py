"""Electricity Maps API v3: latest and forecast carbon intensity of a zone (auth-token header)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict, Field

from aisched.policy.carbon import Forecast, IntensityPoint, forecast_from_points
from aisched.sources.carbon.base import CarbonSourceDataError, HttpPolicy, as_utc, get_json, parse_payload, read_secret

_NAME = "electricitymaps"


class _Point(BaseModel):
    model_config = ConfigDict(extra="ignore")

    carbon_intensity: float | None = Field(alias="carbonIntensity")
    datetime: datetime


class _Forecast(BaseModel):
    model_config = ConfigDict(extra="ignore")

    zone: str
    forecast: list[_Point]
    updated_at: datetime | None = Field(default=None, alias="updatedAt")


class ElectricityMapsSource:
    """Zones are Electricity Maps zone keys (DE, FR, GB, US-CAL-CISO, ...)."""

    name = _NAME

    def __init__(self, client: httpx.AsyncClient, base_url: str, api_key_file: Path | None, policy: HttpPolicy) -> None:
        self._client = client
        self._base = base_url.rstrip("/")
        self._key_file = api_key_file
        self._policy = policy

    async def _get(self, path: str, zone: str, what: str) -> object:
        headers = {"auth-token": read_secret(self._key_file, source=_NAME)}
        return await get_json(
            self._client,
            f"{self._base}/{path}",
            source=_NAME,
            what=what,
            policy=self._policy,
            params={"zone": zone},
            headers=headers,
        )

    async def current(self, region: str) -> IntensityPoint:
        what = f"latest intensity of zone {region}"
        point = parse_payload(_Point, await self._get("carbon-intensity/latest", region, what), source=_NAME, what=what)
        if point.carbon_intensity is None:
            raise CarbonSourceDataError(_NAME, what, "the zone has no current value")
        return IntensityPoint(as_utc(point.datetime), point.carbon_intensity)

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        what = f"forecast of zone {region}"
        body = parse_payload(
            _Forecast, await self._get("carbon-intensity/forecast", region, what), source=_NAME, what=what
        )
        points = [
            IntensityPoint(as_utc(p.datetime), p.carbon_intensity)
            for p in body.forecast
            if p.carbon_intensity is not None
        ]
        if not points:
            raise CarbonSourceDataError(_NAME, what, "the forecast is empty")
        # The forecast begins at the next hour; the latest value covers the hour we are in.
        if min(p.time for p in points) > start:
            points.append(await self.current(region))
        issued = as_utc(body.updated_at) if body.updated_at else None
        return forecast_from_points(region, points, issued_at=issued).clip(start, end)
