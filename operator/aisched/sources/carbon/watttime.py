"""WattTime API v3: log in for a token, then the forecast and signal index of a region.

WattTime's co2_moer is the *marginal* operating emissions rate (what one more kWh emits
now), in lbs CO2/MWh; it is converted to gCO2/kWh so the planner compares like with like.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from aisched.policy.carbon import Forecast, IntensityPoint, forecast_from_points
from aisched.sources.carbon.base import (
    CarbonSourceDataError,
    CarbonSourceError,
    CarbonSourceHTTPError,
    HttpPolicy,
    as_utc,
    get_json,
    parse_payload,
    read_secret,
)

_NAME = "watttime"
# 1 lb = 453.59237 g and 1 MWh = 1000 kWh.
_G_PER_KWH = {"lbs_co2_per_mwh": 0.45359237, "g_co2_per_kwh": 1.0, "kg_co2_per_mwh": 1.0}
# Tokens last 30 minutes; log in again a little before.
_TOKEN_LIFETIME = timedelta(minutes=25)


class _Login(BaseModel):
    token: str


class _Point(BaseModel):
    model_config = ConfigDict(extra="ignore")

    point_time: datetime
    value: float


class _Meta(BaseModel):
    model_config = ConfigDict(extra="ignore")

    region: str | None = None
    signal_type: str | None = None
    units: str
    generated_at: datetime | None = None


class _Signal(BaseModel):
    model_config = ConfigDict(extra="ignore")

    data: list[_Point]
    meta: _Meta


class WattTimeSource:
    """Regions are WattTime region abbreviations (CAISO_NORTH, PJM_DC, ...)."""

    name = _NAME

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        login_url: str,
        username: str | None,
        password_file: Path | None,
        *,
        policy: HttpPolicy,
        signal_type: str = "co2_moer",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._client = client
        self._base = base_url.rstrip("/")
        self._login_url = login_url
        self._username = username
        self._password_file = password_file
        self._policy = policy
        self._signal_type = signal_type
        self._clock = clock
        self._token: tuple[str, datetime] | None = None

    async def _login(self) -> str:
        if self._token is not None and self._clock() < self._token[1]:
            return self._token[0]
        if not self._username:
            raise CarbonSourceError(_NAME, "log in", "no watttime_username configured")
        password = read_secret(self._password_file, source=_NAME)
        body = await get_json(
            self._client,
            self._login_url,
            source=_NAME,
            what="log in",
            policy=self._policy,
            auth=(self._username, password),
        )
        token = parse_payload(_Login, body, source=_NAME, what="log in").token
        self._token = (token, self._clock() + _TOKEN_LIFETIME)
        return token

    async def _signal(self, path: str, region: str, what: str, extra: dict[str, str] | None = None) -> _Signal:
        params = {"region": region, "signal_type": self._signal_type, **(extra or {})}
        try:
            body = await self._get(path, params, what)
        except CarbonSourceHTTPError as exc:
            if exc.status != 401:
                raise
            self._token = None  # expired or revoked early: log in once more
            body = await self._get(path, params, what)
        signal = parse_payload(_Signal, body, source=_NAME, what=what)
        if not signal.data:
            raise CarbonSourceDataError(_NAME, what, "no data points")
        return signal

    async def _get(self, path: str, params: dict[str, str], what: str) -> object:
        headers = {"Authorization": f"Bearer {await self._login()}"}
        return await get_json(
            self._client,
            f"{self._base}/{path}",
            source=_NAME,
            what=what,
            policy=self._policy,
            params=params,
            headers=headers,
        )

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        what = f"{self._signal_type} forecast of {region}"
        hours = max(1, min(72, round((end - start).total_seconds() / 3600 + 0.5)))
        signal = await self._signal("forecast", region, what, {"horizon_hours": str(hours)})
        factor = _G_PER_KWH.get(signal.meta.units)
        if factor is None:
            raise CarbonSourceDataError(_NAME, what, f"units {signal.meta.units!r} are not an emissions rate")
        points = [IntensityPoint(as_utc(p.point_time), p.value * factor) for p in signal.data]
        issued = as_utc(signal.meta.generated_at) if signal.meta.generated_at else None
        return forecast_from_points(region, points, issued_at=issued).clip(start, end)

    async def current(self, region: str) -> IntensityPoint:
        """The forecast's first point, which is the interval we are in."""
        now = self._clock()
        forecast = await self.forecast(region, now, now + timedelta(hours=1))
        return forecast.points[0]

    async def signal_index(self, region: str) -> float:
        """Where the current rate sits among the last month's, as a percentile (0 cleanest, 100 dirtiest)."""
        what = f"signal index of {region}"
        signal = await self._signal("signal-index", region, what)
        return signal.data[0].value
