"""A Prometheus metric holding gCO2eq/kWh, read through the HTTP API.

The query may look ahead: a range query evaluated at future times returns what the
expression gives there, so ``metric offset 1d`` is a day-ahead persistence forecast and
an exporter that publishes a real forecast can be used as it is.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from aisched.policy.carbon import Forecast, IntensityPoint, forecast_from_points
from aisched.sources.carbon.base import CarbonSourceDataError, HttpPolicy, get_json, parse_payload

_NAME = "prometheus"


class _Series(BaseModel):
    model_config = ConfigDict(extra="ignore")

    metric: dict[str, str]
    values: list[tuple[float, str]] = []
    value: tuple[float, str] | None = None


class _Data(BaseModel):
    model_config = ConfigDict(extra="ignore")

    result_type: Literal["matrix", "vector"] = Field(alias="resultType")
    result: list[_Series]


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: Literal["success"]
    data: _Data


def _point(sample: tuple[float, str]) -> IntensityPoint | None:
    stamp, text = sample
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None  # NaN marks a gap in Prometheus
    return IntensityPoint(datetime.fromtimestamp(stamp, UTC), value)


class PrometheusSource:
    name = _NAME

    def __init__(
        self, client: httpx.AsyncClient, base_url: str, query: str, step: timedelta, policy: HttpPolicy
    ) -> None:
        self._client = client
        self._base = base_url.rstrip("/")
        self._query = query
        self._step = step
        self._policy = policy

    def _promql(self, region: str) -> str:
        # str.replace, not str.format: PromQL is full of braces. The region comes from a job's spec and
        # lands inside a double-quoted PromQL string: escaped, it cannot close the string and add a selector.
        escaped = region.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return self._query.replace("{region}", escaped)

    async def _one_series(self, path: str, params: dict[str, str], what: str) -> _Series:
        body = await get_json(
            self._client, f"{self._base}/api/v1/{path}", source=_NAME, what=what, policy=self._policy, params=params
        )
        series = parse_payload(_Response, body, source=_NAME, what=what).data.result
        if len(series) != 1:
            raise CarbonSourceDataError(
                _NAME, what, f"the query returned {len(series)} series; it must select exactly one"
            )
        return series[0]

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        query = self._promql(region)
        what = f"query_range {query}"
        params = {
            "query": query,
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": f"{self._step.total_seconds():g}s",
        }
        series = await self._one_series("query_range", params, what)
        points = [p for sample in series.values if (p := _point(sample)) is not None]
        if not points:
            raise CarbonSourceDataError(_NAME, what, "no usable samples in the range")
        return forecast_from_points(region, points, step=self._step)

    async def current(self, region: str) -> IntensityPoint:
        query = self._promql(region)
        what = f"query {query}"
        series = await self._one_series("query", {"query": query}, what)
        point = _point(series.value) if series.value is not None else None
        if point is None:
            raise CarbonSourceDataError(_NAME, what, "the sample is missing or not a number")
        return point
