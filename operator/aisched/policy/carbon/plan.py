"""A carbon plan: when a deferrable job runs, in one piece or in chunks, and why then."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from aisched.policy.saturating_time import time_after, time_before


@dataclass(frozen=True, slots=True)
class RunChunk:
    """One stretch of running time, [start, end)."""

    start: datetime
    end: datetime

    @property
    def duration(self) -> timedelta:
        return self.end - self.start


class PlanReason(StrEnum):
    """Why a plan starts when it does; CamelCase so it can be a condition reason."""

    CLEANEST_WINDOW = "CleanestWindow"
    CLEANEST_CHUNKS = "CleanestChunks"
    NOW_IS_CLEANEST = "NowIsCleanest"
    SAVING_TOO_SMALL = "SavingTooSmall"
    BELOW_THRESHOLD = "BelowThreshold"
    THRESHOLD_NOT_REACHED = "ThresholdNotReached"
    FORECAST_UNAVAILABLE = "ForecastUnavailable"
    FORECAST_PENDING = "ForecastPending"
    FORECAST_TOO_SHORT = "ForecastTooShort"
    LATEST_START_REACHED = "LatestStartReached"
    DEADLINE_UNREACHABLE = "DeadlineUnreachable"


@dataclass(frozen=True)
class CarbonPlan:
    """When a job runs and what the forecast says that saves against starting now.

    `chunks` is one chunk for a job that cannot be interrupted, and the pieces in
    time order for one that can. Grams are None where the forecast cannot tell.
    """

    start: datetime
    chunks: tuple[RunChunk, ...]
    latest_start: datetime
    reason: PlanReason
    message: str
    intensity_at_start: float | None = None
    planned_grams: float | None = None
    immediate_grams: float | None = None

    @property
    def end(self) -> datetime:
        return self.chunks[-1].end

    @property
    def saving_grams(self) -> float | None:
        if self.planned_grams is None or self.immediate_grams is None:
            return None
        return self.immediate_grams - self.planned_grams

    @property
    def saving_fraction(self) -> float | None:
        saving = self.saving_grams
        if saving is None or self.immediate_grams is None or self.immediate_grams <= 0:
            return None
        return saving / self.immediate_grams

    @property
    def saving_percent(self) -> float | None:
        fraction = self.saving_fraction
        return None if fraction is None else 100.0 * fraction

    def is_deferred(self, now: datetime) -> bool:
        return self.start > now


def latest_start(
    now: datetime,
    expected_duration: timedelta,
    *,
    deadline: datetime | None = None,
    max_delay: timedelta | None = None,
    submitted_at: datetime | None = None,
) -> datetime:
    """The last start that still finishes by the deadline and within the maximum delay."""
    bounds = []
    if deadline is not None:
        bounds.append(time_before(deadline, expected_duration))
    if max_delay is not None:
        bounds.append(time_after(submitted_at or now, max_delay))
    if not bounds:
        raise ValueError("a deferrable job needs a deadline or a maximum delay")
    return min(bounds)
