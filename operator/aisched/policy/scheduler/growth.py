"""Elastic growth: GPUs left over once pending jobs had their turn go to running elastic jobs."""

from __future__ import annotations

from dataclasses import replace

from aisched.api.common import TopologyLevel
from aisched.policy.cluster import LEVEL_ORDER, DomainId, level_rank
from aisched.policy.placement import Placement
from aisched.policy.scheduler.results import GROWN, Resize
from aisched.policy.scheduler.state import CycleState, RunningGang


def grow_elastic(cycle: CycleState) -> None:
    """Left-over GPUs grow running elastic jobs towards `max_replicas`, next to where they run,
    when no job of equal or higher priority waits for GPUs."""
    blocked = max(cycle.blocked_priorities, default=None)
    growing = sorted(
        (r for r in cycle.running.values() if r.job.elastic and not r.admitted_now and r.job.queue in cycle.quotas),
        key=lambda r: (-r.job.priority, r.job.created, r.job.key),
    )
    for running in growing:
        job = running.job
        if blocked is not None and blocked >= job.priority:
            continue
        current = running.placement.replicas
        room = (job.max_replicas or current) - current
        allowance = cycle.ledger.allowance(job.queue, running.placement.gpu_type, job.gpus_per_replica)
        if allowance.max_gpus is not None:
            room = min(room, allowance.max_gpus // job.gpus_per_replica)
        if room < 1 or allowance.refusal is not None:
            continue
        gpu_types = frozenset({running.placement.gpu_type}) if running.placement.gpu_type else None
        request = job.gang(room, gpu_types, job.excluded_nodes | cycle.reserved_against(job))
        for domain in _enclosing(cycle, running.placement, job.required_level):
            extra = cycle.place_most(replace(request, within=domain), 1)
            if isinstance(extra, Placement):
                _extend(cycle, running, extra, current)
                break


def _enclosing(cycle: CycleState, placement: Placement, required: TopologyLevel | None) -> list[DomainId]:
    """The placement's domain and the wider ones around it, up to the required level."""
    known = [n for n in placement.nodes if n in cycle.snapshot]
    if not known:
        return []
    node = cycle.snapshot.node(known[0])
    widest = level_rank(required)
    domains = []
    for level in (*LEVEL_ORDER, None):
        if level_rank(level) < level_rank(placement.level) or level_rank(level) > widest:
            continue
        path = () if level is None else node.path(level)
        if path is not None:
            domains.append(DomainId(level, path))
    return domains


def _extend(cycle: CycleState, running: RunningGang, extra: Placement, current: int) -> None:
    job = running.job
    cycle.snapshot.allocate(extra.gpus_by_node())
    cycle.ledger.charge(job.queue, extra.total_gpus, extra.gpu_type)
    nodes = running.placement.nodes + extra.nodes
    running.placement = Placement.of_nodes(nodes, job.gpus_per_replica, cycle.snapshot)
    cycle.resized[job.key] = Resize(
        job.key,
        running.placement,
        GROWN,
        f"grown from {current} to {len(nodes)} replicas: {extra.total_gpus} GPUs were idle",
    )
