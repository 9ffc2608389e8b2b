"""The dashboard of InferenceServices."""

from __future__ import annotations

from aisched.dashboards.grafana import Dashboard, Panel, Query, Variable
from aisched.dashboards.promql import PER_HOUR, RANGE, RATE


def inference() -> Dashboard:
    selector = '{namespace=~"$namespace", service=~"$service"}'
    by_service = "max by (namespace, service)"
    per_service = 'kind="InferenceService", namespace=~"$namespace", job_name=~"$service"'
    return Dashboard(
        uid="aisched-inference",
        title="aisched / Inference autoscaling",
        description="InferenceService replicas, load against target, and the autoscaler's decisions.",
        variables=(
            Variable("namespace", "Namespace", "aisched_inference_desired_replicas"),
            Variable("service", "Service", "aisched_inference_desired_replicas"),
        ),
        panels=(
            Panel(
                "Desired and running replicas",
                "What the autoscaler wants, and what runs.",
                (
                    Query(
                        f"{by_service} (aisched_inference_desired_replicas{selector})",
                        "{{namespace}}/{{service}} desired",
                    ),
                    Query(
                        "sum by (namespace, service) (max by (namespace, service, capacity_type) "
                        f"(aisched_inference_replicas{selector}))",
                        "{{namespace}}/{{service}} running",
                    ),
                ),
            ),
            Panel(
                "Running replicas by capacity type",
                "Spot replicas above the on-demand floor.",
                (
                    Query(
                        "sum by (capacity_type) (max by (namespace, service, capacity_type) "
                        f"(aisched_inference_replicas{selector}))",
                        "{{capacity_type}}",
                    ),
                ),
                stacked=True,
            ),
            Panel(
                "Load per replica and target",
                "The autoscaling metric per ready replica against spec.autoscaling.metric.targetPerReplica.",
                (
                    Query(
                        f"{by_service} (aisched_inference_metric_per_replica{selector})", "{{namespace}}/{{service}}"
                    ),
                    Query(
                        f"{by_service} (aisched_inference_metric_target_per_replica{selector})",
                        "{{namespace}}/{{service}} target",
                    ),
                ),
            ),
            Panel(
                "Load against target",
                "Above 1 scales up, below 1 scales down, outside the tolerance.",
                (
                    Query(
                        f"{by_service} (aisched_inference_metric_per_replica{selector}) / "
                        f"{by_service} (aisched_inference_metric_target_per_replica{selector})",
                        "{{namespace}}/{{service}}",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "Scaling decisions per hour",
                "Decisions that changed the replica count.",
                (
                    Query(
                        "sum by (direction) "
                        f'(rate(aisched_autoscaler_decisions_total{{direction!="None"}}[{RATE}])) {PER_HOUR}',
                        "{{direction}}",
                    ),
                ),
            ),
            Panel(
                "Decisions by reason in range",
                "Why the autoscaler did what it did, scaling or not.",
                (
                    Query(
                        f"sort_desc(sum by (reason) (increase(aisched_autoscaler_decisions_total[{RANGE}])))",
                        "{{reason}}",
                        instant=True,
                    ),
                ),
                kind="bargauge",
            ),
            Panel(
                "GPU utilisation by service (DCGM)",
                "Mean utilisation of each service's GPUs; empty without the DCGM exporter.",
                (
                    Query(
                        f"aisched_job:dcgm_gpu_utilization:avg{{{per_service}}}",
                        "{{namespace}}/{{job_name}}",
                    ),
                ),
                unit="percent",
                max_value=100,
            ),
            Panel(
                "GPU power by service (DCGM)",
                "Power drawn by each service's GPUs.",
                (
                    Query(
                        f"aisched_job:dcgm_gpu_power_watts:sum{{{per_service}}}",
                        "{{namespace}}/{{job_name}}",
                    ),
                ),
                unit="watt",
            ),
        ),
    )
