"""Every Prometheus metric aisched exports, defined in one place.

Conventions (https://prometheus.io/docs/practices/naming/): one `aisched_` prefix,
base units (seconds, grams, joules), `_total` on counters, and label values from
short, fixed sets that each help text names. Per-object series (one per live job,
pod or service) are the exception, kept only while the object exists and removed
by the `forget_*` helpers. Call sites use the `record_*` helpers, which refuse label
values outside the documented sets so that a typo cannot create new series.

Label names avoid `job` and `instance`, which Prometheus attaches to every scraped
series: a TrainingJob is `job_name`. The chart's ServiceMonitor uses honorLabels so
that `namespace` and `pod` here mean the workload's, not the operator's.

Only the leader replica reports cluster state (`record_leadership(False)` clears it),
so sums over both replicas do not count anything twice.

Nothing is registered at import: `Metrics(registry)` registers on the registry it
is given, so tests use a fresh one and the operator serves its own with `serve`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import version
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from aisched.api.common import CapacityType
from aisched.api.training_job import TrainingJobPhase
from aisched.policy.autoscale import ReasonCode
from aisched.policy.scheduler.demand import ANY_GPU_TYPE
from aisched.policy.topology import LOCAL_TOPOLOGY

PREFIX = "aisched"

KINDS = ("TrainingJob", "InferenceService")
RECONCILED_KINDS = (*KINDS, "Queue", "Node", "Pod")
PHASES = tuple(phase.value for phase in TrainingJobPhase)
FINISHED_PHASES = (TrainingJobPhase.SUCCEEDED.value, TrainingJobPhase.FAILED.value)
CAPACITY_TYPES = tuple(capacity.value for capacity in CapacityType)
# The levels of the operator's topology (settings.topology), tightest first; these are the local
# cluster's. "Cluster": the gang spans the widest level, so no single domain holds it.
TOPOLOGY_LEVELS = LOCAL_TOPOLOGY.names
SPREAD_LEVELS = (*TOPOLOGY_LEVELS, "Cluster")
PLACEMENT_RESULTS = ("Placed", "NoFit")
INTERRUPTION_SIGNALS = ("NodeTaint", "DisruptionTarget", "NodeLost")
CHECKPOINT_REASONS = ("Periodic", "Interruption", "Preemption", "Suspend", "Deferral")
RESTART_REASONS = ("Interruption", "WorkerFailure", "Preemption", "Resize")
CARBON_MODES = ("Forecast", "Threshold")
CARBON_SOURCES = ("ElectricityMaps", "WattTime", "NationalGrid", "Prometheus", "File")
AUTOSCALER_DIRECTIONS = ("Up", "Down", "None")
AUTOSCALER_REASONS = tuple(reason.value for reason in ReasonCode)

# Seconds to days: jobs wait from moments (idle cluster) to a day (quota, deferral).
QUEUE_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
# Placement is in-memory search over the inventory: sub-millisecond to seconds on 1,000+ nodes.
PLACEMENT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
GC_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
GC_GENERATIONS = ("0", "1", "2")
DOMAIN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# Grid intensity is quoted in g/kWh everywhere; we export base units (g/J).
JOULES_PER_KWH = 3.6e6


def _values(allowed: Iterable[str]) -> str:
    return "|".join(allowed)


def _check(label: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"metric label {label}={value!r} is not one of {_values(allowed)}")
    return value


@dataclass(frozen=True)
class GpuPoolUsage:
    """GPUs of one (GPU type, capacity type) pool at one moment."""

    gpu_type: str
    capacity_type: str
    allocatable: int
    allocated: int
    free: int
    fragmented: int


class Metrics:
    """aisched's metrics, registered on `registry`, with the helpers call sites use."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        process_metrics: bool = True,
        topology_levels: Sequence[str] = TOPOLOGY_LEVELS,
    ) -> None:
        self.registry = registry
        self._levels = tuple(topology_levels)
        self._spread_levels = (*self._levels, "Cluster")
        if process_metrics:
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            GCCollector(registry=registry)
        self._pods: dict[tuple[str, str, str], set[str]] = {}
        self._define_workload_metrics()
        self._define_capacity_metrics()
        self._define_spot_metrics()
        self._define_carbon_metrics()
        self._define_autoscaler_metrics()
        self._define_operator_metrics()

    # -- definitions -------------------------------------------------------

    def _define_workload_metrics(self) -> None:
        r = self.registry
        self.jobs = Gauge(
            f"{PREFIX}_jobs",
            f"TrainingJobs by queue (a Queue name) and phase ({_values(PHASES)}).",
            ["queue", "phase"],
            registry=r,
        )
        self.jobs_completed = Counter(
            f"{PREFIX}_jobs_completed",
            f"TrainingJobs that finished, by queue and phase ({_values(FINISHED_PHASES)}).",
            ["queue", "phase"],
            registry=r,
        )
        self.queue_wait = Histogram(
            f"{PREFIX}_queue_wait_seconds",
            "Time a TrainingJob waited from submission to admission, by queue (a Queue name).",
            ["queue"],
            buckets=QUEUE_WAIT_BUCKETS,
            registry=r,
        )
        self.job_queued_timestamp = Gauge(
            f"{PREFIX}_job_queued_timestamp_seconds",
            "Unix time a pending TrainingJob was queued, by namespace, job_name and queue; "
            "one series per job while it is Queued.",
            ["namespace", "job_name", "queue"],
            registry=r,
        )
        self.preemptions = Counter(
            f"{PREFIX}_preemptions",
            "Gangs stopped to make room for higher-priority work, by queue (the victim's Queue).",
            ["queue"],
            registry=r,
        )
        self.queue_gpus_nominal = Gauge(
            f"{PREFIX}_queue_gpus_nominal",
            "GPUs a Queue is guaranteed (spec.nominalGPUs), by queue.",
            ["queue"],
            registry=r,
        )
        self.queue_gpus_used = Gauge(
            f"{PREFIX}_queue_gpus_used",
            "GPUs held by admitted jobs of a Queue, borrowed ones included, by queue.",
            ["queue"],
            registry=r,
        )
        self.queue_gpus_borrowed = Gauge(
            f"{PREFIX}_queue_gpus_borrowed",
            "GPUs a Queue uses beyond its nominal quota, lent by its cohort, by queue.",
            ["queue"],
            registry=r,
        )
        self.placement_duration = Histogram(
            f"{PREFIX}_placement_duration_seconds",
            f"Time to compute one gang placement decision, by result ({_values(PLACEMENT_RESULTS)}).",
            ["result"],
            buckets=PLACEMENT_BUCKETS,
            registry=r,
        )
        self.gang_domains = Histogram(
            f"{PREFIX}_gang_domains",
            "Distinct topology domains a gang spans when placed, by level "
            f"({_values(self._levels)}); 1 is a tight gang.",
            ["level"],
            buckets=DOMAIN_BUCKETS,
            registry=r,
        )
        self.running_gangs = Gauge(
            f"{PREFIX}_running_gangs",
            "Running TrainingJob gangs by the tightest topology level one of whose domains holds "
            f"the whole gang ({_values(self._spread_levels)}; Cluster spans the widest level).",
            ["level"],
            registry=r,
        )
        self.job_deadline_slack = Gauge(
            f"{PREFIX}_job_deadline_slack_seconds",
            "Deadline minus the expected finish time of a TrainingJob with a deadline, by namespace "
            "and job_name; negative means it will be late. One series per job with a deadline.",
            ["namespace", "job_name"],
            registry=r,
        )
        self.job_pod_info = Gauge(
            f"{PREFIX}_job_pod_info",
            "1 for each pod aisched runs, by namespace, pod, job_name (the owner's name) and kind "
            f"({_values(KINDS)}); joins per-pod metrics such as DCGM's to jobs.",
            ["namespace", "pod", "job_name", "kind"],
            registry=r,
        )

    def _define_capacity_metrics(self) -> None:
        r = self.registry
        pool = ["gpu_type", "capacity_type"]
        pool_help = f"by gpu_type (node label nvidia.com/gpu.product) and capacity_type ({_values(CAPACITY_TYPES)})"
        self.gpus_allocatable = Gauge(
            f"{PREFIX}_gpus_allocatable", f"GPUs nodes offer to pods, {pool_help}.", pool, registry=r
        )
        self.gpus_allocated = Gauge(
            f"{PREFIX}_gpus_allocated",
            f"GPUs requested by scheduled pods (any owner), {pool_help}.",
            pool,
            registry=r,
        )
        self.gpus_free = Gauge(
            f"{PREFIX}_gpus_free",
            f"GPUs on schedulable, untainted nodes that no pod holds, {pool_help}.",
            pool,
            registry=r,
        )
        self.gpus_fragmented = Gauge(
            f"{PREFIX}_gpus_fragmented",
            f"Free GPUs that no pending gang can use (too few together on a node or domain), {pool_help}.",
            pool,
            registry=r,
        )
        self.pending_gpus = Gauge(
            f"{PREFIX}_pending_gpus",
            "GPUs asked for by gangs the last scheduling cycle left waiting, by gpu_type (a product the "
            f"cluster has, or {ANY_GPU_TYPE} when the job names none or one no node has) and capacity_type "
            f"(the first the job would take: {_values(CAPACITY_TYPES)}): the queue depth a node autoscaler "
            "(cluster-autoscaler, KEDA) can scale on.",
            pool,
            registry=r,
        )

    def _define_spot_metrics(self) -> None:
        r = self.registry
        self.interruptions = Counter(
            f"{PREFIX}_interruptions",
            f"Gangs interrupted by capacity loss, by capacity_type ({_values(CAPACITY_TYPES)}) "
            f"and signal ({_values(INTERRUPTION_SIGNALS)}).",
            ["capacity_type", "signal"],
            registry=r,
        )
        self.lost_work = Counter(
            f"{PREFIX}_lost_work_seconds",
            "Training progress lost to interruptions (time since the last checkpoint), "
            f"by capacity_type ({_values(CAPACITY_TYPES)}).",
            ["capacity_type"],
            registry=r,
        )
        self.lost_gpu_time = Counter(
            f"{PREFIX}_lost_gpu_seconds",
            "Lost work weighted by the GPUs of the interrupted gang (GPU-seconds), "
            f"by capacity_type ({_values(CAPACITY_TYPES)}).",
            ["capacity_type"],
            registry=r,
        )
        self.checkpoints = Counter(
            f"{PREFIX}_checkpoints",
            f"Checkpoints workers reported, by reason ({_values(CHECKPOINT_REASONS)}).",
            ["reason"],
            registry=r,
        )
        self.gang_restarts = Counter(
            f"{PREFIX}_gang_restarts",
            f"Gang restarts, by reason ({_values(RESTART_REASONS)}).",
            ["reason"],
            registry=r,
        )
        self.on_demand_fallbacks = Counter(
            f"{PREFIX}_on_demand_fallbacks",
            "Spot-preferring jobs moved to on-demand capacity to meet their deadline.",
            registry=r,
        )

    def _define_carbon_metrics(self) -> None:
        r = self.registry
        self.deferrals = Counter(
            f"{PREFIX}_deferrals",
            f"TrainingJobs deferred to a cleaner time, by mode ({_values(CARBON_MODES)}).",
            ["mode"],
            registry=r,
        )
        self.carbon_emitted = Counter(
            f"{PREFIX}_carbon_emitted_grams",
            f"Estimated CO2-equivalent emitted by aisched's GPUs, by kind ({_values(KINDS)}).",
            ["kind"],
            registry=r,
        )
        self.carbon_avoided = Counter(
            f"{PREFIX}_carbon_avoided_grams",
            f"Estimated CO2-equivalent avoided by deferral against starting at once, by kind ({_values(KINDS)}).",
            ["kind"],
            registry=r,
        )
        self.grid_intensity = Gauge(
            f"{PREFIX}_grid_carbon_intensity_grams_per_joule",
            "Latest grid carbon intensity the source reported, by region (a configured grid region); "
            "multiply by 3.6e6 for g/kWh.",
            ["region"],
            registry=r,
        )
        self.carbon_source_errors = Counter(
            f"{PREFIX}_carbon_source_errors",
            f"Failed carbon-intensity lookups, by source ({_values(CARBON_SOURCES)}).",
            ["source"],
            registry=r,
        )

    def _define_autoscaler_metrics(self) -> None:
        r = self.registry
        self.autoscaler_decisions = Counter(
            f"{PREFIX}_autoscaler_decisions",
            f"InferenceService autoscaler decisions, by direction ({_values(AUTOSCALER_DIRECTIONS)}) "
            f"and reason ({_values(AUTOSCALER_REASONS)}).",
            ["direction", "reason"],
            registry=r,
        )
        service = ["namespace", "service"]
        self.inference_replicas = Gauge(
            f"{PREFIX}_inference_replicas",
            "Running InferenceService replicas, by namespace, service (its name) and capacity_type "
            f"({_values(CAPACITY_TYPES)}); one series per service and capacity type.",
            [*service, "capacity_type"],
            registry=r,
        )
        self.inference_desired_replicas = Gauge(
            f"{PREFIX}_inference_desired_replicas",
            "Replicas the autoscaler wants, by namespace and service (its name).",
            service,
            registry=r,
        )
        self.inference_metric_value = Gauge(
            f"{PREFIX}_inference_metric_per_replica",
            "Current value of the autoscaling metric per ready replica, by namespace and service.",
            service,
            registry=r,
        )
        self.inference_metric_target = Gauge(
            f"{PREFIX}_inference_metric_target_per_replica",
            "Autoscaling target per replica (spec.autoscaling.metric.targetPerReplica), by namespace and service.",
            service,
            registry=r,
        )

    def _define_operator_metrics(self) -> None:
        r = self.registry
        self.build_info = Info(f"{PREFIX}_build", "aisched version running (label version).", registry=r)
        self.build_info.info({"version": version("aisched")})
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 while this replica holds the leader Lease and acts; 0 on a standby.",
            registry=r,
        )
        self.reconcile_duration = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            f"Time one reconcile of an object took, by kind ({_values(RECONCILED_KINDS)}).",
            ["kind"],
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.reconcile_errors = Counter(
            f"{PREFIX}_reconcile_errors",
            f"Reconciles that raised, and objects a cluster-wide stage (the scheduling cycle, emissions, "
            f"chunk ends, reporting) failed on, by kind ({_values(RECONCILED_KINDS)}).",
            ["kind"],
            registry=r,
        )
        self.scheduling_cycle = Histogram(
            f"{PREFIX}_scheduling_cycle_seconds",
            "Time the TrainingJob scheduling cycle held the event loop reading the jobs and the cluster and "
            "deciding (the API writes that carry its decisions out are not counted).",
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.scheduling_cycle_cpu = Histogram(
            f"{PREFIX}_scheduling_cycle_cpu_seconds",
            "CPU time the event loop's thread spent in the TrainingJob scheduling cycle: the cycle's seconds "
            "less this are seconds it waited for a core (or for another thread of the operator).",
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.gc_pause = Histogram(
            f"{PREFIX}_gc_pause_seconds",
            f"Pauses of the Python garbage collector, which hold the event loop and every thread, by the "
            f"generation collected ({_values(GC_GENERATIONS)}; 2 is a full collection).",
            ["generation"],
            buckets=GC_BUCKETS,
            registry=r,
        )
        self.workqueue_depth = Gauge(
            f"{PREFIX}_workqueue_depth",
            f"Objects waiting to be reconciled, by kind ({_values(RECONCILED_KINDS)}).",
            ["kind"],
            registry=r,
        )
        self.workqueue_wakeups = Gauge(
            f"{PREFIX}_workqueue_pending_wakeups",
            f"Timers pending in a work queue (at most one per object), by kind ({_values(RECONCILED_KINDS)}).",
            ["kind"],
            registry=r,
        )
        self._initialise_bounded_series()

    def _initialise_bounded_series(self) -> None:
        """Export every counter whose label values are all known up front at zero, so rates and
        increases are 0 rather than absent before the first event (and alerts can tell the two apart)."""
        for capacity in CAPACITY_TYPES:
            self.lost_work.labels(capacity)
            self.lost_gpu_time.labels(capacity)
            for signal in INTERRUPTION_SIGNALS:
                self.interruptions.labels(capacity, signal)
        for kind in RECONCILED_KINDS:
            self.reconcile_errors.labels(kind)
        for result in PLACEMENT_RESULTS:
            self.placement_duration.labels(result)
        for reason in CHECKPOINT_REASONS:
            self.checkpoints.labels(reason)
        for reason in RESTART_REASONS:
            self.gang_restarts.labels(reason)
        for direction in AUTOSCALER_DIRECTIONS:
            for reason in AUTOSCALER_REASONS:
                self.autoscaler_decisions.labels(direction, reason)

    # -- workloads ---------------------------------------------------------

    def record_jobs(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the job census: `counts[(queue, phase)]`; every phase of a seen queue is set."""
        self.jobs.clear()
        for queue in {queue for queue, _ in counts}:
            for phase in PHASES:
                self.jobs.labels(queue, phase).set(0)
            for phase in FINISHED_PHASES:
                self.jobs_completed.labels(queue, phase)  # zero until the queue's first finish
        for (queue, phase), count in counts.items():
            self.jobs.labels(queue, _check("phase", phase, PHASES)).set(count)

    def record_job_pending(self, namespace: str, job_name: str, queue: str, since: datetime) -> None:
        self.job_queued_timestamp.labels(namespace, job_name, queue).set(since.timestamp())

    def record_job_admitted(self, namespace: str, job_name: str, queue: str, waited_seconds: float) -> None:
        """A job left the queue: observe how long it waited and stop reporting it as pending."""
        self.queue_wait.labels(queue).observe(waited_seconds)
        self.job_queued_timestamp.remove_by_labels({"namespace": namespace, "job_name": job_name})

    def record_job_finished(self, queue: str, phase: str) -> None:
        self.jobs_completed.labels(queue, _check("phase", phase, FINISHED_PHASES)).inc()

    def record_preemption(self, queue: str) -> None:
        self.preemptions.labels(queue).inc()

    def record_queue(self, queue: str, *, nominal_gpus: int, used_gpus: int, borrowed_gpus: int) -> None:
        self.queue_gpus_nominal.labels(queue).set(nominal_gpus)
        self.queue_gpus_used.labels(queue).set(used_gpus)
        self.queue_gpus_borrowed.labels(queue).set(borrowed_gpus)

    def forget_queue(self, queue: str) -> None:
        for gauge in (self.queue_gpus_nominal, self.queue_gpus_used, self.queue_gpus_borrowed):
            gauge.remove_by_labels({"queue": queue})

    def record_placement(self, seconds: float, *, placed: bool) -> None:
        self.placement_duration.labels("Placed" if placed else "NoFit").observe(seconds)

    @property
    def topology_levels(self) -> tuple[str, ...]:
        """The level names the topology metrics are labelled with, tightest first."""
        return self._levels

    def record_gang_domains(self, domains_per_level: Mapping[str, int]) -> None:
        """A gang was placed: how many domains of each topology level it spans."""
        for level, domains in domains_per_level.items():
            self.gang_domains.labels(_check("level", level, self._levels)).observe(domains)

    def record_running_gangs(self, gangs_by_level: Mapping[str, int]) -> None:
        """Replace the spread census of running gangs; levels not given are 0."""
        for level in self._spread_levels:
            self.running_gangs.labels(level).set(0)
        for level, count in gangs_by_level.items():
            self.running_gangs.labels(_check("level", level, self._spread_levels)).set(count)

    def record_deadline_slack(self, namespace: str, job_name: str, slack_seconds: float) -> None:
        self.job_deadline_slack.labels(namespace, job_name).set(slack_seconds)

    def record_job_pods(self, namespace: str, job_name: str, kind: str, pods: Iterable[str]) -> None:
        """Replace the set of pods that belong to one job or service."""
        key = (namespace, job_name, _check("kind", kind, KINDS))
        current = set(pods)
        for gone in self._pods.get(key, set()) - current:
            self.job_pod_info.remove(namespace, gone, job_name, kind)
        for pod in current:
            self.job_pod_info.labels(namespace, pod, job_name, kind).set(1)
        self._pods[key] = current

    def _forget_pods(self, namespace: str, name: str, kind: str) -> None:
        self._pods.pop((namespace, name, kind), None)
        self.job_pod_info.remove_by_labels({"namespace": namespace, "job_name": name, "kind": kind})

    def forget_job(self, namespace: str, job_name: str) -> None:
        """The TrainingJob is gone: drop every per-object series it had."""
        self._forget_pods(namespace, job_name, "TrainingJob")
        selector = {"namespace": namespace, "job_name": job_name}
        self.job_queued_timestamp.remove_by_labels(selector)
        self.job_deadline_slack.remove_by_labels(selector)

    # -- capacity ----------------------------------------------------------

    def record_gpu_pools(self, pools: Iterable[GpuPoolUsage]) -> None:
        """Replace the GPU inventory: pools that disappeared (last node gone) drop out."""
        gauges = (self.gpus_allocatable, self.gpus_allocated, self.gpus_free, self.gpus_fragmented)
        for gauge in gauges:
            gauge.clear()
        for pool in pools:
            labels = (pool.gpu_type, _check("capacity_type", pool.capacity_type, CAPACITY_TYPES))
            self.gpus_allocatable.labels(*labels).set(pool.allocatable)
            self.gpus_allocated.labels(*labels).set(pool.allocated)
            self.gpus_free.labels(*labels).set(pool.free)
            self.gpus_fragmented.labels(*labels).set(pool.fragmented)

    def record_pending_demand(self, demand: Mapping[tuple[str, str], int]) -> None:
        """Replace the waiting GPU demand: (gpu_type, capacity_type) -> GPUs."""
        self.pending_gpus.clear()
        for (gpu_type, capacity_type), gpus in demand.items():
            self.pending_gpus.labels(gpu_type, _check("capacity_type", capacity_type, CAPACITY_TYPES)).set(gpus)

    # -- spot --------------------------------------------------------------

    def record_interruption(self, capacity_type: str, signal: str, *, lost_seconds: float, gpus: int) -> None:
        """A running gang lost capacity; `lost_seconds` is the progress since its last checkpoint."""
        capacity = _check("capacity_type", capacity_type, CAPACITY_TYPES)
        self.interruptions.labels(capacity, _check("signal", signal, INTERRUPTION_SIGNALS)).inc()
        self.lost_work.labels(capacity).inc(lost_seconds)
        self.lost_gpu_time.labels(capacity).inc(lost_seconds * gpus)

    def record_checkpoint(self, reason: str) -> None:
        self.checkpoints.labels(_check("reason", reason, CHECKPOINT_REASONS)).inc()

    def record_gang_restart(self, reason: str) -> None:
        self.gang_restarts.labels(_check("reason", reason, RESTART_REASONS)).inc()

    def record_on_demand_fallback(self) -> None:
        self.on_demand_fallbacks.inc()

    # -- carbon ------------------------------------------------------------

    def record_deferral(self, mode: str) -> None:
        self.deferrals.labels(_check("mode", mode, CARBON_MODES)).inc()

    def record_carbon(self, kind: str, *, emitted_grams: float, avoided_grams: float = 0.0) -> None:
        """Add estimated emissions (and savings from deferral) since the last call for this work."""
        self.carbon_emitted.labels(_check("kind", kind, KINDS)).inc(emitted_grams)
        if avoided_grams:
            self.carbon_avoided.labels(kind).inc(avoided_grams)

    def record_grid_intensity(self, region: str, grams_per_kwh: float) -> None:
        self.grid_intensity.labels(region).set(grams_per_kwh / JOULES_PER_KWH)

    def record_carbon_source_error(self, source: str) -> None:
        self.carbon_source_errors.labels(_check("source", source, CARBON_SOURCES)).inc()

    # -- autoscaler --------------------------------------------------------

    def record_autoscaler_decision(self, from_replicas: int, to_replicas: int, reason: str) -> None:
        direction = "Up" if to_replicas > from_replicas else "Down" if to_replicas < from_replicas else "None"
        self.autoscaler_decisions.labels(direction, _check("reason", reason, AUTOSCALER_REASONS)).inc()

    def record_inference_service(
        self,
        namespace: str,
        service: str,
        *,
        desired: int,
        on_demand: int,
        spot: int,
        metric_per_replica: float | None,
        target_per_replica: float | None,
    ) -> None:
        """The state of one InferenceService; an unknown metric value drops its series."""
        self.inference_desired_replicas.labels(namespace, service).set(desired)
        self.inference_replicas.labels(namespace, service, CapacityType.ON_DEMAND.value).set(on_demand)
        self.inference_replicas.labels(namespace, service, CapacityType.SPOT.value).set(spot)
        for gauge, value in (
            (self.inference_metric_value, metric_per_replica),
            (self.inference_metric_target, target_per_replica),
        ):
            if value is None:
                gauge.remove_by_labels({"namespace": namespace, "service": service})
            else:
                gauge.labels(namespace, service).set(value)

    def forget_inference_service(self, namespace: str, service: str) -> None:
        self._forget_pods(namespace, service, "InferenceService")
        selector = {"namespace": namespace, "service": service}
        for gauge in (
            self.inference_desired_replicas,
            self.inference_replicas,
            self.inference_metric_value,
            self.inference_metric_target,
        ):
            gauge.remove_by_labels(selector)

    # -- operator ----------------------------------------------------------

    def record_reconcile(self, kind: str, seconds: float, *, failed: bool = False) -> None:
        self.reconcile_duration.labels(_check("kind", kind, RECONCILED_KINDS)).observe(seconds)
        if failed:
            self.reconcile_errors.labels(kind).inc()

    def record_scheduling_cycle(self, seconds: float, cpu_seconds: float) -> None:
        self.scheduling_cycle.observe(seconds)
        self.scheduling_cycle_cpu.observe(cpu_seconds)

    def record_gc_pause(self, generation: int, seconds: float) -> None:
        self.gc_pause.labels(_check("generation", str(generation), GC_GENERATIONS)).observe(seconds)

    def record_workqueue(self, kind: str, *, depth: int, pending_wakeups: int) -> None:
        self.workqueue_depth.labels(_check("kind", kind, RECONCILED_KINDS)).set(depth)
        self.workqueue_wakeups.labels(kind).set(pending_wakeups)

    def record_reconcile_error(self, kind: str) -> None:
        """One object's share of a cluster-wide stage failed (the scheduling cycle's, the emissions')."""
        self.reconcile_errors.labels(_check("kind", kind, RECONCILED_KINDS)).inc()

    def record_leadership(self, leader: bool) -> None:
        """Set on every Lease change; a standby drops cluster state so only the leader reports it."""
        value = 1.0 if leader else 0.0
        self.leader.set_function(lambda: value)  # replaces what follow_leadership set
        if not leader:
            self.clear_cluster_state()

    def follow_leadership(self, leading: Callable[[], bool]) -> None:
        """Report the leader gauge from `leading` at each scrape, so it reads 0 the moment the
        lease's renew deadline passes, even while the event loop that would say so is blocked."""
        self.leader.set_function(lambda: 1.0 if leading() else 0.0)

    def clear_cluster_state(self) -> None:
        """Drop every gauge that describes the cluster rather than this process."""
        for gauge in (
            self.jobs,
            self.job_queued_timestamp,
            self.queue_gpus_nominal,
            self.queue_gpus_used,
            self.queue_gpus_borrowed,
            self.running_gangs,
            self.job_deadline_slack,
            self.job_pod_info,
            self.gpus_allocatable,
            self.gpus_allocated,
            self.gpus_free,
            self.gpus_fragmented,
            self.grid_intensity,
            self.inference_replicas,
            self.inference_desired_replicas,
            self.inference_metric_value,
            self.inference_metric_target,
        ):
            gauge.clear()
        self._pods.clear()


def serve(metrics: Metrics, port: int, address: str = "0.0.0.0") -> tuple[WSGIServer, threading.Thread]:
    """Serve `metrics` on http://address:port/metrics in a daemon thread (port 0 picks a free one)."""
    return start_http_server(port, addr=address, registry=metrics.registry)
