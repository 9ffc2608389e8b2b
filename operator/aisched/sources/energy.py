"""The energy a job's GPUs used, as NVIDIA's DCGM exporter measures it, read from Prometheus.

The exporter publishes ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, a counter per GPU of the
millijoules it has used since the driver loaded, and with its Kubernetes mapping on it
labels each GPU's series with the namespace and name of the pod that holds the GPU. The
increase of that counter over the job's pods is what the job drew, idle and busy GPUs
alike, which a power figure per GPU type can only guess at.

``None`` means there is nothing to measure with (no series for these pods: no exporter,
no pod mapping, nothing scraped yet); :class:`PrometheusError` that Prometheus gave no
usable answer. Either way the caller falls back to its configured power per GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from aisched.sources.prometheus import PrometheusSource, pods_selector

DCGM_ENERGY_COUNTER = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
_JOULES_PER_MILLIJOULE = 1e-3


@dataclass(frozen=True)
class GpuEnergySource:
    """Energy used by the GPUs of named pods, from the DCGM exporter's counter."""

    prometheus: PrometheusSource
    counter: str = DCGM_ENERGY_COUNTER
    namespace_label: str = "namespace"
    """``exported_namespace`` where the exporter is scraped without ``honorLabels``."""
    pod_label: str = "pod"
    """Likewise ``exported_pod``."""

    def query(self, namespace: str, pods: Sequence[str], seconds: int) -> str:
        """The PromQL: the counter's increase over the last `seconds`, summed over the pods' GPUs.

        increase() copes with a counter reset (a driver reload) and extrapolates to the
        window's edges, as a job's accounting period needs.
        """
        selector = pods_selector(self.counter, self.namespace_label, self.pod_label, namespace, pods)
        return f"sum(increase({selector}[{seconds}s]))"

    async def joules(self, namespace: str, pods: Sequence[str], start: datetime, end: datetime) -> float | None:
        """Joules the pods' GPUs used over [start, end); None when DCGM has no series for them."""
        seconds = round((end - start).total_seconds())
        if not pods or seconds < 1:
            return None
        sample = await self.prometheus.query(self.query(namespace, pods, seconds), at=end)
        if sample is None:
            return None
        return max(0.0, sample.value) * _JOULES_PER_MILLIJOULE
