"""The Grafana dashboards the chart ships: generated from aisched.dashboards, pointed at a
Prometheus data source variable, and made of queries promtool parses over metrics
aisched really exports."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.observability.catalog import all_queries, known_series, load_dashboards, metric_names_in
from tests.unit.observability.tools import DASHBOARDS, promtool

GENERATOR = [sys.executable, "-m", "aisched.cli", "dashboards"]
REQUIRED = {"cluster", "queues", "jobs", "spot", "carbon", "inference"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

DASHBOARD_NAMES = sorted(load_dashboards())


def test_the_committed_dashboards_are_what_the_generator_writes(tmp_path: Path) -> None:
    subprocess.run([*GENERATOR, "--output-dir", str(tmp_path)], check=True, timeout=60)
    generated = {path.name: path.read_text() for path in tmp_path.glob("*.json")}
    committed = {path.name: path.read_text() for path in DASHBOARDS.glob("*.json")}
    assert generated == committed, "run `make generate`: helm/aisched/dashboards is stale"


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


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses rule expressions, so each query becomes a recording rule."""
    queries = all_queries()
    rules = {
        "groups": [
            {
                "name": "dashboard-queries",
                "rules": [
                    {"record": f"dashboard_query_{index}", "expr": expr} for index, (_, expr) in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(queries)} rules found" in result.stdout
