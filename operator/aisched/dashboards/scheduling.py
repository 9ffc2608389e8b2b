"""Dashboards of GPU capacity, queues and training jobs."""

from __future__ import annotations

from aisched.dashboards.grafana import Dashboard, Panel, Query, Variable
from aisched.dashboards.promql import PER_HOUR, RANGE, RATE, job_census, pool_gauge, quantile


def cluster() -> Dashboard:
    allocatable, allocated = pool_gauge("aisched_gpus_allocatable"), pool_gauge("aisched_gpus_allocated")
    free, fragmented = pool_gauge("aisched_gpus_free"), pool_gauge("aisched_gpus_fragmented")
    shared_milli, shared = pool_gauge("aisched_gpu_share_allocated_gpus"), pool_gauge("aisched_gpus_shared")
    stranded, stranded_milli = pool_gauge("aisched_gpus_stranded"), pool_gauge("aisched_gpu_share_stranded_gpus")
    mig = 'max by (gpu_type, profile, state) (aisched_mig_instances{gpu_type=~"$gpu_type"})'

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
                "Shared GPUs",
                "Parts of GPUs: GPU-equivalents held as fractions (a 30% share is 0.3), the GPUs they hold parts "
                "of, and the partly used GPUs stranded: their free part fits no request waiting now (the packer's "
                "own fragmentation test).",
                (
                    Query(f"sum by (gpu_type) ({shared_milli})", "allocated as shares {{gpu_type}}"),
                    Query(f"sum by (gpu_type) ({shared})", "GPUs shared {{gpu_type}}"),
                    Query(f"sum by (gpu_type) ({stranded})", "GPUs stranded {{gpu_type}}"),
                    Query(f"sum by (gpu_type) ({stranded_milli})", "free on stranded {{gpu_type}}"),
                ),
            ),
            Panel(
                "MIG instances by profile",
                "MIG instances held by pods, and free where nodes advertise nvidia.com/mig-<profile>.",
                (Query(mig, "{{profile}} {{state}} {{gpu_type}}"),),
                stacked=True,
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
                (Query(job_census('phase="Queued"', "queue"), "{{queue}}"),),
                stacked=True,
            ),
            Panel(
                "Queue wait",
                "Submission to admission, over the selected queues.",
                tuple(
                    Query(quantile(q, "aisched_queue_wait_seconds", selector), f"p{round(q * 100)}")
                    for q in (0.5, 0.9, 0.99)
                ),
                unit="s",
            ),
            Panel(
                "Queue wait p90 by queue",
                "90th percentile of submission to admission.",
                (Query(quantile(0.9, "aisched_queue_wait_seconds", selector, "queue"), "{{queue}}"),),
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
                "Other kinds' workloads by kind",
                "Jobs, PyTorchJobs, RayJobs, RayClusters, Deployments, StatefulSets and pod groups in the "
                "cycle, waiting or running (docs/workloads.md).",
                (Query('sum by (kind, state) (aisched_workloads{state=~"Waiting|Running"})', "{{kind}} {{state}}"),),
                stacked=True,
            ),
            Panel(
                "Admissions and preemptions per hour by kind",
                "Other kinds' workloads admitted, and stopped as a whole, over the selected queues.",
                (
                    Query(
                        f"sum by (kind) (rate(aisched_workload_admissions_total{selector}[{RATE}])) {PER_HOUR}",
                        "{{kind}} admitted",
                    ),
                    Query(
                        f"sum by (kind) (rate(aisched_workload_preemptions_total{selector}[{RATE}])) {PER_HOUR}",
                        "{{kind}} stopped",
                    ),
                ),
            ),
            Panel(
                "Pending jobs, longest waiting first",
                "`kubectl describe trainingjobs.aisched.io` says what each waits for.",
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
            stat("Running", "TrainingJobs running now.", job_census('phase="Running"')),
            stat("Queued", "TrainingJobs waiting for admission.", job_census('phase="Queued"')),
            stat("Deferred", "TrainingJobs waiting for a cleaner grid.", job_census('phase="Deferred"')),
            stat(
                "Failed in range", "TrainingJobs that failed.", f'sum(increase({completed}, phase="Failed"}}[{RANGE}]))'
            ),
            Panel(
                "Jobs by phase",
                "Every TrainingJob, stacked by phase.",
                (Query(job_census('phase=~".+"', "phase"), "{{phase}}"),),
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
                    Query(quantile(q, "aisched_placement_duration_seconds"), f"p{round(q * 100)}") for q in (0.5, 0.99)
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
                (Query(quantile(0.9, "aisched_gang_domains", by="level"), "{{level}}"),),
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
