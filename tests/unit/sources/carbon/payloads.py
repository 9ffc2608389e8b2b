"""Response bodies in the shapes each API documents, written from its documentation.

Electricity Maps: https://static.electricitymaps.com/api/docs (v3 carbon-intensity/latest, /forecast).
WattTime: https://docs.watttime.org (v3 /login, /forecast, /signal-index).
GB National Grid: https://carbon-intensity.github.io/api-definitions (/intensity, /regional).
Prometheus: https://prometheus.io/docs/prometheus/latest/querying/api/ (query, query_range).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def electricitymaps_latest(zone: str = "DE", value: float | None = 302.0) -> dict[str, Any]:
    return {
        "zone": zone,
        "carbonIntensity": value,
        "datetime": "2024-05-21T10:00:00.000Z",
        "updatedAt": "2024-05-21T10:31:52.012Z",
        "createdAt": "2024-05-18T10:32:48.262Z",
        "emissionFactorType": "lifecycle",
        "isEstimated": True,
        "estimationMethod": "TIME_SLICER_AVERAGE",
    }


def electricitymaps_forecast(
    zone: str = "DE", values: tuple[float, ...] = (269.0, 254.0, 210.0, 198.0)
) -> dict[str, Any]:
    return {
        "zone": zone,
        "forecast": [
            {"carbonIntensity": value, "datetime": f"2024-05-21T{11 + i:02d}:00:00.000Z"}
            for i, value in enumerate(values)
        ],
        "updatedAt": "2024-05-21T10:45:51.290Z",
    }


def watttime_forecast(values_lbs_per_mwh: tuple[float, ...], units: str = "lbs_co2_per_mwh") -> dict[str, Any]:
    return {
        "data": [
            {"point_time": f"2024-05-21T10:{5 * i:02d}:00+00:00", "value": value}
            for i, value in enumerate(values_lbs_per_mwh)
        ],
        "meta": {
            "data_point_period_seconds": 300,
            "region": "CAISO_NORTH",
            "warnings": [],
            "signal_type": "co2_moer",
            "model": {"date": "2024-03-01"},
            "units": units,
            "generated_at_period_seconds": 300,
            "generated_at": "2024-05-21T10:00:00+00:00",
        },
    }


def watttime_signal_index(percentile: float) -> dict[str, Any]:
    return {
        "data": [{"point_time": "2024-05-21T10:00:00+00:00", "value": percentile}],
        "meta": {
            "data_point_period_seconds": 300,
            "region": "CAISO_NORTH",
            "signal_type": "co2_moer",
            "units": "percentile",
            "generated_at": "2024-05-21T10:00:00+00:00",
        },
    }


def _gb_period(hour: int, minute: int, forecast: float, actual: float | None) -> dict[str, Any]:
    end_h, end_m = (hour, 30) if minute == 0 else (hour + 1, 0)
    intensity: dict[str, Any] = {"forecast": forecast, "actual": actual, "index": "moderate"}
    return {
        "from": f"2024-05-21T{hour:02d}:{minute:02d}Z",
        "to": f"2024-05-21T{end_h:02d}:{end_m:02d}Z",
        "intensity": intensity,
    }


def gb_national(rows: Sequence[tuple[int, int, float, float | None]]) -> dict[str, Any]:
    return {"data": [_gb_period(*row) for row in rows]}


_MIX = [
    {"fuel": "biomass", "perc": 4.2},
    {"fuel": "coal", "perc": 0.0},
    {"fuel": "imports", "perc": 6.5},
    {"fuel": "gas", "perc": 43.6},
    {"fuel": "nuclear", "perc": 17.6},
    {"fuel": "other", "perc": 0.3},
    {"fuel": "hydro", "perc": 2.2},
    {"fuel": "solar", "perc": 18.1},
    {"fuel": "wind", "perc": 7.5},
]


def _gb_regional_period(hour: int, minute: int, forecast: float) -> dict[str, Any]:
    period = _gb_period(hour, minute, forecast, None)
    period["intensity"] = {"forecast": forecast, "index": "low"}
    period["generationmix"] = _MIX
    return period


def gb_region(rows: Sequence[tuple[int, int, float]], *, as_list: bool) -> dict[str, Any]:
    """A time range answers with the region as an object under data; "now" with a one-element list."""
    region = {
        "regionid": 13,
        "dnoregion": "UKPN London",
        "shortname": "London",
        "data": [_gb_regional_period(*row) for row in rows],
    }
    return {"data": [region] if as_list else region}


def prometheus_matrix(samples: list[tuple[float, str]], series: int = 1) -> dict[str, Any]:
    result = [
        {"metric": {"__name__": "grid_carbon_intensity_grams_per_kwh", "region": f"GB{i}"}, "values": samples}
        for i in range(series)
    ]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def prometheus_vector(stamp: float, value: str) -> dict[str, Any]:
    metric = {"__name__": "grid_carbon_intensity_grams_per_kwh", "region": "GB"}
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": metric, "value": [stamp, value]}]},
    }


def prometheus_error(message: str) -> dict[str, Any]:
    return {"status": "error", "errorType": "bad_data", "error": message}
