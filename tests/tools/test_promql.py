"""Queries, rules and the exposition as promtool, Prometheus' own checker, reads them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from aisched.api.inference_service import MetricSpec, MetricType
from aisched.metrics import Metrics
from aisched.sources.prometheus import MetricNames, builtin_query
from tests.metrics_catalog import all_queries, exercise
from tests.tools.binaries import promtool


def spec(kind: MetricType, query: str | None = None) -> MetricSpec:
    return MetricSpec(type=kind, query=query, target_per_replica=1)


def test_exposition_has_no_problem() -> None:
    metrics = Metrics(CollectorRegistry())
    exercise(metrics)
    result = promtool("check", "metrics", stdin=generate_latest(metrics.registry))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (result.stdout + result.stderr).strip()


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


def test_builtin_queries_parse_as_promql(tmp_path: Path) -> None:
    pods = ["svc-7f9c-abcde", "svc-7f9c-fghij"]
    exprs = [
        builtin_query(spec(kind), "ml", pods, MetricNames(concurrency_gauge="vllm:num_requests_running"))
        for kind in (MetricType.REQUESTS_PER_SECOND, MetricType.CONCURRENCY, MetricType.GPU_UTILIZATION)
    ]
    rules = {"groups": [{"name": "g", "rules": [{"record": f"r{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
