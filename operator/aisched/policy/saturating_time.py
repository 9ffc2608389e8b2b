"""Time arithmetic that stops at the ends of the calendar instead of raising.

A job may carry any time the API server admits (year 1 to year 9999, in its spec or
in a status someone wrote), and `datetime` raises OverflowError a step beyond. Where a
sum leaves the calendar, "never" or "long ago" is the answer the caller wants (a
deadline in year 9999 is no deadline; work that would end after it ends "never"),
and raising would stop the scheduling cycle for every other job as well.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

END_OF_TIME = datetime.max.replace(tzinfo=UTC)
START_OF_TIME = datetime.min.replace(tzinfo=UTC)


def seconds_duration(seconds: float) -> timedelta:
    """SECONDS as a timedelta, at most `timedelta.max` either way."""
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        return timedelta.max if seconds > 0 else timedelta.min


def time_after(when: datetime, delta: timedelta) -> datetime:
    """WHEN + DELTA, or the end (start) of time where that leaves the calendar."""
    try:
        return when + delta
    except OverflowError:
        return END_OF_TIME if delta > timedelta(0) else START_OF_TIME


def time_before(when: datetime, delta: timedelta) -> datetime:
    """WHEN - DELTA, or the start (end) of time where that leaves the calendar."""
    try:
        return when - delta
    except OverflowError:
        return START_OF_TIME if delta > timedelta(0) else END_OF_TIME
