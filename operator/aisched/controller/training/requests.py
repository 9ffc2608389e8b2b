"""What the scheduling cycle asks the scheduler for each job, kept from one cycle to the next.

With ten thousand jobs, most wait or run unchanged from one cycle to the next. A job's request is
made again only when its object, the capacity chosen for it or the nodes it must keep off changed,
or, for a running gang, the nodes as placement sees them (`Inventory.node_generation`) or what its
pods hold. A running gang is charged what it was admitted with, never less than its pods hold, and
never what its spec says now (`policy.scheduler.jobs.running_charge`): its pods do not follow the spec.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from aisched.api import CapacityType, TrainingJob
from aisched.kube.records import PodRecord
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.policy.scheduler import JobRequest
from aisched.policy.scheduler.jobs import NOTHING_HELD, HeldByPods, running_charge
from aisched.policy.shared_room import SharePart
from aisched.policy.topology import Topology

JobKey = tuple[str, str]
_NO_NODES = -1  # a waiting job's request reads no node


@dataclass(frozen=True, slots=True)
class GangHolds:
    """What a running gang's pods hold, as the cycle reads them off the inventory."""

    parts: tuple[SharePart, ...] = ()
    """A fraction's part of a GPU each rank holds (`SharePart`, by rank)."""
    held: HeldByPods = NOTHING_HELD
    """The most one of its live pods holds."""

    @classmethod
    def of(cls, parts: tuple[SharePart, ...], pods: Iterable[PodRecord]) -> GangHolds:
        """PARTS as `JobStore.parts_held` reads them, and the most one of PODS (the job's) holds while it lives
        (bound or pinned, not finished; terminating included: its GPUs are not free before it is gone)."""
        live = [pod for pod in pods if pod.holds_gpus]
        held = HeldByPods(
            whole_gpus=max((pod.gpus + pod.claims for pod in live), default=0),
            milli=max((pod.gpu_milli for pod in live), default=0),
        )
        return cls(parts, held)


_NO_PODS = GangHolds()  # a waiting job's request reads no pod


@dataclass(frozen=True, slots=True)
class _Made:
    obj: dict[str, Any]
    """The object it was made from: a watch event or a status write replaces it."""
    capacity_types: tuple[CapacityType, ...] | None
    excluded: frozenset[str]
    node_generation: int
    request: JobRequest
    holds: GangHolds
    """A running gang's: what its pods held when it was made."""


class RequestBook:
    """The requests of the cycle under way, and those of the last one to take from."""

    def __init__(self) -> None:
        self._last: dict[JobKey, _Made] = {}
        self._now: dict[JobKey, _Made] = {}
        # A running gang's status is written as it goes (Placing, Running, checkpoints): its
        # placement, read off the nodes, outlives those writes.
        self._placements: dict[tuple[tuple[str, ...], int], Placement] = {}
        self._placements_generation = _NO_NODES

    def begin_cycle(self) -> None:
        """Requests not asked for in a cycle are let go at the next: no object outlives its job's turn."""
        self._last, self._now = self._now, {}
        self._placements = {shape: self._placements[shape] for shape in self._placements_used()}

    def end_cycle(self) -> None:
        """Every job had its turn: the last cycle's requests, and the objects they hold, go."""
        self._last = {}

    def _placements_used(self) -> set[tuple[tuple[str, ...], int]]:
        return {
            (made.request.placement.nodes, made.request.placement.gpus_per_replica)
            for made in self._last.values()
            if made.request.placement is not None
        } & self._placements.keys()

    def waiting(
        self,
        key: JobKey,
        obj: dict[str, Any],
        job: TrainingJob,
        capacity_types: tuple[CapacityType, ...],
        excluded: frozenset[str],
        *,
        topology: Topology,
        gpu_memory_mib: int = 0,
    ) -> JobRequest:
        """GPU_MEMORY_MIB: of the smallest GPU a memory share could land on (`JobRequest.from_training_job`)."""
        made = self._last.get(key)
        if (
            made is None
            or not _still(made, obj, capacity_types, excluded, _NO_NODES)
            or _memory_changed(made, gpu_memory_mib)
        ):
            request = JobRequest.from_training_job(
                job,
                capacity_types=capacity_types,
                excluded_nodes=excluded,
                topology=topology,
                gpu_memory_mib=gpu_memory_mib,
            )
            made = _Made(obj, capacity_types, excluded, _NO_NODES, request, _NO_PODS)
        assert made is not None
        self._now[key] = made
        return made.request

    def running(
        self,
        key: JobKey,
        obj: dict[str, Any],
        job: TrainingJob,
        snapshot: ClusterSnapshot,
        *,
        node_generation: int,
        excluded: frozenset[str],
        gpu_memory_mib: int = 0,
        holds: GangHolds = _NO_PODS,
    ) -> JobRequest:
        """The request of a gang placed on its status placement's nodes, as the snapshot sees them, and
        HOLDS, what its pods hold.

        It is charged what it was admitted with and never less than its pods hold (`running_charge`):
        not what its spec says now, which its pods, made at admission, do not follow."""
        parts, held = holds.parts, holds.held
        made = self._last.get(key)
        if (
            made is None
            or not _still(made, obj, None, excluded, node_generation)
            or _memory_changed(made, gpu_memory_mib)
            or made.holds != holds
        ):
            assert job.status.placement is not None
            charge = running_charge(job, held, gpu_memory_mib)
            placement = self._placement(
                tuple(job.status.placement.nodes), charge.gpus_per_replica, snapshot, node_generation
            )
            share = charge.share
            if share is not None and (parts or share.mig_profile is not None):
                # What stopping or shrinking it frees is its parts of GPUs or its MIG instances.
                placement = replace(placement, parts=parts, mig_profile=share.mig_profile)
            types = (placement.capacity_type,) if placement.capacity_type else (CapacityType.ON_DEMAND,)
            request = JobRequest.from_training_job(
                job,
                capacity_types=types,
                placement=placement,
                excluded_nodes=excluded,
                topology=snapshot.topology,
                gpu_memory_mib=gpu_memory_mib,
                held=held,
            )
            made = _Made(obj, None, excluded, node_generation, request, holds)
        assert made is not None
        self._now[key] = made
        return made.request

    def _placement(
        self, nodes: tuple[str, ...], gpus_per_replica: int, snapshot: ClusterSnapshot, node_generation: int
    ) -> Placement:
        if node_generation != self._placements_generation:
            self._placements, self._placements_generation = {}, node_generation
        shape = (nodes, gpus_per_replica)
        placement = self._placements.get(shape)
        if placement is None:
            placement = self._placements[shape] = Placement.of_nodes(nodes, gpus_per_replica, snapshot)
        return placement


def _still(
    made: _Made | None,
    obj: dict[str, Any],
    capacity_types: tuple[CapacityType, ...] | None,
    excluded: frozenset[str],
    node_generation: int,
) -> bool:
    return (
        made is not None
        and made.obj is obj
        and made.capacity_types == capacity_types
        and made.node_generation == node_generation
        and made.excluded == excluded
    )


def _memory_changed(made: _Made | None, gpu_memory_mib: int) -> bool:
    """A memory share is charged by the smallest GPU it could land on: a new such GPU charges it anew."""
    return (
        made is not None
        and made.request.milli_per_replica is not None
        and made.request.gpu_memory_mib != gpu_memory_mib
    )
