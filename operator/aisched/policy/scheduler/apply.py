"""A cycle's result applied to a snapshot: what its decisions take and free. Pure.

The simulator applies it the moment it decides (`Applied.AT_ONCE`: a preempted or resized gang
stops in the same instant, as its clock has it). The operator applies it as its cluster will be
until the stops land (`Applied.AS_STOPS_LAND`): a preempted gang holds its GPUs until its pods
are gone, a resized one holds what it had until it is relaunched, so what a decision takes there
is only what is free now; `policy.decision` plans the services' replicas on what is left.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement, hold, release_all
from aisched.policy.scheduler.results import ScheduleResult


class Applied(Enum):
    AT_ONCE = "at once"
    AS_STOPS_LAND = "as stops land"


def apply_result(
    snapshot: ClusterSnapshot,
    result: ScheduleResult,
    running: Mapping[str, Placement],
    when: Applied,
    *,
    admitted: bool = True,
) -> None:
    """RESULT's decisions taken in SNAPSHOT; RUNNING holds the placements of the gangs it may stop or
    resize. ADMITTED False leaves its admissions out (the caller holds them one by one)."""
    if when is Applied.AT_ONCE:
        # All freed before any is taken: a shrink or a preemption makes room for a growth.
        release_all(snapshot, (running[p.key] for p in result.preempted))
        release_all(snapshot, (running[r.key] for r in result.resized))
        for resize in result.resized:
            hold(snapshot, resize.placement)
        if admitted:
            for admission in result.admitted:
                hold(snapshot, admission.placement)
        return
    for resize in result.resized:
        _take_what_is_free(snapshot, resize.placement)
    if admitted:
        for admission in result.admitted:
            if admission.preempting:  # its victims still hold the rest
                _take_what_is_free(snapshot, admission.placement)
            else:
                hold(snapshot, admission.placement)


def _take_what_is_free(snapshot: ClusterSnapshot, placement: Placement) -> None:
    """Of PLACEMENT's whole GPUs, those free now (a part of a GPU or a MIG instance is taken by its own
    gang only once it is placed; until then the GPUs that hold it are held by its victims)."""
    snapshot.allocate({n: min(g, snapshot.free_gpus(n)) for n, g in placement.gpus_by_node().items()})
