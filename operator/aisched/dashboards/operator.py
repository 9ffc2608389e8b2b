"""The dashboard of the operator's own health."""

from __future__ import annotations

from aisched.dashboards.grafana import Dashboard, Panel, Query
from aisched.dashboards.promql import RATE, quantile


def operator() -> Dashboard:
    ours = "on (instance, job) group_left () aisched_build_info"
    return Dashboard(
        uid="aisched-operator",
        title="aisched / Operator",
        description="Health of the operator's replicas: leadership, reconcile time and errors, resources.",
        panels=(
            Panel(
                "Replicas reporting",
                "Operator replicas Prometheus scrapes.",
                (Query("count(aisched_build_info)"),),
                kind="stat",
                width=8,
                height=4,
            ),
            Panel(
                "Leaders",
                "Replicas holding the leader Lease: 1 when healthy.",
                (Query("sum(aisched_leader)"),),
                kind="stat",
                width=8,
                height=4,
            ),
            Panel(
                "Versions",
                "Replicas by version.",
                (Query("count by (version) (aisched_build_info)", "{{version}}"),),
                kind="stat",
                width=8,
                height=4,
            ),
            Panel(
                "Reconcile time p99 by kind",
                "Time one reconcile takes.",
                (Query(quantile(0.99, "aisched_reconcile_duration_seconds", by="kind"), "{{kind}}"),),
                unit="s",
            ),
            Panel(
                "Reconcile errors per second by kind",
                "Reconciles that raised; the objects' events and the logs say why.",
                (Query(f"sum by (kind) (rate(aisched_reconcile_errors_total[{RATE}]))", "{{kind}}"),),
            ),
            Panel(
                "Leader by replica",
                "Which replica acts.",
                (Query("max by (instance) (aisched_leader)", "{{instance}}"),),
            ),
            Panel(
                "Resident memory by replica",
                "Inventory caches grow with nodes and pods.",
                (Query(f"process_resident_memory_bytes * {ours}", "{{instance}}"),),
                unit="bytes",
            ),
            Panel(
                "CPU by replica",
                "Cores used.",
                (Query(f"rate(process_cpu_seconds_total[{RATE}]) * {ours}", "{{instance}}"),),
                width=24,
            ),
        ),
    )
