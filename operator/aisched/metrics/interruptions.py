"""Spot and other capacity losses: what they cost, and the checkpoints and restarts they caused."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from aisched.metrics.labels import (
    CAPACITY_TYPES,
    CHECKPOINT_REASONS,
    INTERRUPTION_SIGNALS,
    PREFIX,
    RESTART_REASONS,
    check,
    one_of,
)


class InterruptionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.interruptions = Counter(
            f"{PREFIX}_interruptions",
            f"Gangs interrupted by capacity loss, by capacity_type ({one_of(CAPACITY_TYPES)}) "
            f"and signal ({one_of(INTERRUPTION_SIGNALS)}).",
            ["capacity_type", "signal"],
            registry=r,
        )
        self.lost_work = Counter(
            f"{PREFIX}_lost_work_seconds",
            "Training progress lost to interruptions (time since the last checkpoint), "
            f"by capacity_type ({one_of(CAPACITY_TYPES)}).",
            ["capacity_type"],
            registry=r,
        )
        self.lost_gpu_time = Counter(
            f"{PREFIX}_lost_gpu_seconds",
            "Lost work weighted by the GPUs of the interrupted gang (GPU-seconds), "
            f"by capacity_type ({one_of(CAPACITY_TYPES)}).",
            ["capacity_type"],
            registry=r,
        )
        self.checkpoints = Counter(
            f"{PREFIX}_checkpoints",
            f"Checkpoints workers reported, by reason ({one_of(CHECKPOINT_REASONS)}).",
            ["reason"],
            registry=r,
        )
        self.gang_restarts = Counter(
            f"{PREFIX}_gang_restarts",
            f"Gang restarts, by reason ({one_of(RESTART_REASONS)}).",
            ["reason"],
            registry=r,
        )
        self.on_demand_fallbacks = Counter(
            f"{PREFIX}_on_demand_fallbacks",
            "Spot-preferring jobs moved to on-demand capacity to meet their deadline.",
            registry=r,
        )
        # Every series at zero up front, so rates are 0 rather than absent before the first event.
        for capacity in CAPACITY_TYPES:
            self.lost_work.labels(capacity)
            self.lost_gpu_time.labels(capacity)
            for signal in INTERRUPTION_SIGNALS:
                self.interruptions.labels(capacity, signal)
        for reason in CHECKPOINT_REASONS:
            self.checkpoints.labels(reason)
        for reason in RESTART_REASONS:
            self.gang_restarts.labels(reason)

    def record_interruption(self, capacity_type: str, signal: str, *, lost_seconds: float, gpus: int) -> None:
        """A running gang lost capacity; `lost_seconds` is the progress since its last checkpoint."""
        capacity = check("capacity_type", capacity_type, CAPACITY_TYPES)
        self.interruptions.labels(capacity, check("signal", signal, INTERRUPTION_SIGNALS)).inc()
        self.lost_work.labels(capacity).inc(lost_seconds)
        self.lost_gpu_time.labels(capacity).inc(lost_seconds * gpus)

    def record_checkpoint(self, reason: str) -> None:
        self.checkpoints.labels(check("reason", reason, CHECKPOINT_REASONS)).inc()

    def record_gang_restart(self, reason: str) -> None:
        self.gang_restarts.labels(check("reason", reason, RESTART_REASONS)).inc()

    def record_on_demand_fallback(self) -> None:
        self.on_demand_fallbacks.inc()
