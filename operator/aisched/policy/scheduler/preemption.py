"""Making room: a job that does not fit for lack of free GPUs shrinks elastic jobs towards their
minimum, then preempts whole gangs of lower priority.

Victims are its own queue's, or those of queues borrowing beyond their quota. The search
picks the tightest domain and there the cheapest set of victims (fewest gangs, lowest
priority). Never half a gang, never a higher priority; an equal priority only when time-slicing
allows it (`CycleState.sliceable_for`: a higher band of attained service, its minimum run had),
or to reclaim: a job whose queue stays within its nominal quota takes back what other queues of
its cohort borrowed (Kueue's reclaimWithinCohort), whatever their priority up to its own, since
a quota lent is a quota its owner may have back.

What is borrowed through InferenceService replicas is reclaimed the same way, in the same plan:
the replicas of a borrowing queue (`CycleState.service_replicas`, one-replica gangs here) are
candidates only for a reclaiming job, lowest priority first, then newest, and a plan takes no
more of a queue's replicas than it borrows (the last one taken may straddle its nominal quota,
as a gang's does), so a service keeps what it holds within its queue's nominal quota. They go by
the serving controller's retirement (`ScheduleResult.reclaimed`), not as a preempted gang.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.job_messages import preempted_message, shrunk_message
from aisched.policy.placement import GangRequest, Placement, gang_fits, place_gang, release, search_levels
from aisched.policy.queueing import MILLI
from aisched.policy.scheduler.attempt import Attempt
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.reclaim import may_take_back, reclaimable_replicas, replicas_rank, victim_order
from aisched.policy.scheduler.results import SHRUNK, Preemption, ReclaimedReplica, Resize
from aisched.policy.scheduler.state import REPLICA_KEY_MARK, CycleState, RunningGang
from aisched.policy.topology import DomainId, Level, level_rank

# Time-slicing preempts at most this many gangs in one cycle. Thousands of jobs with less service
# than thousands of running ones would otherwise each search the cluster for a victim in the same
# cycle (minutes of deciding on 5,000 nodes) and stop half the cluster at once; the rest follow
# in the next cycles, seconds later, while their gangs run a few seconds more.
MAX_SLICES_PER_CYCLE = 32
# Where victims could be taken in thousands of domains (every node of a large cluster), the
# cheapest of the first this many workable plans is taken, not the cheapest of all.
MAX_PLANS_COMPARED = 64


@dataclass(slots=True)
class _Displacement:
    """Displacing one running job: preempt it, or drop some replicas of an elastic one."""

    running: RunningGang
    dropped: tuple[int, ...] | None = None
    """Ranks dropped by a shrink; None preempts the whole gang."""

    def milli(self) -> int:
        """GPU-equivalents (thousandths) the displacement gives back to its queue."""
        placement = self.running.placement
        return self.running.job.charge(placement.replicas if self.dropped is None else len(self.dropped))

    def release(self, snapshot: ClusterSnapshot) -> None:
        """Count what it frees as free in SNAPSHOT: the gang's GPUs, parts of GPUs and MIG instances,
        or those of the dropped ranks."""
        release(snapshot, self.running.placement, self.dropped)


@dataclass(frozen=True, slots=True)
class _RoomPlan:
    cost: tuple[int, int, int, int]
    actions: tuple[_Displacement, ...]
    domain: DomainId


def _displaceable(cycle: CycleState, job: JobRequest, milli: int) -> list[_Displacement]:
    """Everything `job`, asking MILLI GPU-equivalents, may take GPUs from: shrinks first, then whole gangs."""
    lowest, elastic = cycle.lowest_priority, cycle.lowest_elastic_priority
    slicing = (
        lowest == job.priority and cycle.highest_running_band > cycle.band(job) and cycle.slices < MAX_SLICES_PER_CYCLE
    )
    reclaiming = cycle.ledger.reclaimer_cohort(job.queue, milli)
    nothing_lower = (lowest is None or lowest >= job.priority) and (elastic is None or elastic > job.priority)
    if nothing_lower and not slicing and reclaiming is None:
        return []
    shrinkable, preemptible = _eligible(cycle, job, slicing, reclaiming)
    # What changes as the cycle goes on is checked here: gangs preempted or shrunk since, and
    # which queues borrow.
    shrinks = [
        _Displacement(running, dropped=())
        for running in shrinkable
        if _still_displaceable(cycle, running, job)
        and _shrink_floor(running.job, job.priority) < running.placement.replicas
    ]
    preemptions = [_Displacement(running) for running in preemptible if _still_displaceable(cycle, running, job)]
    return shrinks + preemptions


def _eligible(
    cycle: CycleState, job: JobRequest, slicing: bool, reclaiming: str | None
) -> tuple[list[RunningGang], list[RunningGang]]:
    """The gangs running when the cycle began that a job of this priority and band may shrink or
    preempt, cheapest first; worked out once per (priority, band, slicing, reclaiming queue) and cycle.

    RECLAIMING is the job's cohort when it takes back lent quota: other queues' gangs there of up to
    its priority are candidates (`_still_displaceable` keeps those whose queue still borrows)."""
    reclaimer = job.queue if reclaiming is not None else None
    key = (job.priority, cycle.band(job), slicing, reclaimer)
    cached = cycle.displaceable.get(key)
    if cached is not None:
        return cached
    shrinkable: list[RunningGang] = []
    preemptible: list[RunningGang] = []
    for running in cycle.running.values():
        other = running.job
        if running.admitted_now or other.priority > job.priority:
            continue
        if other.elastic:
            shrinkable.append(running)
        if (
            other.priority < job.priority
            or (slicing and cycle.sliceable_for(running, job))
            or (reclaiming is not None and other.queue != job.queue and cycle.ledger.in_cohort(other.queue, reclaiming))
        ):
            preemptible.append(running)
    shrinkable.sort(key=lambda r: (r.job.priority, -r.job.created.timestamp(), r.job.key))
    preemptible.sort(key=victim_order)
    if reclaiming is not None:
        replicas = reclaimable_replicas(cycle, job, reclaiming)
        preemptible = list(heapq.merge(preemptible, replicas, key=lambda r: victim_order(r)[:2]))
    cycle.displaceable[key] = shrinkable, preemptible
    return shrinkable, preemptible


def _still_displaceable(cycle: CycleState, running: RunningGang, job: JobRequest) -> bool:
    other = running.job
    ours = cycle.service_replicas if other.replica_set else cycle.running
    if ours.get(other.key) is not running or other.key == job.key:
        return False
    # Another team's guaranteed quota is never taken; what it borrows beyond it may be.
    return other.queue == job.queue or cycle.ledger.borrowed(other.queue) > 0


def _shrink_floor(job: JobRequest, for_priority: int) -> int:
    """Fewest replicas an elastic job may be shrunk to for a job of `for_priority`."""
    if not job.elastic or job.min_replicas is None:
        return 1 << 30
    if for_priority > job.priority:
        return job.min_replicas
    return max(job.min_replicas, job.replicas)  # equal priority takes back only opportunistic growth


def make_room(cycle: CycleState, attempt: Attempt) -> bool:
    """Shrink and preempt so that the job's fewest replicas fit; nothing changes unless they then fit."""
    job, request = attempt.job, attempt.smallest
    if job.replica_set:  # a service's replicas wait for free GPUs: they stop no one
        return False
    candidates = _displaceable(cycle, job, job.charge(request.replicas))
    if not candidates:
        return False
    # Among plans alike, the one taking the replicas first in victim order (the newest) goes.
    replicas_order = {c.running.job.key: i for i, c in enumerate(candidates) if c.running.job.replica_set}
    for level in _levels_to_search(cycle, request):
        # Domains in the order of their cheapest candidate (the list is cheapest first), so the
        # plans compared are the likeliest cheapest; ties go to the first domain by path.
        inside = _candidates_by_domain(cycle, candidates, level)
        plans: list[_RoomPlan] = []
        for domain, there in inside.items():
            plan = _plan_within(cycle, job, replace(request, within=domain), there)
            if plan is not None:
                plans.append(plan)
                if len(plans) == MAX_PLANS_COMPARED:
                    break
        if plans:
            best = min(plans, key=lambda plan: (plan.cost, _replicas_rank(plan, replicas_order), _path_rank(plan)))
            _carry_out(cycle, job, replace(request, within=best.domain), best)
            return True
    return False


def _replicas_rank(plan: _RoomPlan, order: dict[str, int]) -> tuple[int, ...]:
    return replicas_rank((a.running.job.key for a in plan.actions), order)


def _path_rank(plan: _RoomPlan) -> tuple[tuple[bool, str], ...]:
    return tuple((p is None, p or "") for p in plan.domain.path)


def _levels_to_search(cycle: CycleState, request: GangRequest) -> list[Level | None]:
    """The levels where making room may succeed where the Node level did not.

    One replica lands on one node: what room a wider domain makes, the plan for that node
    makes with fewer victims. A level whose domains are single nodes repeats the Node level.
    """
    if request.share is not None and request.share.is_mig:
        return [None]  # MIG nodes are no whole-GPU domain's: their instances are searched cluster-wide
    levels = search_levels(request, cycle.snapshot.topology)
    if request.replicas == 1:
        return [level for level in levels if level is not None and level.is_node]
    # Below the tightest level that could hold the gang on an empty cluster, no victims help.
    tightest = level_rank(cycle.tightest_level(request))
    return [
        level
        for level in levels
        if level_rank(level) >= tightest
        and (level is None or level.is_node or cycle.snapshot.most_nodes_in_a_domain(level) > 1)
    ]


def _candidates_by_domain(
    cycle: CycleState, candidates: Sequence[_Displacement], level: Level | None
) -> dict[DomainId, list[_Displacement]]:
    """The candidates with GPUs in each domain of LEVEL, in their order: a domain's plan looks at no other."""
    inside: dict[DomainId, list[_Displacement]] = {}
    for candidate in candidates:
        for domain in _domains_at(cycle, candidate.running.placement.nodes, level):
            inside.setdefault(domain, []).append(candidate)
    return inside


def _domains_at(cycle: CycleState, nodes: Iterable[str], level: Level | None) -> list[DomainId]:
    """The domains of LEVEL the nodes are in, each once, in the nodes' order (the same every run)."""
    if level is None:
        return [DomainId(None, ())]
    key = (tuple(nodes), level)
    known = cycle.domains_of.get(key)
    if known is not None:
        return known
    domains: dict[DomainId, None] = {}
    for name in key[0]:
        if name in cycle.snapshot:
            path = cycle.snapshot.node(name).path(level)
            if path is not None:
                domains[DomainId(level, path)] = None
    cycle.domains_of[key] = list(domains)
    return cycle.domains_of[key]


def _plan_within(
    cycle: CycleState, job: JobRequest, request: GangRequest, candidates: Sequence[_Displacement]
) -> _RoomPlan | None:
    """Displacements inside request.within that let the job fit there.

    Cheapest first: lowest victim priority, then fewest gangs, then least work lost.
    """
    within = request.within
    assert within is not None
    actions: list[_Displacement] = []
    seen: set[str] = set()
    taken_back: dict[str, int] = {}
    """What the plan takes of each borrowing queue's replicas: never more than the queue borrows."""
    for candidate in candidates:
        action = _restricted(cycle, candidate, job, within)
        if action is None:
            continue
        if candidate.running.job.replica_set and not may_take_back(cycle, candidate.running.job, taken_back):
            continue
        key = candidate.running.job.key
        if action.dropped is None and key in seen:
            actions = [a for a in actions if a.running.job.key != key]
        seen.add(key)
        actions.append(action)
        if _fits_after(cycle, request, actions):
            break
    else:
        return None
    # Keep only what is needed: try to spare each displacement, highest priority first.
    for action in sorted(actions, key=lambda a: -a.running.job.priority):
        rest = [a for a in actions if a is not action]
        if rest and _fits_after(cycle, request, rest):
            actions = rest
    preempted = [a for a in actions if a.dropped is None]
    cost = (
        max((a.running.job.priority for a in preempted), default=-(1 << 62)),
        len(preempted),
        sum(_work_lost(cycle, a.running) for a in preempted),
        sum(len(a.dropped or ()) for a in actions),
    )
    return _RoomPlan(cost, tuple(actions), within)


def _work_lost(cycle: CycleState, running: RunningGang) -> int:
    """GPU-seconds a preemption throws away (at most: checkpoints may save some)."""
    started = running.job.started or cycle.now
    return running.job.held_milli * max(0, int((cycle.now - started).total_seconds())) // MILLI


def _restricted(cycle: CycleState, candidate: _Displacement, job: JobRequest, within: DomainId) -> _Displacement | None:
    """The candidate's displacement as it helps inside `within`, or None when it has nothing there."""
    placement = candidate.running.placement
    inside = [
        rank
        for rank, name in enumerate(placement.nodes)
        if within.level is None or (name in cycle.snapshot and within.contains(_node_domain(cycle, name)))
    ]
    if not inside:
        return None
    if candidate.dropped is None:
        return candidate
    other = candidate.running.job
    floor = _shrink_floor(other, job.priority)
    if other.priority == job.priority:
        # Taking back growth drops the replicas growth added (it appends them): dropping ranks the
        # gang started with instead could leave it split over nodes one node would hold.
        inside = [rank for rank in inside if rank >= floor]
        if not inside:
            return None
    spare = placement.replicas - floor
    return _Displacement(candidate.running, dropped=tuple(sorted(inside, reverse=True)[:spare]))


def _node_domain(cycle: CycleState, name: str) -> DomainId:
    node_level = cycle.snapshot.topology.node
    return DomainId(node_level, cycle.snapshot.node(name).path(node_level) or (name,))


def _fits_after(cycle: CycleState, request: GangRequest, actions: Sequence[_Displacement]) -> bool:
    with cycle.snapshot.trial():
        for action in actions:
            action.release(cycle.snapshot)
        return gang_fits(request, cycle.snapshot)


def _carry_out(cycle: CycleState, job: JobRequest, request: GangRequest, plan: _RoomPlan) -> None:
    for action in plan.actions:
        running = action.running
        other = running.job
        action.release(cycle.snapshot)
        cycle.released_nodes.update(
            running.placement.nodes if action.dropped is None else (running.placement.nodes[r] for r in action.dropped)
        )
        cycle.ledger.refund(other.queue, action.milli(), running.placement.gpu_type)
        if other.replica_set:
            del cycle.service_replicas[other.key]
            service, _, pod = other.key.partition(REPLICA_KEY_MARK)
            cycle.reclaimed.append(ReclaimedReplica(service, pod, job.queue, job.key))
        elif action.dropped is None:
            cycle.slices += other.priority == job.priority
            del cycle.running[other.key]
            cycle.resized.pop(other.key, None)
            cycle.preempted.append(Preemption(other.key, job.key, _victim_words(other, job, request)))
        else:
            kept = [rank for rank in range(running.placement.replicas) if rank not in action.dropped]
            running.placement = running.placement.keeping(kept, cycle.snapshot)
            cycle.resized[other.key] = Resize(
                other.key,
                running.placement,
                SHRUNK,
                shrunk_message(other, job, before=len(kept) + len(action.dropped), after=len(kept)),
            )
    cycle.failures.clear()  # GPUs were released: earlier failures may fit now
    cycle.blocked.clear()
    placement = place_gang(request, cycle.snapshot)
    assert isinstance(placement, Placement), "the plan was checked on the same snapshot"
    cycle.admit(job, placement, tuple(a.running.job.key for a in plan.actions))


def preempt_within_quota(cycle: CycleState, job: JobRequest, replicas: int) -> bool:
    """A job over its queue's quota takes it back from its own queue: elastic growth first, then
    lower-priority gangs.

    Elastic jobs of the queue give back what they grew beyond their `replicas` (beyond their minimum
    for a higher priority), a rank at a time; then victims go lowest priority first, most recently
    started first (least work lost), and only as many as both the quota and the placement need.
    Nothing changes unless the job then fits.
    """
    own = [r for r in cycle.running.values() if r.job.queue == job.queue and not r.admitted_now]
    chosen: list[_Displacement] = []
    growth = sorted(
        (
            r
            for r in own
            if r.job.priority <= job.priority and _shrink_floor(r.job, job.priority) < len(r.placement.nodes)
        ),
        key=lambda r: (r.job.priority, -r.job.created.timestamp(), r.job.key),
    )
    for running in growth:
        spare = running.placement.replicas - _shrink_floor(running.job, job.priority)
        last = running.placement.replicas - 1
        for count in range(1, spare + 1):
            shrink = _Displacement(running, dropped=tuple(range(last, last - count, -1)))
            if _admitted_after(cycle, job, replicas, [*chosen, shrink]):
                return True
        chosen.append(shrink)
    victims = sorted(
        (r for r in own if r.job.priority < job.priority),
        key=lambda r: (r.job.priority, -(r.job.started or r.job.created).timestamp(), r.job.key),
    )
    for running in victims:
        # A gang preempted whole gives back all it has, what a shrink of it took included.
        chosen = [a for a in chosen if a.running is not running] + [_Displacement(running)]
        if _admitted_after(cycle, job, replicas, chosen):
            return True
    return False


def _admitted_after(cycle: CycleState, job: JobRequest, replicas: int, chosen: list[_Displacement]) -> bool:
    """Admit JOB displacing CHOSEN if its queue's quota and the placement then hold it."""
    refunded = [(a.running.job.queue, a.milli(), a.running.placement.gpu_type) for a in chosen]
    for queue, milli, gpu_type in refunded:
        cycle.ledger.refund(queue, milli, gpu_type)
    allowance = cycle.ledger.allowance(job.queue, job.gpu_type, job.charge(replicas))
    for queue, milli, gpu_type in refunded:
        cycle.ledger.charge(queue, milli, gpu_type)
    if allowance.refusal is not None:
        return False
    # Per-GPU-type caps still bind: only products with room for the whole gang may take it. As on
    # every other path, it keeps off the nodes held for the reservation and to its tightest domain.
    gpu_types = cycle.gpu_types(job, allowance.blocked_gpu_types)
    request = cycle.consolidated(job.gang(replicas, gpu_types, job.excluded_nodes | cycle.reserved_against(job)))
    if not _fits_after(cycle, request, chosen):
        return False
    _carry_out(cycle, job, request, _RoomPlan((0, 0, 0, 0), tuple(chosen), DomainId(None, ())))
    return True


def _victim_words(victim: JobRequest, job: JobRequest, request: GangRequest) -> str:
    within = request.within
    where = f" in one {within.level}" if within is not None and within.level is not None else ""
    return preempted_message(victim, job, f"{request.total_gpus} GPUs{where}")
