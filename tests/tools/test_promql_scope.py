"""What the scoping writes, Prometheus's own parser reads: generated and hostile tenant queries through promtool."""

from __future__ import annotations

import json
from pathlib import Path

import promql_parser as pp
from hypothesis import HealthCheck, given, settings

from aisched.policy.promql_scope import QueryRefusedError, TenantScope, scope_query
from tests.tools.binaries import promtool
from tests.unit.policy.test_promql_scope import CONFINED, expressions

SCOPE = TenantScope('team-"a"\\\n')
"""A namespace no Kubernetes allows, so the printer's quoting is read back by Prometheus too."""


def scoped_queries() -> list[str]:
    found: list[str] = []

    @settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(expressions())
    def collect(query: str) -> None:
        try:
            scoped = scope_query(query, SCOPE)
        except QueryRefusedError:
            return
        # Recording rules take instant vectors and scalars; a bare string literal is neither.
        if not isinstance(pp.parse(scoped), pp.StringLiteral):
            found.append(scoped)

    collect()
    found.extend(scope_query(query, SCOPE) for query in CONFINED)
    return found


def test_prometheus_parses_every_scoped_query(tmp_path: Path) -> None:
    queries = scoped_queries()
    assert len(queries) > 50
    rules = {"groups": [{"name": "g", "rules": [{"record": f"r{i}", "expr": q} for i, q in enumerate(queries)]}]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules, ensure_ascii=False), encoding="utf-8")  # go-yaml reads no surrogate pairs
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(queries)} rules found" in checked.stdout
