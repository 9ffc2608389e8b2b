"""Every Prometheus metric aisched exports, on one registry, in one part per concern.

Conventions (https://prometheus.io/docs/practices/naming/): one `aisched_` prefix,
base units (seconds, grams, joules), `_total` on counters, and label values from
short, fixed sets that each help text names (`labels`). Per-object series (one per
live job, pod or service) are the exception, kept only while the object exists and
removed by the `forget_*` helpers. Call sites use each part's `record_*` helpers,
which refuse label values outside the documented sets so that a typo cannot create
new series: `metrics.workload.record_jobs(...)`, `metrics.interruptions.record_checkpoint(...)`.

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
from collections.abc import Callable, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, start_http_server

from aisched.metrics.capacity import CapacityMetrics, GpuPoolUsage
from aisched.metrics.carbon import CarbonMetrics
from aisched.metrics.interruptions import InterruptionMetrics
from aisched.metrics.labels import TOPOLOGY_LEVELS
from aisched.metrics.pods import PodInfo
from aisched.metrics.process import ProcessMetrics
from aisched.metrics.serving import ServingMetrics
from aisched.metrics.sharing import MigSlices, SharedGpuUsage, SharingMetrics
from aisched.metrics.workload import WorkloadMetrics

__all__ = ["GpuPoolUsage", "Metrics", "MigSlices", "SharedGpuUsage", "serve"]


class Metrics:
    """aisched's metrics, registered on `registry`: one part per concern, each with its helpers."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        process_metrics: bool = True,
        topology_levels: Sequence[str] = TOPOLOGY_LEVELS,
    ) -> None:
        self.registry = registry
        if process_metrics:
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            GCCollector(registry=registry)
        self.pods = PodInfo(registry)
        self.workload = WorkloadMetrics(registry, self.pods, topology_levels)
        self.capacity = CapacityMetrics(registry)
        self.sharing = SharingMetrics(registry)
        self.interruptions = InterruptionMetrics(registry)
        self.carbon = CarbonMetrics(registry)
        self.serving = ServingMetrics(registry, self.pods)
        self.process = ProcessMetrics(registry)

    def record_leadership(self, leader: bool) -> None:
        """Set on every Lease change; a standby drops cluster state so only the leader reports it."""
        self.process.set_leader(lambda: leader)  # replaces what follow_leadership set
        if not leader:
            self.clear_cluster_state()

    def follow_leadership(self, leading: Callable[[], bool]) -> None:
        """Report the leader gauge from `leading` at each scrape, so it reads 0 the moment the
        lease's renew deadline passes, even while the event loop that would say so is blocked."""
        self.process.set_leader(leading)

    def clear_cluster_state(self) -> None:
        """Drop every gauge that describes the cluster rather than this process."""
        for part in (self.workload, self.capacity, self.sharing, self.carbon, self.serving):
            for gauge in part.cluster_gauges():
                gauge.clear()
        self.pods.clear()


def serve(metrics: Metrics, port: int, address: str = "0.0.0.0") -> tuple[WSGIServer, threading.Thread]:
    """Serve `metrics` on http://address:port/metrics in a daemon thread (port 0 picks a free one)."""
    return start_http_server(port, addr=address, registry=metrics.registry)
