"""Shared GPUs: parts of GPUs allocated, GPUs stranded by them, and MIG instances by profile."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge

from aisched.api.sharing import ALL_MIG_PROFILES
from aisched.metrics.labels import CAPACITY_TYPES, PREFIX, check, one_of

OTHER_PROFILE = "other"
MIG_PROFILE_LABELS = (*ALL_MIG_PROFILES, OTHER_PROFILE)
MIG_STATES = ("allocated", "free")
MILLI = 1000


@dataclass(frozen=True)
class SharedGpuUsage:
    """The shared GPUs of one (GPU type, capacity type) pool at one moment."""

    gpu_type: str
    capacity_type: str
    shared_gpus: int
    """GPUs that one or more shares hold a part of."""
    share_milli: int
    """GPU-equivalents (thousandths) the shares on them hold."""
    stranded_gpus: int
    """Partly used GPUs whose free part fits no waiting request (`policy.sharing.assign.stranded_gpus`)."""
    stranded_milli: int
    """The free thousandths on those GPUs."""


@dataclass(frozen=True)
class MigSlices:
    """MIG instances of one profile on the nodes of one GPU type."""

    gpu_type: str
    profile: str
    allocated: int
    free: int | None
    """None where the nodes do not say what they offer (no `nvidia.com/mig-<profile>` allocatable)."""


class SharingMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        pool = ["gpu_type", "capacity_type"]
        pool_help = f"by gpu_type (node label nvidia.com/gpu.product) and capacity_type ({one_of(CAPACITY_TYPES)})"
        self.share_allocated = Gauge(
            f"{PREFIX}_gpu_share_allocated_gpus",
            f"GPU-equivalents held as parts of GPUs (fractions by DRA; a 30% share is 0.3), {pool_help}.",
            pool,
            registry=r,
        )
        self.shared_gpus = Gauge(
            f"{PREFIX}_gpus_shared",
            f"GPUs that one or more fractions hold a part of, {pool_help}.",
            pool,
            registry=r,
        )
        self.stranded_gpus = Gauge(
            f"{PREFIX}_gpus_stranded",
            "Partly used GPUs whose free part fits no waiting request (the packer's fragmentation test, for "
            f"the shares and whole GPUs waiting now), {pool_help}.",
            pool,
            registry=r,
        )
        self.stranded_share = Gauge(
            f"{PREFIX}_gpu_share_stranded_gpus",
            f"GPU-equivalents free on stranded GPUs, {pool_help}.",
            pool,
            registry=r,
        )
        self.mig_instances = Gauge(
            f"{PREFIX}_mig_instances",
            "MIG instances by gpu_type, profile (" + one_of(MIG_PROFILE_LABELS) + ") and state ("
            f"{one_of(MIG_STATES)}; free only where nodes advertise nvidia.com/mig-<profile>).",
            ["gpu_type", "profile", "state"],
            registry=r,
        )

    def cluster_gauges(self) -> tuple[Gauge, ...]:
        return (self.share_allocated, self.shared_gpus, self.stranded_gpus, self.stranded_share, self.mig_instances)

    def record_shared_gpus(self, pools: Iterable[SharedGpuUsage]) -> None:
        """Replace the shared-GPU picture: pools without shares any more drop out."""
        for gauge in (self.share_allocated, self.shared_gpus, self.stranded_gpus, self.stranded_share):
            gauge.clear()
        for pool in pools:
            labels = (pool.gpu_type, check("capacity_type", pool.capacity_type, CAPACITY_TYPES))
            self.share_allocated.labels(*labels).set(pool.share_milli / MILLI)
            self.shared_gpus.labels(*labels).set(pool.shared_gpus)
            self.stranded_gpus.labels(*labels).set(pool.stranded_gpus)
            self.stranded_share.labels(*labels).set(pool.stranded_milli / MILLI)

    def record_mig_slices(self, slices: Iterable[MigSlices]) -> None:
        """Replace the MIG picture. A profile outside the known ones counts as `other`, so a node's labels
        cannot make new series."""
        self.mig_instances.clear()
        totals: dict[tuple[str, str, str], int] = {}
        for mig in slices:
            profile = mig.profile if mig.profile in ALL_MIG_PROFILES else OTHER_PROFILE
            counts = [("allocated", mig.allocated)] + ([("free", mig.free)] if mig.free is not None else [])
            for state, count in counts:
                key = (mig.gpu_type, profile, state)
                totals[key] = totals.get(key, 0) + count
        for key, count in sorted(totals.items()):
            self.mig_instances.labels(*key).set(count)


def mig_slices(offered: Iterable[tuple[str, str, int]], held: Iterable[tuple[str, str]]) -> list[MigSlices]:
    """MIG instances by (GPU type, profile): OFFERED (gpu type, profile, allocatable instances, as each node's
    device plugin advertises them) and HELD (gpu type, profile) once per instance a pod holds. A profile
    held where none is offered has no known free count."""
    allocatable: dict[tuple[str, str], int] = {}
    for gpu_type, profile, count in offered:
        allocatable[(gpu_type, profile)] = allocatable.get((gpu_type, profile), 0) + count
    allocated: dict[tuple[str, str], int] = {}
    for key in held:
        allocated[key] = allocated.get(key, 0) + 1
    return [
        MigSlices(
            gpu_type,
            profile,
            allocated.get((gpu_type, profile), 0),
            max(allocatable[(gpu_type, profile)] - allocated.get((gpu_type, profile), 0), 0)
            if (gpu_type, profile) in allocatable
            else None,
        )
        for gpu_type, profile in sorted(allocatable.keys() | allocated.keys())
    ]
