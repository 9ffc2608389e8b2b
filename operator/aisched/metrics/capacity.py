"""The GPU inventory by pool, and the demand waiting for it (what a node autoscaler scales on)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge

from aisched.metrics.labels import CAPACITY_TYPES, PREFIX, check, one_of
from aisched.policy.scheduler.demand import ANY_GPU_TYPE, ANY_ZONE


@dataclass(frozen=True)
class GpuPoolUsage:
    """GPUs of one (GPU type, capacity type) pool at one moment."""

    gpu_type: str
    capacity_type: str
    allocatable: int
    allocated: int
    free: int
    fragmented: int


class CapacityMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        pool = ["gpu_type", "capacity_type"]
        pool_help = f"by gpu_type (node label nvidia.com/gpu.product) and capacity_type ({one_of(CAPACITY_TYPES)})"
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
            f"cluster has, or {ANY_GPU_TYPE} when the job names none or one no node has), zone (the zone "
            f"of the nodes planned for the gang, a node's or an offering's, or {ANY_ZONE} when none are "
            "planned) and capacity_type "
            f"(the first the job would take: {one_of(CAPACITY_TYPES)}): the queue depth a node autoscaler "
            "(cluster-autoscaler, KEDA) can scale on.",
            ["gpu_type", "zone", "capacity_type"],
            registry=r,
        )

    def _pool_gauges(self) -> tuple[Gauge, ...]:
        return (self.gpus_allocatable, self.gpus_allocated, self.gpus_free, self.gpus_fragmented)

    def cluster_gauges(self) -> tuple[Gauge, ...]:
        """All of them describe the cluster: a standby reporting demand too would double a scaler's input."""
        return (*self._pool_gauges(), self.pending_gpus)

    def record_gpu_pools(self, pools: Iterable[GpuPoolUsage]) -> None:
        """Replace the GPU inventory: pools that disappeared (last node gone) drop out."""
        for gauge in self._pool_gauges():
            gauge.clear()
        for pool in pools:
            labels = (pool.gpu_type, check("capacity_type", pool.capacity_type, CAPACITY_TYPES))
            self.gpus_allocatable.labels(*labels).set(pool.allocatable)
            self.gpus_allocated.labels(*labels).set(pool.allocated)
            self.gpus_free.labels(*labels).set(pool.free)
            self.gpus_fragmented.labels(*labels).set(pool.fragmented)

    def record_pending_demand(self, demand: Mapping[tuple[str, str, str], int]) -> None:
        """Replace the waiting GPU demand: (gpu_type, zone, capacity_type) -> GPUs."""
        self.pending_gpus.clear()
        for (gpu_type, zone, capacity_type), gpus in demand.items():
            capacity = check("capacity_type", capacity_type, CAPACITY_TYPES)
            self.pending_gpus.labels(gpu_type, zone, capacity).set(gpus)
