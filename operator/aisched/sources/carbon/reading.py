"""One zone's forecast as a deferral planner reads it: the forecast, why there is none, or until when to wait.

TrainingJobs and the other kinds' workloads read their zones the same way, through the operator's
one cache: a source that fails means no deferral (the job starts in time, told why); a zone whose
first read is under way (a restarted operator, a zone asked first) is waited for a bounded while.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from aisched.policy.carbon import Forecast, forecast_awaited_until
from aisched.policy.job_messages import carbon_forecast_missing_message
from aisched.settings import CarbonSettings
from aisched.sources.carbon.base import CarbonForecastPendingError, CarbonSourceError
from aisched.sources.carbon.cache import CachedCarbonSource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForecastRead:
    forecast: Forecast | None = None
    missing: str | None = None
    """Why the zone has no forecast, to tell the jobs planned on it."""
    awaiting_until: datetime | None = None
    """Set while the zone's first read is under way: plan again by then (`plan_awaiting_forecast`)."""
    failed: bool = False
    """The source failed (a failure to count, not a read still under way)."""


async def read_forecast(
    source: CachedCarbonSource | None, settings: CarbonSettings, region: str, now: datetime, *, priority: bool = False
) -> ForecastRead:
    """REGION's forecast over the settings' horizon from NOW; PRIORITY for a zone a running job depends on."""
    if source is None:
        return ForecastRead()
    horizon = timedelta(seconds=settings.forecast_horizon_seconds)
    try:
        return ForecastRead(await source.forecast(region, now, now + horizon, priority=priority))
    except CarbonForecastPendingError as pending:
        wait = timedelta(seconds=settings.forecast_pending_seconds)
        until = forecast_awaited_until(pending.since, now, wait)
        if until is None:
            log.warning("no carbon forecast for %s: %s; deferrable jobs start in time", region, pending)
        return ForecastRead(missing=carbon_forecast_missing_message(region, str(pending)), awaiting_until=until)
    except CarbonSourceError as error:
        log.warning("no carbon forecast for %s: %s; deferrable jobs start in time", region, error)
        return ForecastRead(missing=carbon_forecast_missing_message(region, str(error)), failed=True)
