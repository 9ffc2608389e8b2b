"""A process that serves aisched's Metrics with activity recorded twice a second, and a
stand-in for NVIDIA's DCGM exporter (which needs GPUs) reporting on the same pods.

    python -m tests.integration.sample_metrics --port 9400 --dcgm-port 9401

tests/integration/test_prometheus.py scrapes it with a real Prometheus when no operator
with metrics runs; every series the dashboards and rules use gets samples and rates.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from aisched.metrics import Metrics, serve
from tests.metrics_catalog import exercise

# Pods exercise() and activity() report in aisched_job_pod_info, and the GPUs they use.
GPU_PODS = {
    ("ml", "llama-g1-worker-0"): ("0", "h100-1", 85.0),
    ("ml", "llama-g1-worker-1"): ("0", "h100-2", 75.0),
    ("ml", "chat-0"): ("1", "l4-1", 40.0),
}
WATTS = 700.0


def activity(metrics: Metrics) -> None:
    """One round of what a busy operator reports."""
    exercise(metrics)
    metrics.workload.record_job_finished("default", "Failed")
    metrics.pods.record("ml", "chat", "InferenceService", ["chat-0"])
    metrics.serving.record_autoscaler_decision(4, 4, "WithinTolerance")


class DcgmStandIn(Collector):
    """DCGM exporter's names, types, units and pod labels; energy grows at WATTS per GPU."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def collect(self) -> Iterator[Metric]:
        utilization = Metric("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge")
        energy = Metric(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", "counter"
        )
        millijoules = (time.monotonic() - self.started) * WATTS * 1000
        for (namespace, pod), (gpu, host, percent) in GPU_PODS.items():
            labels = {"gpu": gpu, "Hostname": host, "namespace": namespace, "pod": pod, "container": "main"}
            utilization.add_sample("DCGM_FI_DEV_GPU_UTIL", labels, percent)
            energy.add_sample("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels, millijoules)
        yield utilization
        yield energy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dcgm-port", type=int, required=True)
    args = parser.parse_args()
    metrics = Metrics(CollectorRegistry())
    serve(metrics, args.port, address="127.0.0.1")
    dcgm = CollectorRegistry()
    dcgm.register(DcgmStandIn())
    start_http_server(args.dcgm_port, addr="127.0.0.1", registry=dcgm)
    while True:
        activity(metrics)
        time.sleep(0.5)


if __name__ == "__main__":
    raise SystemExit(main())
