"""What every carbon intensity source shares: the interface, the errors, and one careful GET."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import httpx
import pydantic

from aisched.policy.carbon import Forecast, IntensityPoint

Sleep = Callable[[float], Awaitable[None]]
M = TypeVar("M", bound=pydantic.BaseModel)


@runtime_checkable
class CarbonSource(Protocol):
    """Grid carbon intensity for a region, in gCO2eq/kWh."""

    name: str

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        """Intensity at a fixed step covering as much of [start, end) as the source knows."""
        ...

    async def current(self, region: str) -> IntensityPoint:
        """The intensity now (the latest the source has)."""
        ...


# Settings' provider names -> the source label values of aisched_carbon_source_errors_total.
CARBON_SOURCE_NAMES = {
    "electricitymaps": "ElectricityMaps",
    "watttime": "WattTime",
    "nationalgrid": "NationalGrid",
    "prometheus": "Prometheus",
    "file": "File",
    "none": "File",
}


class CarbonSourceError(Exception):
    """A carbon source could not answer; says which source, what was asked and what went wrong."""

    def __init__(self, source: str, what: str, detail: str, *, status: int | None = None) -> None:
        self.source = source
        self.what = what
        self.detail = detail
        self.status = status
        super().__init__(f"{source}: {what}: {detail}")


class CarbonSourceTimeoutError(CarbonSourceError):
    """No answer in time, after every retry."""


class CarbonForecastPendingError(CarbonSourceTimeoutError):
    """No answer yet, and no failure either: the zone's first read is under way or waits its turn
    (a restarted operator, a zone asked for the first time). Asked about since `since`."""

    def __init__(self, source: str, what: str, detail: str, *, since: datetime) -> None:
        super().__init__(source, what, detail)
        self.since = since


class CarbonSourceHTTPError(CarbonSourceError):
    """The source answered with an HTTP error status (401 bad key, 404 unknown region, 5xx ...)."""


class CarbonSourceDataError(CarbonSourceError):
    """The answer was not what the API documents (garbage, wrong shape, no data)."""


@dataclass(frozen=True)
class HttpPolicy:
    """How hard to try: per-request timeout, retries on timeouts/429/5xx, doubling backoff."""

    timeout_seconds: float = 10.0
    retries: int = 3
    backoff_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    sleep: Sleep = field(default=asyncio.sleep, compare=False, repr=False)
    """How the backoff waits; tests pass one that records the waits instead."""
    jitter: Callable[[], float] = field(default=random.random, compare=False, repr=False)
    """A number in [0, 1): each wait is between half and all of the doubled backoff, so the
    replicas and regions that failed together do not all come back at the same moment."""

    def delay(self, attempt: int, retry_after: str | None) -> float:
        backoff = min(self.backoff_max_seconds, self.backoff_seconds * 2.0**attempt)
        wait: float = backoff * (0.5 + 0.5 * self.jitter())
        if retry_after is not None:
            # A 429/503 may say how long to wait (seconds; the HTTP-date form is ignored).
            with contextlib.suppress(ValueError):
                wait = min(self.backoff_max_seconds, max(wait, float(retry_after)))
        return wait


def _is_retryable(status: int) -> bool:
    return status == 429 or status >= 500


async def get_json(
    client: httpx.AsyncClient,
    url: str,
    *,
    source: str,
    what: str,
    policy: HttpPolicy,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    auth: httpx.Auth | tuple[str, str] | None = None,
) -> Any:
    """GET a JSON document, retrying what may pass (timeouts, connection errors, 429, 5xx)."""
    last: CarbonSourceError | None = None
    retry_after: str | None = None
    for attempt in range(policy.retries + 1):
        if attempt:
            await policy.sleep(policy.delay(attempt - 1, retry_after))
        try:
            response = await client.get(url, params=params, headers=headers, auth=auth, timeout=policy.timeout_seconds)
        except httpx.TimeoutException as exc:
            last = CarbonSourceTimeoutError(source, what, f"no answer within {policy.timeout_seconds:g} s ({exc!r})")
            retry_after = None
            continue
        except httpx.TransportError as exc:
            last = CarbonSourceError(source, what, f"cannot reach {url}: {exc!r}")
            retry_after = None
            continue
        if response.is_success:
            return _decode(response, source, what)
        last = CarbonSourceHTTPError(
            source, what, f"HTTP {response.status_code}: {_snippet(response.text)}", status=response.status_code
        )
        if not _is_retryable(response.status_code):
            raise last
        retry_after = response.headers.get("retry-after")
    assert last is not None
    raise last


def _decode(response: httpx.Response, source: str, what: str) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CarbonSourceDataError(source, what, f"not JSON ({exc}): {_snippet(response.text)}") from exc


def _snippet(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def parse_payload(model: type[M], payload: Any, *, source: str, what: str) -> M:
    """Validate a decoded payload against the documented response shape."""
    try:
        return model.model_validate(payload)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top)"
        raise CarbonSourceDataError(source, what, f"unexpected response shape at {where}: {first['msg']}") from exc


def as_utc(when: datetime) -> datetime:
    """Timestamps without a zone are UTC (as every API here documents)."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def read_secret(path: Path | None, *, source: str) -> str:
    """A key mounted from a Secret, read when needed so a rotated Secret takes effect."""
    if path is None:
        raise CarbonSourceError(source, "read the API key", "no api_key_file configured")
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CarbonSourceError(source, "read the API key", f"{path}: {exc.strerror}") from exc
    if not key:
        raise CarbonSourceError(source, "read the API key", f"{path} is empty")
    return key
