"""Elastic growth: GPUs left over once pending jobs had their turn go to running elastic jobs."""

from __future__ import annotations

from dataclasses import replace

from aisched.policy.placement import GangRequest, Placement, hold
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.results import GROWN, Resize
from aisched.policy.scheduler.service import ran_long_enough
from aisched.policy.scheduler.state import CycleState, RunningGang
from aisched.policy.topology import DomainId, Level, level_rank


def grow_elastic(cycle: CycleState) -> None:
    """Left-over GPUs grow running elastic jobs towards `max_replicas`, next to where they run and
    within the tightest domain the grown gang could get, when no job of higher priority waits for
    GPUs.

    A waiting job of the same priority does not stop growth: growth stays off the GPUs reserved
    for the first of them, and when one can start it takes the growth back (equal priorities
    shrink opportunistic growth before anything else, `preemption`), so growth only uses GPUs
    that would idle meanwhile. The job grown pays a relaunch each way; `_settled` keeps that rare.
    Nothing grows in a cycle that deferred pending jobs: they may fit in what is left over.
    """
    if cycle.deferred:
        return
    blocked = max((priority for priority, _ in cycle.waiting_for_gpus), default=None)
    growing = sorted(
        (r for r in cycle.running.values() if r.job.elastic and not r.admitted_now and r.job.queue in cycle.quotas),
        key=lambda r: (-r.job.priority, r.job.created, r.job.key),
    )
    for running in growing:
        job = running.job
        if (blocked is not None and blocked > job.priority) or not _settled(cycle, job):
            continue
        current = running.placement.replicas
        room = (job.max_replicas or current) - current
        allowance = cycle.ledger.allowance(job.queue, running.placement.gpu_type, job.replica_milli)
        if allowance.max_milli is not None:
            room = min(room, allowance.max_milli // job.replica_milli)
        if room < 1 or allowance.refusal is not None:
            continue
        gpu_types = frozenset({running.placement.gpu_type}) if running.placement.gpu_type else None
        request = job.gang(room, gpu_types, job.excluded_nodes | cycle.reserved_against(job))
        widest = _widest_level(cycle, job.required_level, replace(request, replicas=current + room))
        for domain in _enclosing(cycle, running.placement, widest):
            extra = cycle.place_most(replace(request, within=domain), 1)
            if isinstance(extra, Placement) and _consolidated(cycle, running, extra, request):
                _extend(cycle, running, extra, current)
                break


def _settled(cycle: CycleState, job: JobRequest) -> bool:
    """Has the gang run its queue's minimum run time on its placement (since it started, or was last resized)?

    Growing relaunches the gang from its checkpoint. A gang that only just started may be about to
    end (most jobs are short), and one that was just shrunk for a newcomer would grow back and be
    shrunk again as the next one comes: either way the relaunch costs more than the growth brings.
    The queue's minimum run time (the same that guards it against time-slicing) says how long is
    long enough; a queue that does not time-slice grows its jobs at once.
    """
    quota = cycle.quotas.get(job.queue)
    if quota is None or quota.min_run_seconds is None:
        return True
    return ran_long_enough(job, cycle.now, quota.min_run_seconds)


def _consolidated(cycle: CycleState, running: RunningGang, extra: Placement, request: GangRequest) -> bool:
    """Would the gang with `extra` be in the tightest domain its new size could get? Fewer extra
    replicas than asked may fit a narrower level than the one they were placed at."""
    grown = replace(request, replicas=running.placement.replicas + extra.replicas, within=None)
    placed = cycle.snapshot.tightest_domain((*running.placement.nodes, *extra.nodes)).level
    return level_rank(placed) <= level_rank(cycle.tightest_level(grown))


def _widest_level(cycle: CycleState, required: Level | None, grown: GangRequest) -> Level | None:
    """The widest level growth may reach: the job's required level, and no wider than the tightest
    level the grown gang could ever get.

    Growth is opportunistic: a gang spread over more nodes, racks or zones than its new size needs
    runs slower for as long as it runs (a 1-GPU job grown onto a second node can end up slower than
    it was on one GPU), so extra replicas go only where the grown gang stays consolidated, as
    admission holds gangs to their tightest domain (`CycleState.consolidated`).
    """
    tightest = cycle.tightest_level(grown)
    return tightest if required is None or level_rank(tightest) < level_rank(required) else required


def _enclosing(cycle: CycleState, placement: Placement, widest_level: Level | None) -> list[DomainId]:
    """The placement's domain and the wider ones around it, up to `widest_level`."""
    known = [n for n in placement.nodes if n in cycle.snapshot]
    if not known:
        return []
    node = cycle.snapshot.node(known[0])
    widest = level_rank(widest_level)
    domains = []
    for level in (*cycle.snapshot.topology.levels, None):
        if level_rank(level) < level_rank(placement.level) or level_rank(level) > widest:
            continue
        path = () if level is None else node.path(level)
        if path is not None:
            domains.append(DomainId(level, path))
    return domains


def _extend(cycle: CycleState, running: RunningGang, extra: Placement, current: int) -> None:
    job = running.job
    hold(cycle.snapshot, extra)
    cycle.ledger.charge(job.queue, job.charge(extra.replicas), extra.gpu_type)
    nodes = running.placement.nodes + extra.nodes
    grown = Placement.of_nodes(nodes, job.gpus_per_replica, cycle.snapshot)
    if running.placement.parts and extra.parts:  # an elastic share: its parts of GPUs by rank, as shrinking reads them
        grown = replace(grown, parts=running.placement.parts + extra.parts)
    running.placement = replace(grown, mig_profile=running.placement.mig_profile)
    cycle.resized[job.key] = Resize(
        job.key,
        running.placement,
        GROWN,
        f"grown from {current} to {len(nodes)} replicas: {extra.total_gpus} GPUs were idle",
    )
