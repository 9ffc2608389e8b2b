"""TrainingJobs, queues and gang placements: what waits, what runs, how tightly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from aisched.metrics.labels import (
    DOMAIN_BUCKETS,
    FINISHED_PHASES,
    PHASES,
    PLACEMENT_BUCKETS,
    PLACEMENT_RESULTS,
    PREFIX,
    QUEUE_WAIT_BUCKETS,
    WORKLOAD_KINDS,
    WORKLOAD_STATES,
    check,
    one_of,
)
from aisched.metrics.pods import PodInfo


class WorkloadMetrics:
    def __init__(self, registry: CollectorRegistry, pods: PodInfo, topology_levels: Sequence[str]) -> None:
        r = registry
        self.pods = pods
        self.topology_levels = tuple(topology_levels)
        """The level names the topology metrics are labelled with, tightest first."""
        self._spread_levels = (*self.topology_levels, "Cluster")
        self.jobs = Gauge(
            f"{PREFIX}_jobs",
            f"TrainingJobs by queue (a Queue name) and phase ({one_of(PHASES)}).",
            ["queue", "phase"],
            registry=r,
        )
        self.jobs_completed = Counter(
            f"{PREFIX}_jobs_completed",
            f"TrainingJobs that finished, by queue and phase ({one_of(FINISHED_PHASES)}).",
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
        self.kind_workloads = Gauge(
            f"{PREFIX}_workloads",
            f"Workloads of the other kinds (Jobs, PyTorchJobs, RayClusters...) in the cycle, by kind "
            f"({one_of(WORKLOAD_KINDS)}) and state ({one_of(WORKLOAD_STATES)}).",
            ["kind", "state"],
            registry=r,
        )
        self.kind_admissions = Counter(
            f"{PREFIX}_workload_admissions",
            f"Workloads of the other kinds admitted, by kind ({one_of(WORKLOAD_KINDS)}) and queue.",
            ["kind", "queue"],
            registry=r,
        )
        self.kind_preemptions = Counter(
            f"{PREFIX}_workload_preemptions",
            f"Workloads of the other kinds stopped as a whole (preempted, or stopped as their queue no "
            f"longer takes them), by kind ({one_of(WORKLOAD_KINDS)}) and queue.",
            ["kind", "queue"],
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
            "GPUs held by admitted jobs and replicas of a Queue, borrowed ones included, in GPU-equivalents "
            "(a 30% share is 0.3), by queue.",
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
            f"Time to compute one gang placement decision, by result ({one_of(PLACEMENT_RESULTS)}).",
            ["result"],
            buckets=PLACEMENT_BUCKETS,
            registry=r,
        )
        self.gang_domains = Histogram(
            f"{PREFIX}_gang_domains",
            f"Distinct topology domains a gang spans when placed, by level ({one_of(self.topology_levels)}); "
            "1 is a tight gang.",
            ["level"],
            buckets=DOMAIN_BUCKETS,
            registry=r,
        )
        self.running_gangs = Gauge(
            f"{PREFIX}_running_gangs",
            "Running TrainingJob gangs by the tightest topology level one of whose domains holds "
            f"the whole gang ({one_of(self._spread_levels)}; Cluster spans the widest level).",
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
        for result in PLACEMENT_RESULTS:
            self.placement_duration.labels(result)
        self._queue_objects: set[str] = set()
        """Queues reported from their Queue object (`record_queue`) and not forgotten."""
        self._named_queues: set[str] = set()
        """Queue names jobs of the latest census name, Queue or not (a tenant may write any)."""
        self._labelled_queues: set[str] = set()
        """Every queue label some series has now."""

    def cluster_gauges(self) -> tuple[Gauge, ...]:
        """The gauges that describe the cluster, which only the leader reports."""
        return (
            self.jobs,
            self.job_queued_timestamp,
            self.queue_gpus_nominal,
            self.queue_gpus_used,
            self.queue_gpus_borrowed,
            self.running_gangs,
            self.job_deadline_slack,
        )

    def record_jobs(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the job census: `counts[(queue, phase)]`; every phase of a seen queue is set."""
        self.jobs.clear()
        named = {queue for queue, _ in counts}
        for gone in self._labelled_queues - named - self._queue_objects:
            self._drop_queue(gone)
        self._named_queues = named
        self._labelled_queues |= named
        for queue in named:
            for phase in PHASES:
                self.jobs.labels(queue, phase).set(0)
            for phase in FINISHED_PHASES:
                self.jobs_completed.labels(queue, phase)  # zero until the queue's first finish
        for (queue, phase), count in counts.items():
            self.jobs.labels(queue, check("phase", phase, PHASES)).set(count)

    def record_job_pending(self, namespace: str, job_name: str, queue: str, since: datetime) -> None:
        self._labelled_queues.add(queue)
        self.job_queued_timestamp.labels(namespace, job_name, queue).set(since.timestamp())

    def record_job_admitted(self, namespace: str, job_name: str, queue: str, waited_seconds: float) -> None:
        """A job left the queue: observe how long it waited and stop reporting it as pending."""
        self._labelled_queues.add(queue)
        self.queue_wait.labels(queue).observe(waited_seconds)
        self.job_queued_timestamp.remove_by_labels({"namespace": namespace, "job_name": job_name})

    def record_job_finished(self, queue: str, phase: str) -> None:
        self._labelled_queues.add(queue)
        self.jobs_completed.labels(queue, check("phase", phase, FINISHED_PHASES)).inc()

    def record_kind_workloads(self, counts: Mapping[tuple[str, str], int]) -> None:
        """COUNTS by (kind, state): every pair is set, so a kind with none reads 0, not a stale count."""
        for kind in WORKLOAD_KINDS:
            for state in WORKLOAD_STATES:
                self.kind_workloads.labels(kind, state).set(counts.get((kind, state), 0))

    def record_kind_admission(self, kind: str, queue: str) -> None:
        self.kind_admissions.labels(check("kind", kind, WORKLOAD_KINDS), queue).inc()

    def record_kind_preemption(self, kind: str, queue: str) -> None:
        self.kind_preemptions.labels(check("kind", kind, WORKLOAD_KINDS), queue).inc()

    def record_preemption(self, queue: str) -> None:
        self._labelled_queues.add(queue)
        self.preemptions.labels(queue).inc()

    def record_queue(self, queue: str, *, nominal_gpus: int, used_gpus: float, borrowed_gpus: int) -> None:
        self._queue_objects.add(queue)
        self._labelled_queues.add(queue)
        self.queue_gpus_nominal.labels(queue).set(nominal_gpus)
        self.queue_gpus_used.labels(queue).set(used_gpus)
        self.queue_gpus_borrowed.labels(queue).set(borrowed_gpus)

    def forget_queue(self, queue: str) -> None:
        """The Queue object is gone: its gauges go; its counters too, unless a live job still names it."""
        self._queue_objects.discard(queue)
        for gauge in (self.queue_gpus_nominal, self.queue_gpus_used, self.queue_gpus_borrowed):
            gauge.remove_by_labels({"queue": queue})
        if queue not in self._named_queues:
            self._drop_queue(queue)

    def _drop_queue(self, queue: str) -> None:
        """Every series of a queue label that neither a Queue object nor any job has any more: the one
        place they are dropped, so names made up by tenants leave nothing behind."""
        self._labelled_queues.discard(queue)
        selector = {"queue": queue}
        for metric in (
            self.jobs,
            self.jobs_completed,
            self.queue_wait,
            self.preemptions,
            self.queue_gpus_nominal,
            self.queue_gpus_used,
            self.queue_gpus_borrowed,
            self.job_queued_timestamp,
        ):
            metric.remove_by_labels(selector)

    def record_placement(self, seconds: float, *, placed: bool) -> None:
        self.placement_duration.labels("Placed" if placed else "NoFit").observe(seconds)

    def record_gang_domains(self, domains_per_level: Mapping[str, int]) -> None:
        """A gang was placed: how many domains of each topology level it spans."""
        for level, domains in domains_per_level.items():
            self.gang_domains.labels(check("level", level, self.topology_levels)).observe(domains)

    def record_running_gangs(self, gangs_by_level: Mapping[str, int]) -> None:
        """Replace the spread census of running gangs; levels not given are 0."""
        for level in self._spread_levels:
            self.running_gangs.labels(level).set(0)
        for level, count in gangs_by_level.items():
            self.running_gangs.labels(check("level", level, self._spread_levels)).set(count)

    def record_deadline_slack(self, namespace: str, job_name: str, slack_seconds: float) -> None:
        self.job_deadline_slack.labels(namespace, job_name).set(slack_seconds)

    def forget_job(self, namespace: str, job_name: str) -> None:
        """The TrainingJob is gone: drop every per-object series it had."""
        self.pods.forget(namespace, job_name, "TrainingJob")
        selector = {"namespace": namespace, "job_name": job_name}
        self.job_queued_timestamp.remove_by_labels(selector)
        self.job_deadline_slack.remove_by_labels(selector)
