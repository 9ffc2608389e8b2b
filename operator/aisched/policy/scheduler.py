"""One scheduling cycle: which pending jobs start where, which wait and why, who is preempted or resized.

`schedule(snapshot, jobs, queues, now)` is the whole decision. The controller
calls it with what it knows; the simulator calls it with what it simulates.
It reads the snapshot and leaves it as it found it.

The rules, in the order a cycle applies them:

1. Jobs naming a queue that does not exist wait (the default queue always exists).
2. Pending jobs are considered by priority, then fair share among queues, then
   FIFO (`queueing.fair_order`). A job that its queue's quota cannot hold waits;
   it does not hold up the jobs behind it.
3. A job that fits is admitted with a `Placement`; an elastic job starts with the
   most replicas between `min_replicas` and `replicas` that fit.
4. A job that does not fit for lack of free GPUs first tries to make room: it
   shrinks elastic jobs towards their minimum, then preempts whole gangs of lower
   priority (its own queue's, or queues borrowing beyond their quota), choosing
   the tightest domain and there the cheapest set of victims (fewest gangs, lowest
   priority). Never half a gang, never an equal or higher priority.
5. The first job that still cannot start gets a reservation: the GPUs it would
   get when running jobs end at their expected times. Later jobs may start only
   outside those GPUs, or inside them if they are expected to end before the
   reservation starts (backfill). Without estimates, the reserved domain stays
   closed to newcomers until the job fits.
6. Left-over GPUs grow running elastic jobs towards `max_replicas`, next to where
   they run, when no job of equal or higher priority waits for GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from aisched.api.common import CapacityType, TopologyLevel
from aisched.api.queue import DEFAULT_QUEUE
from aisched.api.training_job import TrainingJob
from aisched.policy.cluster import LEVEL_ORDER, ClusterSnapshot, DomainId, Toleration, level_rank
from aisched.policy.placement import (
    GangRequest,
    Placement,
    Unplaceable,
    place_gang,
    search_levels,
)
from aisched.policy.queueing import QUEUE_NOT_FOUND, QUOTA_EXCEEDED, QueueQuota, QuotaLedger, fair_order

RESERVED_FOR_HIGHER_PRIORITY = "ReservedForHigherPriority"
PREEMPTED = "Preempted"
SHRUNK = "Shrunk"
GROWN = "Grown"
_LONG_AGO = datetime.min.replace(tzinfo=UTC)  # a job with no creation time yet queues first among equals


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What the scheduler needs to know about one TrainingJob.

    A running job has a `placement`; the snapshot already counts its GPUs as used.
    """

    key: str
    """namespace/name"""
    queue: str
    priority: int
    created: datetime
    gpus_per_replica: int
    replicas: int
    min_replicas: int | None = None
    max_replicas: int | None = None
    gpu_type: str | None = None
    required_level: TopologyLevel | None = None
    preferred_level: TopologyLevel | None = None
    tolerations: tuple[Toleration, ...] = ()
    capacity_types: tuple[CapacityType, ...] = (CapacityType.ON_DEMAND,)
    excluded_nodes: frozenset[str] = frozenset()
    """Nodes it must not use (doomed capacity, a bind that failed there)."""
    expected_duration: timedelta | None = None
    placement: Placement | None = None
    started: datetime | None = None

    @property
    def running(self) -> bool:
        return self.placement is not None

    @property
    def elastic(self) -> bool:
        return self.min_replicas is not None and self.max_replicas is not None

    @classmethod
    def from_training_job(
        cls,
        job: TrainingJob,
        *,
        capacity_types: tuple[CapacityType, ...],
        placement: Placement | None = None,
        excluded_nodes: frozenset[str] = frozenset(),
    ) -> JobRequest:
        """What a TrainingJob asks for. `placement` (for a running gang) comes from its status and the snapshot:
        `Placement.of_nodes(status.placement.nodes, spec.gpus_per_replica, snapshot)`."""
        spec, meta = job.spec, job.metadata
        template_spec = spec.template.get("spec") or {}
        created = meta.get("creationTimestamp")
        return cls(
            key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            queue=spec.queue,
            priority=spec.priority,
            created=datetime.fromisoformat(created) if isinstance(created, str) else created or _LONG_AGO,
            gpus_per_replica=spec.gpus_per_replica,
            replicas=spec.replicas,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            gpu_type=spec.gpu_type,
            required_level=spec.topology.required_level,
            preferred_level=spec.topology.preferred_level,
            tolerations=tuple(Toleration.from_dict(t) for t in template_spec.get("tolerations") or ()),
            capacity_types=capacity_types,
            excluded_nodes=excluded_nodes,
            expected_duration=(
                timedelta(seconds=spec.expected_duration_seconds) if spec.expected_duration_seconds else None
            ),
            placement=placement,
            started=job.status.start_time if placement is not None else None,
        )

    def gang(self, replicas: int, gpu_types: frozenset[str] | None, excluded: frozenset[str]) -> GangRequest:
        return GangRequest(
            replicas=replicas,
            gpus_per_replica=self.gpus_per_replica,
            gpu_types=gpu_types,
            required_level=self.required_level,
            preferred_level=self.preferred_level,
            tolerations=self.tolerations,
            capacity_types=self.capacity_types,
            excluded_nodes=excluded,
        )


@dataclass(frozen=True, slots=True)
class Admission:
    key: str
    placement: Placement
    preempting: tuple[str, ...] = ()
    """Jobs preempted (or shrunk) to make room: their pods must go before this gang's can bind."""

    @property
    def replicas(self) -> int:
        return self.placement.replicas


@dataclass(frozen=True, slots=True)
class Waiting:
    key: str
    reason: str
    message: str
    expected_start: datetime | None = None
    """Set for the job GPUs are reserved for, when running jobs' end times are known."""


@dataclass(frozen=True, slots=True)
class Preemption:
    key: str
    by: str
    message: str
    reason: str = PREEMPTED


@dataclass(frozen=True, slots=True)
class Resize:
    """An elastic job's new gang: ranks that stay keep their nodes."""

    key: str
    placement: Placement
    reason: str
    message: str

    @property
    def replicas(self) -> int:
        return self.placement.replicas


@dataclass(frozen=True, slots=True)
class QueueUsage:
    used_gpus: int
    borrowed_gpus: int
    admitted_jobs: int
    pending_jobs: int


@dataclass(frozen=True, slots=True)
class ScheduleResult:
    admitted: tuple[Admission, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    preempted: tuple[Preemption, ...] = ()
    resized: tuple[Resize, ...] = ()
    queues: Mapping[str, QueueUsage] = field(default_factory=dict)


def schedule(
    snapshot: ClusterSnapshot, jobs: Sequence[JobRequest], queues: Sequence[QueueQuota], now: datetime
) -> ScheduleResult:
    """Decide one cycle. The snapshot is used as scratch space and restored before returning."""
    with snapshot.trial():
        return _Cycle(snapshot, jobs, queues, now).run()


@dataclass(slots=True)
class _Running:
    job: JobRequest
    placement: Placement
    end: datetime | None
    admitted_now: bool = False


@dataclass(frozen=True, slots=True)
class _Reservation:
    key: str
    priority: int
    start: datetime | None
    nodes: frozenset[str]
    domain: DomainId


@dataclass(slots=True)
class _Action:
    """Displacing one running job: preempt it, or drop some replicas of an elastic one."""

    running: _Running
    dropped: tuple[int, ...] | None = None
    """Ranks dropped by a shrink; None preempts the whole gang."""

    def gpus(self) -> dict[str, int]:
        placement = self.running.placement
        if self.dropped is None:
            return placement.gpus_by_node()
        released: dict[str, int] = {}
        for rank in self.dropped:
            node = placement.nodes[rank]
            released[node] = released.get(node, 0) + placement.gpus_per_replica
        return released


@dataclass(frozen=True, slots=True)
class _Plan:
    cost: tuple[int, int, int, int]
    actions: tuple[_Action, ...]
    domain: DomainId


class _Cycle:
    def __init__(
        self, snapshot: ClusterSnapshot, jobs: Sequence[JobRequest], queues: Sequence[QueueQuota], now: datetime
    ) -> None:
        self.snapshot = snapshot
        self.now = now
        self.quotas = {q.name: q for q in queues}
        self.quotas.setdefault(DEFAULT_QUEUE, QueueQuota.unlimited())
        self.ledger = QuotaLedger(self.quotas, snapshot.total_gpus)
        self.jobs = jobs
        self.running: dict[str, _Running] = {}
        for job in jobs:
            if job.placement is not None:
                end = job.started + job.expected_duration if job.started and job.expected_duration else None
                self.running[job.key] = _Running(job, job.placement, end)
                self.ledger.charge(job.queue, job.placement.total_gpus, job.placement.gpu_type)
        self.admitted: list[Admission] = []
        self.waiting: list[Waiting] = []
        self.preempted: list[Preemption] = []
        self.resized: dict[str, Resize] = {}
        self.reservation: _Reservation | None = None
        self.blocked_priorities: list[int] = []
        self.failures: dict[GangRequest, Unplaceable] = {}
        self.blocked: dict[tuple[object, ...], tuple[str, str]] = {}
        # Who could ever be displaced this cycle: lets most jobs skip the search for victims.
        self.lowest_priority = min((r.job.priority for r in self.running.values()), default=None)
        self.lowest_elastic_priority = min(
            (r.job.priority for r in self.running.values() if r.job.elastic), default=None
        )
        self.products = frozenset(p.gpu_product for p in snapshot.pools if p.gpu_product is not None)

    def run(self) -> ScheduleResult:
        pending = []
        for job in self.jobs:
            if job.placement is not None:
                continue
            if job.queue in self.quotas:
                pending.append(job)
            else:
                message = f"queue {job.queue} does not exist; create the Queue or pick an existing one"
                self.waiting.append(Waiting(job.key, QUEUE_NOT_FOUND, message))
        for job in fair_order(pending, self.ledger):
            self._consider(job)
        self._grow()
        return ScheduleResult(
            admitted=tuple(self.admitted),
            waiting=tuple(self.waiting),
            preempted=tuple(self.preempted),
            resized=tuple(self.resized.values()),
            queues=self._usage(),
        )

    # -- pending jobs --------------------------------------------------------------------------

    def _consider(self, job: JobRequest) -> None:
        g = job.gpus_per_replica
        fewest = job.min_replicas if job.elastic and job.min_replicas else job.replicas
        allowance = self.ledger.allowance(job.queue, job.gpu_type, fewest * g)
        if allowance.refusal is not None:
            if not self._preempt_within_quota(job, fewest):
                self.waiting.append(Waiting(job.key, QUOTA_EXCEEDED, allowance.refusal))
            return
        most = job.replicas if allowance.max_gpus is None else min(job.replicas, allowance.max_gpus // g)
        gpu_types = self._gpu_types(job, allowance.blocked_gpu_types)
        reserved = self._reserved_against(job)
        # Jobs alike in everything placement and preemption look at share one verdict until GPUs are released.
        shape = (
            job.queue,
            job.priority,
            g,
            most,
            fewest,
            gpu_types,
            job.required_level,
            job.tolerations,
            job.capacity_types,
            job.excluded_nodes,
            reserved,
            job.expected_duration is None,
        )
        verdict = self.blocked.get(shape)
        if verdict is not None:
            self.blocked_priorities.append(job.priority)
            self.waiting.append(Waiting(job.key, *verdict))
            return
        request = job.gang(most, gpu_types, job.excluded_nodes | reserved)
        outcome = self._place_most(request, fewest)
        if isinstance(outcome, Placement):
            self._admit(job, self._within_type_quota(job, request, outcome, fewest))
            return
        if not outcome.transient:
            self.waiting.append(Waiting(job.key, outcome.reason, outcome.message))
            return
        smallest = request if most == fewest else replace(request, replicas=fewest)
        if self._make_room(job, smallest):
            return
        self.blocked_priorities.append(job.priority)
        if reserved and isinstance(self._place(replace(smallest, excluded_nodes=job.excluded_nodes)), Placement):
            verdict = (RESERVED_FOR_HIGHER_PRIORITY, self._backfill_refusal(job))
        elif self.reservation is None and (reservation := self._reserve(job, smallest)) is not None:
            self.reservation = reservation
            message = f"{outcome.message}; {self._reservation_words()}"
            self.waiting.append(Waiting(job.key, outcome.reason, message, reservation.start))
            return
        else:
            verdict = (outcome.reason, outcome.message)
        self.blocked[shape] = verdict
        self.waiting.append(Waiting(job.key, *verdict))

    def _within_type_quota(self, job: JobRequest, request: GangRequest, placement: Placement, fewest: int) -> Placement:
        """Trim a gang that may take any product to what its queue's cap on the chosen product allows.

        Products without room for `fewest` replicas were excluded before placing, so the trimmed
        gang still has at least `fewest` replicas.
        """
        product = placement.gpu_type
        cap = self.ledger.quotas[job.queue].gpu_type_quotas.get(product) if product else None
        if cap is None or product is None:
            return placement
        room = cap - self.ledger.used_by_type[job.queue][product]
        if placement.total_gpus <= room:
            return placement
        replicas = max(fewest, room // job.gpus_per_replica)
        trimmed = self._place_most(replace(request, replicas=replicas, gpu_types=frozenset({product})), fewest)
        return trimmed if isinstance(trimmed, Placement) else placement

    def _gpu_types(self, job: JobRequest, blocked: frozenset[str]) -> frozenset[str] | None:
        if job.gpu_type is not None:
            return frozenset({job.gpu_type})
        if blocked:
            return self.products - blocked
        return None

    def _place(self, request: GangRequest) -> Placement | Unplaceable:
        """place_gang, remembering failures: within a cycle free GPUs only shrink until a release."""
        known = self.failures.get(request)
        if known is not None:
            return known
        outcome = place_gang(request, self.snapshot)
        if isinstance(outcome, Unplaceable):
            self.failures[request] = outcome
        return outcome

    def _place_most(self, request: GangRequest, fewest: int) -> Placement | Unplaceable:
        """The placement with the most replicas in [fewest, request.replicas]; fitting is monotone in replicas."""
        outcome = self._place(request)
        if isinstance(outcome, Placement) or request.replicas <= fewest:
            return outcome
        smallest = self._place(replace(request, replicas=fewest))
        if isinstance(smallest, Unplaceable):
            return smallest
        best, low, high = smallest, fewest + 1, request.replicas - 1
        while low <= high:
            middle = (low + high) // 2
            attempt = self._place(replace(request, replicas=middle))
            if isinstance(attempt, Placement):
                best, low = attempt, middle + 1
            else:
                high = middle - 1
        return best

    def _admit(self, job: JobRequest, placement: Placement, preempting: tuple[str, ...] = ()) -> None:
        self.snapshot.allocate(placement.gpus_by_node())
        self.ledger.charge(job.queue, placement.total_gpus, placement.gpu_type)
        self.admitted.append(Admission(job.key, placement, preempting))
        end = self.now + job.expected_duration if job.expected_duration else None
        self.running[job.key] = _Running(job, placement, end, admitted_now=True)

    # -- backfill ------------------------------------------------------------------------------

    def _reserved_against(self, job: JobRequest) -> frozenset[str]:
        """Nodes this job must keep off so as not to delay the reservation."""
        reservation = self.reservation
        if reservation is None or reservation.key == job.key:
            return frozenset()
        if (
            reservation.start is not None
            and job.expected_duration is not None
            and self.now + job.expected_duration <= reservation.start
        ):
            return frozenset()
        return reservation.nodes

    def _reserve(self, job: JobRequest, request: GangRequest) -> _Reservation | None:
        """Where and from when `job` fits as running jobs end, soonest-ending first."""
        ending = sorted(
            self.running.values(),
            key=lambda r: (r.end is None, r.end or self.now, r.job.started or self.now, r.job.key),
        )

        def fits_after(count: int) -> Placement | None:
            released: dict[str, int] = defaultdict(int)  # one update per node, however many jobs end there
            for running in ending[:count]:
                for name, gpus in running.placement.gpus_by_node().items():
                    released[name] += gpus
            with self.snapshot.trial():
                self.snapshot.release(released)
                outcome = place_gang(request, self.snapshot)
            return outcome if isinstance(outcome, Placement) else None

        if not ending or fits_after(len(ending)) is None:
            return None
        # It cannot fit before enough GPUs are free in all: start the search there.
        missing = request.total_gpus - (self.snapshot.total_gpus - self.snapshot.used_total)
        low = 1
        while low < len(ending) and missing > ending[low - 1].placement.total_gpus:
            missing -= ending[low - 1].placement.total_gpus
            low += 1
        high = len(ending)
        while low < high:
            middle = (low + high) // 2
            if fits_after(middle) is None:
                low = middle + 1
            else:
                high = middle
        placement = fits_after(low)
        assert placement is not None
        ends = [r.end for r in ending[:low]]
        if all(end is not None for end in ends):
            start = max([self.now, *(end for end in ends if end is not None)])
            return _Reservation(job.key, job.priority, start, frozenset(placement.nodes), placement.domain)
        # Without end times the nodes it will get are a guess: hold the whole domain.
        nodes = frozenset(self.snapshot.names_in(placement.domain))
        return _Reservation(job.key, job.priority, None, nodes, placement.domain)

    def _reservation_words(self) -> str:
        reservation = self.reservation
        assert reservation is not None
        where = _domain_words(reservation.domain)
        if reservation.start is None:
            return f"GPUs in {where} are held for it as they free up"
        return f"expected to start by {reservation.start:%Y-%m-%d %H:%M} UTC in {where}, where GPUs are held for it"

    def _backfill_refusal(self, job: JobRequest) -> str:
        reservation = self.reservation
        assert reservation is not None
        head = (
            f"the free GPUs that fit it are held for {reservation.key} (priority {reservation.priority}) "
            f"in {_domain_words(reservation.domain)}"
        )
        if reservation.start is None:
            return f"{head} until it starts"
        if job.expected_duration is None:
            return f"{head} from {reservation.start:%Y-%m-%d %H:%M} UTC; set an expected duration to backfill"
        return f"{head} from {reservation.start:%Y-%m-%d %H:%M} UTC, and this job would run past that"

    # -- preemption ----------------------------------------------------------------------------

    def _displaceable(self, job: JobRequest) -> list[_Action]:
        """Everything `job` may take GPUs from: shrinks first, then whole gangs."""
        lowest, elastic = self.lowest_priority, self.lowest_elastic_priority
        if (lowest is None or lowest >= job.priority) and (elastic is None or elastic > job.priority):
            return []
        shrinks: list[_Action] = []
        preemptions: list[_Action] = []
        for running in self.running.values():
            other = running.job
            if running.admitted_now or other.key == job.key or other.priority > job.priority:
                continue
            if other.queue != job.queue and self.ledger.borrowed(other.queue) == 0:
                continue  # another team's guaranteed quota
            floor = self._shrink_floor(other, job.priority)
            if floor < running.placement.replicas:
                shrinks.append(_Action(running, dropped=()))
            if other.priority < job.priority:
                preemptions.append(_Action(running))
        shrinks.sort(key=lambda a: (a.running.job.priority, -a.running.job.created.timestamp(), a.running.job.key))
        preemptions.sort(
            key=lambda a: (
                a.running.job.priority,
                -(a.running.job.started or a.running.job.created).timestamp(),
                a.running.job.key,
            )
        )
        return shrinks + preemptions

    @staticmethod
    def _shrink_floor(job: JobRequest, for_priority: int) -> int:
        """Fewest replicas an elastic job may be shrunk to for a job of `for_priority`."""
        if not job.elastic or job.min_replicas is None:
            return 1 << 30
        if for_priority > job.priority:
            return job.min_replicas
        return max(job.min_replicas, job.replicas)  # equal priority takes back only opportunistic growth

    def _make_room(self, job: JobRequest, request: GangRequest) -> bool:
        candidates = self._displaceable(job)
        if not candidates:
            return False
        for level in search_levels(request):
            domains = sorted(
                {d for a in candidates for d in self._domains_at(a.running.placement.nodes, level)},
                key=lambda d: tuple((p is None, p or "") for p in d.path),
            )
            best: _Plan | None = None
            for domain in domains:
                plan = self._plan(job, replace(request, within=domain), candidates)
                if plan is not None and (best is None or plan.cost < best.cost):
                    best = plan
            if best is not None:
                self._carry_out(job, replace(request, within=best.domain), best)
                return True
        return False

    def _domains_at(self, nodes: Iterable[str], level: TopologyLevel | None) -> set[DomainId]:
        if level is None:
            return {DomainId(None, ())}
        domains = set()
        for name in nodes:
            if name in self.snapshot:
                path = self.snapshot.node(name).path(level)
                if path is not None:
                    domains.add(DomainId(level, path))
        return domains

    def _plan(self, job: JobRequest, request: GangRequest, candidates: Sequence[_Action]) -> _Plan | None:
        """Displacements inside request.within that let the job fit there.

        Cheapest first: lowest victim priority, then fewest gangs, then least work lost.
        """
        within = request.within
        assert within is not None
        actions: list[_Action] = []
        seen: set[str] = set()
        for candidate in candidates:
            action = self._restricted(candidate, job, within)
            if action is None:
                continue
            key = candidate.running.job.key
            if action.dropped is None and key in seen:
                actions = [a for a in actions if a.running.job.key != key]
            seen.add(key)
            actions.append(action)
            if self._fits_after(request, actions):
                break
        else:
            return None
        # Keep only what is needed: try to spare each displacement, highest priority first.
        for action in sorted(actions, key=lambda a: -a.running.job.priority):
            rest = [a for a in actions if a is not action]
            if rest and self._fits_after(request, rest):
                actions = rest
        preempted = [a for a in actions if a.dropped is None]
        cost = (
            max((a.running.job.priority for a in preempted), default=-(1 << 62)),
            len(preempted),
            sum(self._work_lost(a.running) for a in preempted),
            sum(len(a.dropped or ()) for a in actions),
        )
        return _Plan(cost, tuple(actions), within)

    def _work_lost(self, running: _Running) -> int:
        """GPU-seconds a preemption throws away (at most: checkpoints may save some)."""
        started = running.job.started or self.now
        return running.placement.total_gpus * max(0, int((self.now - started).total_seconds()))

    def _restricted(self, candidate: _Action, job: JobRequest, within: DomainId) -> _Action | None:
        """The candidate's displacement as it helps inside `within`, or None when it has nothing there."""
        placement = candidate.running.placement
        inside = [
            rank
            for rank, name in enumerate(placement.nodes)
            if name in self.snapshot and within.contains(self._node_domain(name))
        ]
        if not inside:
            return None
        if candidate.dropped is None:
            return candidate
        floor = self._shrink_floor(candidate.running.job, job.priority)
        spare = placement.replicas - floor
        return _Action(candidate.running, dropped=tuple(sorted(inside, reverse=True)[:spare]))

    def _node_domain(self, name: str) -> DomainId:
        path = self.snapshot.node(name).path(TopologyLevel.NODE)
        return DomainId(TopologyLevel.NODE, path or (name,))

    def _fits_after(self, request: GangRequest, actions: Sequence[_Action]) -> bool:
        with self.snapshot.trial():
            for action in actions:
                self.snapshot.release(action.gpus())
            return isinstance(place_gang(request, self.snapshot), Placement)

    def _carry_out(self, job: JobRequest, request: GangRequest, plan: _Plan) -> None:
        for action in plan.actions:
            running = action.running
            other = running.job
            released = action.gpus()
            self.snapshot.release(released)
            self.ledger.refund(other.queue, sum(released.values()), running.placement.gpu_type)
            if action.dropped is None:
                del self.running[other.key]
                self.resized.pop(other.key, None)
                self.preempted.append(Preemption(other.key, job.key, self._victim_words(job, request)))
            else:
                kept = tuple(n for rank, n in enumerate(running.placement.nodes) if rank not in action.dropped)
                running.placement = Placement.of_nodes(kept, running.placement.gpus_per_replica, self.snapshot)
                self.resized[other.key] = Resize(
                    other.key,
                    running.placement,
                    SHRUNK,
                    f"shrunk from {len(kept) + len(action.dropped)} to {len(kept)} replicas to make room for "
                    f"{job.key} (priority {job.priority})",
                )
        self.failures.clear()  # GPUs were released: earlier failures may fit now
        self.blocked.clear()
        placement = place_gang(request, self.snapshot)
        assert isinstance(placement, Placement), "the plan was checked on the same snapshot"
        self._admit(job, placement, tuple(a.running.job.key for a in plan.actions))

    def _preempt_within_quota(self, job: JobRequest, replicas: int) -> bool:
        """A job over its queue's quota takes it back from lower-priority gangs of the same queue.

        Victims go lowest priority first, most recently started first (least work lost), and only
        as many as both the quota and the placement need; nothing changes unless the job then fits.
        """
        victims = sorted(
            (
                r
                for r in self.running.values()
                if r.job.queue == job.queue and r.job.priority < job.priority and not r.admitted_now
            ),
            key=lambda r: (r.job.priority, -(r.job.started or r.job.created).timestamp(), r.job.key),
        )
        chosen: list[_Action] = []
        for running in victims:
            chosen.append(_Action(running))
            refunded = [(a.running.job.queue, sum(a.gpus().values()), a.running.placement.gpu_type) for a in chosen]
            for queue, gpus, gpu_type in refunded:
                self.ledger.refund(queue, gpus, gpu_type)
            allowance = self.ledger.allowance(job.queue, job.gpu_type, replicas * job.gpus_per_replica)
            for queue, gpus, gpu_type in refunded:
                self.ledger.charge(queue, gpus, gpu_type)
            if allowance.refusal is not None:
                continue
            # Per-GPU-type caps still bind: only products with room for the whole gang may take it.
            request = job.gang(replicas, self._gpu_types(job, allowance.blocked_gpu_types), job.excluded_nodes)
            if self._fits_after(request, chosen):
                self._carry_out(job, request, _Plan((0, 0, 0, 0), tuple(chosen), DomainId(None, ())))
                return True
        return False

    @staticmethod
    def _victim_words(job: JobRequest, request: GangRequest) -> str:
        within = request.within
        where = f" in one {within.level}" if within is not None and within.level is not None else ""
        return (
            f"preempted by {job.key} (priority {job.priority}), which needs "
            f"{request.total_gpus} GPUs{where}; it will be queued again"
        )

    # -- elastic growth ------------------------------------------------------------------------

    def _grow(self) -> None:
        blocked = max(self.blocked_priorities, default=None)
        growing = sorted(
            (r for r in self.running.values() if r.job.elastic and not r.admitted_now and r.job.queue in self.quotas),
            key=lambda r: (-r.job.priority, r.job.created, r.job.key),
        )
        for running in growing:
            job = running.job
            if blocked is not None and blocked >= job.priority:
                continue
            current = running.placement.replicas
            room = (job.max_replicas or current) - current
            allowance = self.ledger.allowance(job.queue, running.placement.gpu_type, job.gpus_per_replica)
            if allowance.max_gpus is not None:
                room = min(room, allowance.max_gpus // job.gpus_per_replica)
            if room < 1 or allowance.refusal is not None:
                continue
            gpu_types = frozenset({running.placement.gpu_type}) if running.placement.gpu_type else None
            request = job.gang(room, gpu_types, job.excluded_nodes | self._reserved_against(job))
            for domain in self._enclosing(running.placement, job.required_level):
                extra = self._place_most(replace(request, within=domain), 1)
                if isinstance(extra, Placement):
                    self._extend(running, extra, current)
                    break

    def _enclosing(self, placement: Placement, required: TopologyLevel | None) -> list[DomainId]:
        """The placement's domain and the wider ones around it, up to the required level."""
        known = [n for n in placement.nodes if n in self.snapshot]
        if not known:
            return []
        node = self.snapshot.node(known[0])
        widest = level_rank(required)
        domains = []
        for level in (*LEVEL_ORDER, None):
            if level_rank(level) < level_rank(placement.level) or level_rank(level) > widest:
                continue
            path = () if level is None else node.path(level)
            if path is not None:
                domains.append(DomainId(level, path))
        return domains

    def _extend(self, running: _Running, extra: Placement, current: int) -> None:
        job = running.job
        self.snapshot.allocate(extra.gpus_by_node())
        self.ledger.charge(job.queue, extra.total_gpus, extra.gpu_type)
        nodes = running.placement.nodes + extra.nodes
        running.placement = Placement.of_nodes(nodes, job.gpus_per_replica, self.snapshot)
        self.resized[job.key] = Resize(
            job.key,
            running.placement,
            GROWN,
            f"grown from {current} to {len(nodes)} replicas: {extra.total_gpus} GPUs were idle",
        )

    # -- report --------------------------------------------------------------------------------

    def _usage(self) -> dict[str, QueueUsage]:
        admitted: dict[str, int] = dict.fromkeys(self.quotas, 0)
        pending: dict[str, int] = dict.fromkeys(self.quotas, 0)
        for running in self.running.values():
            if running.job.queue in admitted:
                admitted[running.job.queue] += 1
        keys = {w.key for w in self.waiting}
        for job in self.jobs:
            if job.key in keys and job.queue in pending:
                pending[job.queue] += 1
        return {
            name: QueueUsage(
                used_gpus=self.ledger.used[name],
                borrowed_gpus=self.ledger.borrowed(name),
                admitted_jobs=admitted[name],
                pending_jobs=pending[name],
            )
            for name in sorted(self.quotas)
        }


def _domain_words(domain: DomainId) -> str:
    if domain.level is None:
        return "the cluster"
    return f"{domain.level} {domain.label}"
