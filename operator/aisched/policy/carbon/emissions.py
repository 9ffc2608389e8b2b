"""Grams of CO2eq from power or energy and grid carbon intensity."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from aisched.policy.carbon.forecast import Forecast, ForecastCoverageError, IntensityPoint

# Seconds per hour and watts per kilowatt: grams = W/1000 * (g/kWh * s)/3600.
_GRAM_SECONDS_TO_KWH = 1000.0 * 3600.0
JOULES_PER_KWH = 3.6e6


def grams_from_joules(joules: float, grams_per_kwh: float) -> float:
    """Grams of CO2eq from energy drawn (J) at a grid intensity (gCO2eq/kWh)."""
    return joules / JOULES_PER_KWH * grams_per_kwh


def emissions_grams(power_w: float, grams_per_kwh_seconds: float) -> float:
    """Grams of CO2eq from a power draw and an intensity integral (g/kWh * s)."""
    return power_w * grams_per_kwh_seconds / _GRAM_SECONDS_TO_KWH


def estimate_emissions(
    power_w: float,
    intensity_series: Forecast | Sequence[IntensityPoint],
    start: datetime,
    end: datetime,
) -> float:
    """Grams of CO2eq drawn by `power_w` watts over [start, end).

    A Forecast must cover the interval. A sequence of observed points is a step function
    in which each point holds until the next and the last holds on to `end` (the latest
    reading is the best estimate of what follows); it must start at or before `start`.
    """
    if end <= start:
        return 0.0
    if isinstance(intensity_series, Forecast):
        return emissions_grams(power_w, intensity_series.integral(start, end))
    points = sorted(intensity_series, key=lambda p: p.time)
    if not points or points[0].time > start:
        raise ForecastCoverageError(f"no carbon intensity reading at or before {start.isoformat()}")
    total = 0.0
    for here, following in zip(points, [*points[1:], None], strict=True):
        seg_start = max(here.time, start)
        seg_end = min(following.time if following else end, end)
        if seg_end > seg_start:
            total += here.grams_per_kwh * (seg_end - seg_start).total_seconds()
    return emissions_grams(power_w, total)
