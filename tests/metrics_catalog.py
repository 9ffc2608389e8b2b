"""What aisched exports: every helper called once with plausible values, and the
series and labels that gives. Dashboards and rules may only use what is here."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from aisched.metrics import GpuPoolUsage, Metrics, SharedGpuUsage
from aisched.metrics.sharing import mig_slices
from tests.paths import DASHBOARDS

# Series aisched's queries may use that other exporters (or Prometheus) provide.
FOREIGN_SERIES = {
    "up": {"job", "instance"},
    "DCGM_FI_DEV_GPU_UTIL": {"namespace", "pod", "gpu"},
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": {"namespace", "pod", "gpu"},
}
# Labels Prometheus attaches to every scraped series (ServiceMonitor adds the rest).
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
RECORDING_RULES = {
    "aisched_job:dcgm_gpu_utilization:avg": {"namespace", "job_name", "kind"},
    "aisched_job:dcgm_gpu_power_watts:sum": {"namespace", "job_name", "kind"},
}
_METRIC_NAME = re.compile(r"\b((?:aisched_|process_|DCGM_FI_)[A-Za-z0-9_:]*|up(?=\{))")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def exercise(metrics: Metrics) -> None:
    """Call every helper once, so every labelled metric has at least one series."""
    metrics.workload.record_jobs({("default", "Queued"): 2, ("default", "Running"): 1, ("research", "Deferred"): 1})
    metrics.workload.record_job_pending("ml", "llama", "default", datetime(2026, 1, 1, tzinfo=UTC))
    metrics.workload.record_job_admitted("ml", "bert", "default", waited_seconds=42)
    metrics.workload.record_job_finished("default", "Succeeded")
    metrics.workload.record_preemption("research")
    metrics.workload.record_kind_workloads({("jobs.batch", "Running"): 2})
    metrics.workload.record_kind_admission("pytorchjobs.kubeflow.org", "default")
    metrics.workload.record_kind_preemption("rayclusters.ray.io", "research")
    metrics.workload.record_queue("default", nominal_gpus=64, used_gpus=72, borrowed_gpus=8)
    metrics.workload.record_placement(0.003, placed=True)
    metrics.workload.record_placement(0.5, placed=False)
    metrics.workload.record_gang_domains({"Node": 4, "NVLinkDomain": 1, "Rack": 1, "Zone": 1})
    metrics.workload.record_running_gangs({"Node": 3, "Rack": 1})
    metrics.workload.record_deadline_slack("ml", "llama", -120)
    metrics.pods.record("ml", "llama", "TrainingJob", ["llama-g1-worker-0", "llama-g1-worker-1"])
    metrics.capacity.record_gpu_pools(
        [
            GpuPoolUsage("NVIDIA-H100-80GB-HBM3", "OnDemand", 64, 48, 16, 3),
            GpuPoolUsage("NVIDIA-H100-80GB-HBM3", "Spot", 32, 8, 24, 0),
        ]
    )
    metrics.capacity.record_pending_demand(
        {("NVIDIA-H100-80GB-HBM3", "us-east-1a", "Spot"): 32, ("any", "any", "OnDemand"): 8}
    )
    metrics.sharing.record_shared_gpus([SharedGpuUsage("NVIDIA-H100-80GB-HBM3", "OnDemand", 3, 1900, 1, 100)])
    metrics.sharing.record_mig_slices(
        mig_slices([("NVIDIA-H100-80GB-HBM3", "3g.40gb", 4)], [("NVIDIA-H100-80GB-HBM3", "3g.40gb")])
    )
    metrics.interruptions.record_interruption("Spot", "NodeTaint", lost_seconds=600, gpus=16)
    metrics.interruptions.record_checkpoint("Interruption")
    metrics.interruptions.record_gang_restart("Interruption")
    metrics.interruptions.record_on_demand_fallback()
    metrics.carbon.record_deferral("Forecast")
    metrics.carbon.record_carbon("TrainingJob", emitted_grams=1500, avoided_grams=400)
    metrics.carbon.record_grid_intensity("GB", 180)
    metrics.carbon.record_carbon_source_error("NationalGrid")
    metrics.serving.record_autoscaler_decision(2, 4, "ScaleUp")
    metrics.serving.record_inference_service(
        "ml", "chat", desired=4, on_demand=1, spot=3, metric_per_replica=12.5, target_per_replica=10
    )
    metrics.process.record_reconcile("TrainingJob", 0.02)
    metrics.process.record_reconcile("Pod", 0.2, failed=True)
    metrics.record_leadership(True)
    metrics.process.record_scheduling_cycle(0.05, 0.04)
    metrics.process.record_workqueue("TrainingJob", depth=3, pending_wakeups=10)
    metrics.follow_leadership(lambda: True)


def exported_series() -> dict[str, set[str]]:
    """Sample name -> its label names, for everything a fully exercised Metrics exposes."""
    metrics = Metrics(CollectorRegistry())
    exercise(metrics)
    series: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


def known_series() -> dict[str, set[str]]:
    return {**exported_series(), **FOREIGN_SERIES, **RECORDING_RULES}


def metric_names_in(expr: str) -> set[str]:
    """Metric names a PromQL expression (or a label_values(...) call) refers to."""
    return set(_METRIC_NAME.findall(_STRING.sub('""', expr)))


# What Grafana puts in place of its built-in variables, for parsing outside Grafana.
GRAFANA_BUILTINS = {"$__rate_interval": "1m", "$__interval": "30s", "$__range": "1h"}


def load_dashboards() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def substitute(expr: str, dashboard: dict[str, Any]) -> str:
    """The query as Grafana sends it with every variable at "All" (regex `.*`)."""
    for builtin, value in GRAFANA_BUILTINS.items():
        expr = expr.replace(builtin, value)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            expr = re.sub(rf"\$\{{?{variable['name']}\}}?\b", variable["allValue"], expr)
    return expr


def all_queries() -> list[tuple[str, str]]:
    """(dashboard/panel, PromQL ready to run) for every panel query of every dashboard."""
    return [
        (f"{name}/{title}", substitute(expr, dashboard))
        for name, dashboard in load_dashboards().items()
        for title, expr in panel_queries(dashboard)
    ]
