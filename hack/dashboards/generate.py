"""aisched's Grafana dashboards as code; writes one JSON file per dashboard.

    .venv/bin/python hack/dashboards/generate.py [--output-dir helm/aisched/dashboards]

The chart ships the files as ConfigMaps for Grafana's dashboard sidecar. Queries aggregate
with `max by (...)` before summing gauges: only the leader reports cluster state, but both
replicas' series are in range around a failover. Per-job GPU panels read the recording
rules of the chart's PrometheusRule (aisched_job:dcgm_*), which need NVIDIA's DCGM exporter.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grafana import Dashboard, Panel, Query, Variable

DEFAULT_OUTPUT = Path(__file__).resolve().parents[2] / "helm" / "aisched" / "dashboards"
RATE = "$__rate_interval"
RANGE = "$__range"
PER_HOUR = "* 3600"


def _pool(metric: str) -> str:
    return f'max by (gpu_type, capacity_type) ({metric}{{gpu_type=~"$gpu_type", capacity_type=~"$capacity_type"}})'


def _jobs(phase_matcher: str, by: str = "") -> str:
    census = f'max by (queue, phase) (aisched_jobs{{queue=~"$queue", {phase_matcher}}})'
    return f"sum{f' by ({by})' if by else ''} ({census})"


def _quantile(q: float, histogram: str, selector: str = "", by: str = "") -> str:
    labels = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, sum by ({labels}) (rate({histogram}_bucket{selector}[{RATE}])))"


def cluster() -> Dashboard:
    allocatable, allocated = _pool("aisched_gpus_allocatable"), _pool("aisched_gpus_allocated")
    free, fragmented = _pool("aisched_gpus_free"), _pool("aisched_gpus_fragmented")

    def stat(title: str, description: str, expr: str, unit: str = "short") -> Panel:
        return Panel(title, description, (Query(expr),), kind="stat", unit=unit, width=4, height=4)

    return Dashboard(
        uid="aisched-cluster",
        title="aisched / Cluster GPUs",
        description="GPU capacity, allocation and fragmentation by GPU type and capacity type.",
        variables=(
            Variable("gpu_type", "GPU type", "aisched_gpus_allocatable"),
            Variable("capacity_type", "Capacity", "aisched_gpus_allocatable"),
        ),
        panels=(
            stat("Allocatable GPUs", "GPUs nodes offer to pods.", f"sum({allocatable})"),
            stat("Allocated GPUs", "GPUs requested by scheduled pods of any owner.", f"sum({allocated})"),
            stat("Free GPUs", "GPUs on schedulable nodes that no pod holds.", f"sum({free})"),
            stat(
                "Fragmented GPUs",
                "Free GPUs no pending gang can use: too few together on one node or domain.",
                f"sum({fragmented})",
            ),
            stat("Allocation", "Allocated / allocatable.", f"sum({allocated}) / sum({allocatable})", "percentunit"),
            stat(
                "Fragmentation",
                "Fragmented / free: the share of idle GPUs the queue cannot use.",
                f"sum({fragmented}) / clamp_min(sum({free}), 1)",
                "percentunit",
            ),
            Panel(
                "Allocated GPUs by pool",
                "Stacked by GPU type and capacity type.",
                (Query(allocated, "{{gpu_type}} {{capacity_type}}"),),
                stacked=True,
            ),
            Panel(
                "Allocation by pool",
                "Allocated / allocatable in each pool.",
                (Query(f"{allocated} / clamp_min({allocatable}, 1)", "{{gpu_type}} {{capacity_type}}"),),
                unit="percentunit",
                max_value=1,
            ),
            Panel(
                "Free and fragmented GPUs by GPU type",
                "Free GPUs, and those of them no pending gang fits into.",
                (
                    Query(f"sum by (gpu_type) ({free})", "free {{gpu_type}}"),
                    Query(f"sum by (gpu_type) ({fragmented})", "fragmented {{gpu_type}}"),
                ),
            ),
            Panel(
                "Fragmentation by GPU type",
                "Fragmented / free GPUs.",
                (
                    Query(
                        f"sum by (gpu_type) ({fragmented}) / clamp_min(sum by (gpu_type) ({free}), 1)",
                        "{{gpu_type}}",
                    ),
                ),
                unit="percentunit",
                max_value=1,
            ),
            Panel(
                "GPU utilisation of aisched work (DCGM)",
                "Mean DCGM_FI_DEV_GPU_UTIL over the GPUs of aisched's pods; empty without the DCGM exporter.",
                (Query("avg by (kind) (aisched_job:dcgm_gpu_utilization:avg)", "{{kind}}"),),
                unit="percent",
                width=24,
                max_value=100,
            ),
        ),
    )


def queues() -> Dashboard:
    selector = '{queue=~"$queue"}'
    pending = f"max by (namespace, job_name, queue) (aisched_job_queued_timestamp_seconds{selector})"
    return Dashboard(
        uid="aisched-queues",
        title="aisched / Queues",
        description="Pending work, wait times and GPU quota use of each Queue.",
        variables=(Variable("queue", "Queue", "aisched_jobs"),),
        panels=(
            Panel(
                "Pending jobs by queue",
                "TrainingJobs in phase Queued.",
                (Query(_jobs('phase="Queued"', "queue"), "{{queue}}"),),
                stacked=True,
            ),
            Panel(
                "Queue wait",
                "Submission to admission, over the selected queues.",
                tuple(
                    Query(_quantile(q, "aisched_queue_wait_seconds", selector), f"p{round(q * 100)}")
                    for q in (0.5, 0.9, 0.99)
                ),
                unit="s",
            ),
            Panel(
                "Queue wait p90 by queue",
                "90th percentile of submission to admission.",
                (Query(_quantile(0.9, "aisched_queue_wait_seconds", selector, "queue"), "{{queue}}"),),
                unit="s",
            ),
            Panel(
                "Admissions per hour",
                "Jobs leaving each queue.",
                (
                    Query(
                        f"sum by (queue) (rate(aisched_queue_wait_seconds_count{selector}[{RATE}])) {PER_HOUR}",
                        "{{queue}}",
                    ),
                ),
            ),
            Panel(
                "GPUs used and nominal quota",
                "Used includes GPUs borrowed from the cohort.",
                (
                    Query(f"max by (queue) (aisched_queue_gpus_used{selector})", "{{queue}} used"),
                    Query(f"max by (queue) (aisched_queue_gpus_nominal{selector})", "{{queue}} nominal"),
                ),
            ),
            Panel(
                "Borrowed GPUs",
                "GPUs used beyond the nominal quota, lent by other queues of the cohort.",
                (Query(f"max by (queue) (aisched_queue_gpus_borrowed{selector})", "{{queue}}"),),
                stacked=True,
            ),
            Panel(
                "Longest current wait",
                "Age of the oldest pending job in each queue.",
                (
                    Query(
                        f"time() - min by (queue) (aisched_job_queued_timestamp_seconds{selector})",
                        "{{queue}}",
                    ),
                ),
                unit="s",
            ),
            Panel(
                "Preemptions per hour",
                "Gangs stopped for higher-priority work, by the victim's queue.",
                (
                    Query(
                        f"sum by (queue) (rate(aisched_preemptions_total{selector}[{RATE}])) {PER_HOUR}",
                        "{{queue}}",
                    ),
                ),
            ),
            Panel(
                "Pending jobs, longest waiting first",
                "`kubectl describe trainingjob` says what each waits for.",
                (Query(f"sort_desc(topk(20, time() - {pending}))"),),
                kind="table",
                unit="s",
                width=24,
            ),
        ),
    )


def jobs() -> Dashboard:
    def stat(title: str, description: str, expr: str) -> Panel:
        return Panel(title, description, (Query(expr),), kind="stat", width=6, height=4)

    completed = 'aisched_jobs_completed_total{queue=~"$queue"'
    per_job = 'namespace=~"$namespace", kind="TrainingJob"'
    return Dashboard(
        uid="aisched-jobs",
        title="aisched / Jobs and placement",
        description="TrainingJobs by phase, placement speed and topology, deadlines and GPU use.",
        variables=(
            Variable("queue", "Queue", "aisched_jobs"),
            Variable("namespace", "Namespace", "aisched_job_pod_info"),
        ),
        panels=(
            stat("Running", "TrainingJobs running now.", _jobs('phase="Running"')),
            stat("Queued", "TrainingJobs waiting for admission.", _jobs('phase="Queued"')),
            stat("Deferred", "TrainingJobs waiting for a cleaner grid.", _jobs('phase="Deferred"')),
            stat(
                "Failed in range", "TrainingJobs that failed.", f'sum(increase({completed}, phase="Failed"}}[{RANGE}]))'
            ),
            Panel(
                "Jobs by phase",
                "Every TrainingJob, stacked by phase.",
                (Query(_jobs('phase=~".+"', "phase"), "{{phase}}"),),
                stacked=True,
            ),
            Panel(
                "Completions per hour",
                "Finished TrainingJobs by outcome.",
                (Query(f"sum by (phase) (rate({completed}}}[{RATE}])) {PER_HOUR}", "{{phase}}"),),
            ),
            Panel(
                "Placement decision time",
                "Time to search the inventory for a gang's placement.",
                tuple(
                    Query(_quantile(q, "aisched_placement_duration_seconds"), f"p{round(q * 100)}") for q in (0.5, 0.99)
                ),
                unit="s",
            ),
            Panel(
                "Placement attempts",
                "Placed: the gang got GPUs. NoFit: it stays queued with a reason.",
                (Query(f"sum by (result) (rate(aisched_placement_duration_seconds_count[{RATE}]))", "{{result}}"),),
                unit="ops",
            ),
            Panel(
                "Running gangs by tightest topology level",
                "The smallest domain holding a whole gang: Node is tightest, Cluster spans zones.",
                (Query("max by (level) (aisched_running_gangs)", "{{level}}"),),
                stacked=True,
            ),
            Panel(
                "Domains a new gang spans (p90)",
                "Distinct nodes, NVLink domains, racks and zones per placed gang.",
                (Query(_quantile(0.9, "aisched_gang_domains", by="level"), "{{level}}"),),
            ),
            Panel(
                "Deadline slack",
                "Deadline minus expected finish; negative will be late.",
                (
                    Query(
                        "sort(min by (namespace, job_name) "
                        '(aisched_job_deadline_slack_seconds{namespace=~"$namespace"}))'
                    ),
                ),
                kind="table",
                unit="s",
            ),
            Panel(
                "GPU utilisation by job (DCGM)",
                "Mean utilisation of each job's GPUs; empty without the DCGM exporter.",
                (Query(f"aisched_job:dcgm_gpu_utilization:avg{{{per_job}}}", "{{namespace}}/{{job_name}}"),),
                unit="percent",
                max_value=100,
            ),
            Panel(
                "GPU power by job (DCGM)",
                "Power drawn by each job's GPUs.",
                (Query(f"aisched_job:dcgm_gpu_power_watts:sum{{{per_job}}}", "{{namespace}}/{{job_name}}"),),
                unit="watt",
                width=24,
            ),
        ),
    )


def spot() -> Dashboard:
    selector = '{capacity_type=~"$capacity_type"}'

    def stat(title: str, description: str, expr: str) -> Panel:
        return Panel(title, description, (Query(expr),), kind="stat", width=6, height=4)

    return Dashboard(
        uid="aisched-spot",
        title="aisched / Spot interruptions and lost work",
        description="Capacity interruptions, the work they cost, checkpoints and on-demand fallbacks.",
        variables=(Variable("capacity_type", "Capacity", "aisched_gpus_allocatable"),),
        panels=(
            stat(
                "Interruptions in range",
                "Gangs that lost capacity.",
                f"sum(increase(aisched_interruptions_total{selector}[{RANGE}]))",
            ),
            stat(
                "Lost GPU-hours in range",
                "GPU time since the last checkpoint at each interruption.",
                f"sum(increase(aisched_lost_gpu_seconds_total{selector}[{RANGE}])) / 3600",
            ),
            stat(
                "Checkpoints in range",
                "Checkpoints workers reported.",
                f"sum(increase(aisched_checkpoints_total[{RANGE}]))",
            ),
            stat(
                "On-demand fallbacks in range",
                "Spot-preferring jobs moved to on-demand to meet a deadline.",
                f"sum(increase(aisched_on_demand_fallbacks_total[{RANGE}]))",
            ),
            Panel(
                "Interruptions per hour",
                "By capacity type and the signal that announced them.",
                (
                    Query(
                        "sum by (capacity_type, signal) "
                        f"(rate(aisched_interruptions_total{selector}[{RATE}])) {PER_HOUR}",
                        "{{capacity_type}} {{signal}}",
                    ),
                ),
            ),
            Panel(
                "Work lost, in GPUs",
                "Lost GPU-seconds per second: how many GPUs' work is thrown away on average.",
                (
                    Query(
                        f"sum by (capacity_type) (rate(aisched_lost_gpu_seconds_total{selector}[{RATE}]))",
                        "{{capacity_type}}",
                    ),
                ),
                stacked=True,
            ),
            Panel(
                "Lost share of admitted GPU time",
                "Lost GPU time / GPUs held by admitted jobs (the AischedLostWorkHigh ratio).",
                (
                    Query(
                        f"sum(rate(aisched_lost_gpu_seconds_total[{RATE}])) / "
                        "clamp_min(sum(max by (queue) (aisched_queue_gpus_used)), 1)",
                        "lost",
                    ),
                ),
                unit="percentunit",
            ),
            Panel(
                "Allocated GPUs by capacity type",
                "Where the GPUs in use come from.",
                (
                    Query(
                        f"sum by (capacity_type) (max by (gpu_type, capacity_type) (aisched_gpus_allocated{selector}))",
                        "{{capacity_type}}",
                    ),
                ),
                stacked=True,
            ),
            Panel(
                "Checkpoints per hour",
                "By what asked for them.",
                (Query(f"sum by (reason) (rate(aisched_checkpoints_total[{RATE}])) {PER_HOUR}", "{{reason}}"),),
            ),
            Panel(
                "Gang restarts per hour",
                "By cause.",
                (Query(f"sum by (reason) (rate(aisched_gang_restarts_total[{RATE}])) {PER_HOUR}", "{{reason}}"),),
            ),
        ),
    )


def carbon() -> Dashboard:
    emitted = f"sum(increase(aisched_carbon_emitted_grams_total[{RANGE}]))"
    avoided = f"sum(increase(aisched_carbon_avoided_grams_total[{RANGE}]))"

    def stat(title: str, description: str, expr: str, unit: str) -> Panel:
        return Panel(title, description, (Query(expr),), kind="stat", unit=unit, width=6, height=4)

    return Dashboard(
        uid="aisched-carbon",
        title="aisched / Carbon",
        description="Estimated emissions, what deferral saved, and the grid intensity that drove it.",
        variables=(Variable("region", "Grid region", "aisched_grid_carbon_intensity_grams_per_joule"),),
        panels=(
            stat("Emitted in range", "Estimated CO2e of aisched's GPUs.", emitted, "massg"),
            stat("Avoided by deferral in range", "Against starting each deferred job at once.", avoided, "massg"),
            stat(
                "Avoided share",
                "Avoided / (emitted + avoided).",
                f"{avoided} / clamp_min({avoided} + {emitted}, 1)",
                "percentunit",
            ),
            stat(
                "Deferred now",
                "TrainingJobs waiting for a cleaner grid.",
                'sum(max by (queue, phase) (aisched_jobs{phase="Deferred"}))',
                "short",
            ),
            Panel(
                "Grid carbon intensity (g/kWh)",
                "Latest value from the configured source, per region.",
                (
                    Query(
                        'max by (region) (aisched_grid_carbon_intensity_grams_per_joule{region=~"$region"}) * 3.6e6',
                        "{{region}}",
                    ),
                ),
            ),
            Panel(
                "Emissions and savings per hour",
                "Estimated CO2e emitted, and avoided by deferral.",
                (
                    Query(
                        f"sum by (kind) (rate(aisched_carbon_emitted_grams_total[{RATE}])) {PER_HOUR}",
                        "emitted {{kind}}",
                    ),
                    Query(
                        f"sum by (kind) (rate(aisched_carbon_avoided_grams_total[{RATE}])) {PER_HOUR}",
                        "avoided {{kind}}",
                    ),
                ),
                unit="massg",
            ),
            Panel(
                "Deferred jobs by queue",
                "Jobs in phase Deferred.",
                (Query('sum by (queue) (max by (queue, phase) (aisched_jobs{phase="Deferred"}))', "{{queue}}"),),
                stacked=True,
            ),
            Panel(
                "Deferrals per hour",
                "By planning mode.",
                (Query(f"sum by (mode) (rate(aisched_deferrals_total[{RATE}])) {PER_HOUR}", "{{mode}}"),),
            ),
            Panel(
                "Measured GPU power (DCGM)",
                "Power of the GPUs of aisched's pods; empty without the DCGM exporter.",
                (Query("sum by (kind) (aisched_job:dcgm_gpu_power_watts:sum)", "{{kind}}"),),
                unit="watt",
                stacked=True,
            ),
            Panel(
                "Carbon source errors per hour",
                "Failed lookups; jobs still start in time for their deadlines.",
                (
                    Query(
                        f"sum by (source) (rate(aisched_carbon_source_errors_total[{RATE}])) {PER_HOUR}", "{{source}}"
                    ),
                ),
            ),
        ),
    )


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
                (Query(_quantile(0.99, "aisched_reconcile_duration_seconds", by="kind"), "{{kind}}"),),
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


DASHBOARDS = {
    "cluster": cluster,
    "queues": queues,
    "jobs": jobs,
    "spot": spot,
    "carbon": carbon,
    "inference": inference,
    "operator": operator,
}


def render(name: str) -> str:
    return json.dumps(DASHBOARDS[name]().to_json(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for name in DASHBOARDS:
        (args.output_dir / f"{name}.json").write_text(render(name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
