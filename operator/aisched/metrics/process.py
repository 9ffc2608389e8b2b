"""The operator process itself: version, leadership, reconciles, cycles, GC pauses, work queues."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import version

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from aisched.metrics.labels import (
    GC_BUCKETS,
    GC_GENERATIONS,
    PREFIX,
    RECONCILE_BUCKETS,
    RECONCILED_KINDS,
    check,
    one_of,
)


class ProcessMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.build_info = Info(f"{PREFIX}_build", "aisched version running (label version).", registry=r)
        self.build_info.info({"version": version("aisched")})
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 while this replica holds the leader Lease and acts; 0 on a standby.",
            registry=r,
        )
        self.reconcile_duration = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            f"Time one reconcile of an object took, by kind ({one_of(RECONCILED_KINDS)}).",
            ["kind"],
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.reconcile_errors = Counter(
            f"{PREFIX}_reconcile_errors",
            f"Reconciles that raised, and objects a cluster-wide stage (the scheduling cycle, emissions, "
            f"chunk ends, reporting) failed on, by kind ({one_of(RECONCILED_KINDS)}).",
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
            f"generation collected ({one_of(GC_GENERATIONS)}; 2 is a full collection).",
            ["generation"],
            buckets=GC_BUCKETS,
            registry=r,
        )
        self.workqueue_depth = Gauge(
            f"{PREFIX}_workqueue_depth",
            f"Objects waiting to be reconciled, by kind ({one_of(RECONCILED_KINDS)}).",
            ["kind"],
            registry=r,
        )
        self.workqueue_wakeups = Gauge(
            f"{PREFIX}_workqueue_pending_wakeups",
            f"Timers pending in a work queue (at most one per object), by kind ({one_of(RECONCILED_KINDS)}).",
            ["kind"],
            registry=r,
        )
        for kind in RECONCILED_KINDS:
            self.reconcile_errors.labels(kind)

    def record_reconcile(self, kind: str, seconds: float, *, failed: bool = False) -> None:
        self.reconcile_duration.labels(check("kind", kind, RECONCILED_KINDS)).observe(seconds)
        if failed:
            self.reconcile_errors.labels(kind).inc()

    def record_scheduling_cycle(self, seconds: float, cpu_seconds: float) -> None:
        self.scheduling_cycle.observe(seconds)
        self.scheduling_cycle_cpu.observe(cpu_seconds)

    def record_gc_pause(self, generation: int, seconds: float) -> None:
        self.gc_pause.labels(check("generation", str(generation), GC_GENERATIONS)).observe(seconds)

    def record_workqueue(self, kind: str, *, depth: int, pending_wakeups: int) -> None:
        self.workqueue_depth.labels(check("kind", kind, RECONCILED_KINDS)).set(depth)
        self.workqueue_wakeups.labels(kind).set(pending_wakeups)

    def record_reconcile_error(self, kind: str) -> None:
        """One object's share of a cluster-wide stage failed (the scheduling cycle's, the emissions')."""
        self.reconcile_errors.labels(check("kind", kind, RECONCILED_KINDS)).inc()

    def set_leader(self, leading: Callable[[], bool]) -> None:
        self.leader.set_function(lambda: 1.0 if leading() else 0.0)
