"""What the jobs a scheduling cycle left waiting ask of MIG: instances by queue, and whole GPUs. Pure.

A MIG gang waiting for GPUs (none of its instances free) asks for a repartition, bounded by its
queue (`mig_plan.plan_bounded_repartition`); a whole-GPU gang waiting for GPUs, or for a domain
big enough, may be kept out by GPUs sliced into instances nobody uses, and asks for those back
(`mig_plan.plan_back_to_whole`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol

from aisched.api.sharing import GpuShare
from aisched.policy.placement import INSUFFICIENT_GPUS, TOPOLOGY_TOO_SMALL

WHOLE_GPU_WAITS: Final = frozenset({INSUFFICIENT_GPUS, TOPOLOGY_TOO_SMALL})
"""Why a whole-GPU gang waits when sliced GPUs could be its: none free, or no domain big enough."""


class SharedSpec(Protocol):
    """What a TrainingJob's or an InferenceService's spec says of its replicas' GPUs."""

    @property
    def gpu_share(self) -> GpuShare | None: ...
    @property
    def replicas(self) -> int: ...


class QueuedSpec(SharedSpec, Protocol):
    """A TrainingJob's spec as the cycle left it waiting: its queue and whole GPUs too."""

    @property
    def queue(self) -> str: ...
    @property
    def gpus_per_replica(self) -> int: ...


def waiting_instances(specs: Iterable[SharedSpec]) -> dict[str, int]:
    """MIG instances the SPECS (of jobs left waiting) ask, by profile."""
    asked: dict[str, int] = {}
    for spec in specs:
        profile = spec.gpu_share.mig_profile if spec.gpu_share is not None else None
        if profile is not None:
            asked[profile] = asked.get(profile, 0) + spec.replicas
    return asked


@dataclass(frozen=True)
class WaitingMig:
    instances: dict[str, dict[str, int]] = field(default_factory=dict)
    """MIG instances waiting for GPUs, by queue, then profile."""
    whole_gpus: int = 0
    """Whole GPUs gangs wait for that sliced GPUs may keep from them."""


def waiting_mig(waiting: Iterable[tuple[QueuedSpec, str]]) -> WaitingMig:
    """What WAITING (each job's spec with the reason it waits) asks of MIG."""
    by_queue: dict[str, dict[str, int]] = {}
    whole = 0
    for spec, reason in waiting:
        profile = spec.gpu_share.mig_profile if spec.gpu_share is not None else None
        if profile is not None and reason == INSUFFICIENT_GPUS:
            mine = by_queue.setdefault(spec.queue, {})
            mine[profile] = mine.get(profile, 0) + spec.replicas
        elif spec.gpu_share is None and reason in WHOLE_GPU_WAITS:
            whole += spec.replicas * spec.gpus_per_replica
    return WaitingMig(by_queue, whole)
