"""Emissions (aisched.policy.carbon.emissions): grams from power over a forecast or readings, and from energy."""

from __future__ import annotations

from datetime import timedelta

import pytest

from aisched.policy.carbon import Forecast, ForecastCoverageError, IntensityPoint, estimate_emissions, grams_from_joules
from tests.unit.policy.carbon.forecasts import T0


def test_estimate_emissions_from_a_forecast_and_from_readings() -> None:
    fc = Forecast("GB", T0, timedelta(minutes=30), (200.0, 400.0))
    # 1 kW for 30 min at 200 g/kWh + 15 min at 400 g/kWh = 100 g + 100 g.
    assert estimate_emissions(1000, fc, T0, T0 + timedelta(minutes=45)) == pytest.approx(200.0)
    readings = [IntensityPoint(T0, 200.0), IntensityPoint(T0 + timedelta(minutes=30), 400.0)]
    assert estimate_emissions(1000, readings, T0, T0 + timedelta(hours=1)) == pytest.approx(300.0)
    with pytest.raises(ForecastCoverageError):
        estimate_emissions(1000, fc, T0, T0 + timedelta(hours=2))
    with pytest.raises(ForecastCoverageError):
        estimate_emissions(1000, readings, T0 - timedelta(minutes=1), T0 + timedelta(hours=1))


def test_grams_from_joules_is_energy_in_kwh_times_intensity() -> None:
    assert grams_from_joules(3.6e6, 250.0) == pytest.approx(250.0)
    assert grams_from_joules(1000.0 * 3600 / 2, 400.0) == pytest.approx(200.0)  # 1 kW for half an hour
    assert grams_from_joules(0.0, 400.0) == 0.0
