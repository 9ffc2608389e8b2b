"""A small builder of Grafana dashboard JSON (schema 39, Grafana 10.x and 11.x).

Only what aisched's dashboards use: time series, stat, bar gauge and table panels laid
out left to right in rows of 24 columns, a Prometheus data source variable that every
panel and query points at, and query variables filled from label values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 39
GRID_WIDTH = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # timeseries | stat | bargauge | table
    unit: str = "short"
    width: int = 12
    height: int = 8
    stacked: bool = False
    max_value: float | None = None

    def to_json(self, panel_id: int, x: int, y: int) -> dict[str, Any]:
        defaults: dict[str, Any] = {"unit": self.unit}
        if self.max_value is not None:
            defaults["max"] = self.max_value
            defaults["min"] = 0
        if self.kind == "timeseries":
            defaults["custom"] = {
                "fillOpacity": 25 if self.stacked else 10,
                "stacking": {"mode": "normal" if self.stacked else "none", "group": "A"},
                "showPoints": "never",
            }
        return {
            "id": panel_id,
            "type": self.kind,
            "title": self.title,
            "description": self.description,
            "datasource": DATASOURCE,
            "gridPos": {"h": self.height, "w": self.width, "x": x, "y": y},
            "targets": [
                {
                    "refId": chr(ord("A") + index),
                    "datasource": DATASOURCE,
                    "expr": query.expr,
                    "legendFormat": query.legend or "__auto",
                    "instant": query.instant or self.kind == "table",
                    "range": not (query.instant or self.kind == "table"),
                    **({"format": "table"} if self.kind == "table" else {}),
                }
                for index, query in enumerate(self.queries)
            ],
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": self._options(),
        }

    def _options(self) -> dict[str, Any]:
        if self.kind == "timeseries":
            return {
                "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                "tooltip": {"mode": "multi", "sort": "desc"},
            }
        if self.kind in ("stat", "bargauge"):
            return {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
        return {"showHeader": True}


@dataclass(frozen=True)
class Variable:
    """A multi-value variable filled from `label_values(metric, label)`, "All" matching `.*`."""

    name: str
    label: str
    metric: str

    def to_json(self) -> dict[str, Any]:
        definition = f"label_values({self.metric}, {self.name})"
        return {
            "name": self.name,
            "label": self.label,
            "type": "query",
            "datasource": DATASOURCE,
            "definition": definition,
            "query": {"query": definition, "refId": f"{self.name}-values"},
            "refresh": 2,
            "includeAll": True,
            "multi": True,
            "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "sort": 1,
            "hide": 0,
        }


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    variables: tuple[Variable, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["aisched"],
            "editable": True,
            "graphTooltip": 1,
            "refresh": "30s",
            "schemaVersion": SCHEMA_VERSION,
            "time": {"from": "now-6h", "to": "now"},
            "timezone": "browser",
            "annotations": {"list": []},
            "links": [
                {
                    "type": "dashboards",
                    "tags": ["aisched"],
                    "asDropdown": True,
                    "title": "aisched",
                    "includeVars": False,
                    "keepTime": True,
                }
            ],
            "templating": {"list": [_datasource_variable(), *(v.to_json() for v in self.variables)]},
            "panels": _layout(self.panels),
        }


def _datasource_variable() -> dict[str, Any]:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "regex": "",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "includeAll": False,
        "multi": False,
    }


def _layout(panels: tuple[Panel, ...]) -> list[dict[str, Any]]:
    """Left to right, wrapping at 24 columns; a row is as tall as its tallest panel."""
    placed, x, y, row_height = [], 0, 0, 0
    for panel_id, panel in enumerate(panels, start=1):
        if x + panel.width > GRID_WIDTH:
            x, y, row_height = 0, y + row_height, 0
        placed.append(panel.to_json(panel_id, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return placed
