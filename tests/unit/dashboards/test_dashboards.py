"""The Grafana dashboards the chart ships: generated from aisched.dashboards, pointed at a
Prometheus data source variable, and made of queries over metrics
aisched really exports."""

from __future__ import annotations

import re
import sys

import pytest

from tests.metrics_catalog import all_queries, known_series, load_dashboards, metric_names_in

GENERATOR = [sys.executable, "-m", "aisched.cli", "dashboards"]
REQUIRED = {"cluster", "queues", "jobs", "spot", "carbon", "inference"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

DASHBOARD_NAMES = sorted(load_dashboards())


def test_every_area_has_a_dashboard() -> None:
    assert set(DASHBOARD_NAMES) >= REQUIRED


@pytest.mark.parametrize("name", DASHBOARD_NAMES)
def test_every_panel_and_query_uses_the_datasource_variable(name: str) -> None:
    dashboard = load_dashboards()[name]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']} has no query"
        assert all(target["datasource"] == DATASOURCE for target in panel["targets"]), panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]


@pytest.mark.parametrize("name", DASHBOARD_NAMES)
def test_layout_is_valid(name: str) -> None:
    dashboard = load_dashboards()[name]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["description"], f"{panel['title']} needs a description"


def test_dashboard_uids_are_unique_and_stable() -> None:
    uids = {name: dashboard["uid"] for name, dashboard in load_dashboards().items()}
    assert len(set(uids.values())) == len(uids)
    assert all(uid == f"aisched-{name}" for name, uid in uids.items())


def test_every_variable_reads_a_label_aisched_exports() -> None:
    known = known_series()
    for name, dashboard in load_dashboards().items():
        for variable in dashboard["templating"]["list"]:
            if variable["type"] != "query":
                continue
            metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["definition"]).groups()  # type: ignore[union-attr]
            assert label in known[metric], f"{name}: ${variable['name']} reads {label} of {metric}"


def test_every_query_refers_only_to_known_series() -> None:
    known = known_series()
    for where, expr in all_queries():
        unknown = metric_names_in(expr) - set(known)
        assert not unknown, f"{where}: {sorted(unknown)} is not exported"
        assert metric_names_in(expr), f"{where}: no metric in {expr!r}"
