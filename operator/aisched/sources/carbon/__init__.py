"""Grid carbon intensity sources behind one interface (:class:`CarbonSource`).

Build the configured one with :func:`build_carbon_source`; every source is async, over
httpx (or a file), with timeouts, retries with jittered backoff, typed errors, and a cache that
reads it beside the loop under a deadline and a circuit breaker.
"""

from __future__ import annotations

from datetime import timedelta

import httpx

from aisched.policy.circuit import Breaker
from aisched.settings import CarbonSettings
from aisched.sources.carbon.base import (
    CARBON_SOURCE_NAMES,
    CarbonForecastPendingError,
    CarbonSource,
    CarbonSourceDataError,
    CarbonSourceError,
    CarbonSourceHTTPError,
    CarbonSourceTimeoutError,
    HttpPolicy,
)
from aisched.sources.carbon.cache import CachedCarbonSource
from aisched.sources.carbon.electricitymaps import ElectricityMapsSource
from aisched.sources.carbon.file import FileSource, read_intensity_csv
from aisched.sources.carbon.nationalgrid import NationalGridSource
from aisched.sources.carbon.prometheus import PrometheusSource
from aisched.sources.carbon.watttime import WattTimeSource

__all__ = [
    "CARBON_SOURCE_NAMES",
    "CachedCarbonSource",
    "CarbonForecastPendingError",
    "CarbonSource",
    "CarbonSourceDataError",
    "CarbonSourceError",
    "CarbonSourceHTTPError",
    "CarbonSourceTimeoutError",
    "ElectricityMapsSource",
    "FileSource",
    "HttpPolicy",
    "NationalGridSource",
    "PrometheusSource",
    "WattTimeSource",
    "build_carbon_source",
    "read_intensity_csv",
]


def build_carbon_source(settings: CarbonSettings, client: httpx.AsyncClient) -> CachedCarbonSource | None:
    """The configured source behind its cache, or None when carbon awareness is off.

    The caller owns `client` (create it at start-up, close it at shutdown).
    """
    policy = HttpPolicy(
        timeout_seconds=settings.timeout_seconds, retries=settings.retries, backoff_seconds=settings.backoff_seconds
    )
    inner: CarbonSource
    match settings.provider:
        case "none":
            return None
        case "electricitymaps":
            inner = ElectricityMapsSource(client, settings.electricitymaps_url, settings.api_key_file, policy)
        case "watttime":
            inner = WattTimeSource(
                client,
                settings.watttime_url,
                settings.watttime_login_url,
                settings.watttime_username,
                settings.api_key_file,
                policy=policy,
                signal_type=settings.watttime_signal_type,
            )
        case "nationalgrid":
            inner = NationalGridSource(client, settings.nationalgrid_url, policy)
        case "prometheus":
            if not settings.prometheus_url:
                raise ValueError("carbon provider prometheus needs prometheus_url")
            step = timedelta(seconds=settings.prometheus_step_seconds)
            inner = PrometheusSource(client, settings.prometheus_url, settings.prometheus_query, step, policy)
        case "file":
            if settings.file_path is None:
                raise ValueError("carbon provider file needs file_path")
            inner = FileSource(settings.file_path)
    open_for = timedelta(seconds=settings.circuit_open_seconds)
    return CachedCarbonSource(
        inner,
        ttl=timedelta(seconds=settings.cache_ttl_seconds),
        max_stale=timedelta(seconds=settings.max_stale_seconds),
        deadline=timedelta(seconds=settings.fetch_deadline_seconds),
        answer_wait=timedelta(seconds=settings.answer_wait_seconds),
        breaker=Breaker(settings.circuit_failures, open_for, max_open_for=open_for * 15),
    )
