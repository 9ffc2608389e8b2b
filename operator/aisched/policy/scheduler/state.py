"""What one cycle knows and changes as its stages run: the scratch snapshot, the quota ledger,
the gangs running, and the decisions so far.

The stages (see :mod:`aisched.policy.scheduler.cycle`) read and change a `CycleState`; the
primitives they share (placing a gang, admitting one) live here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from aisched.api.queue import DEFAULT_QUEUE
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import (
    GangRequest,
    Placement,
    Unplaceable,
    hold,
    place_gang,
    products_by_rank,
    tightest_possible_level,
)
from aisched.policy.queueing import MILLI, QueueQuota, QuotaLedger
from aisched.policy.saturating_time import time_after
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.results import (
    Admission,
    Preemption,
    QueueUsage,
    ReclaimedReplica,
    Resize,
    ScheduleResult,
    Waiting,
)
from aisched.policy.scheduler.service import (
    FIRST_BAND_GPU_SECONDS,
    attained_gpu_seconds,
    ran_long_enough,
    service_band,
)
from aisched.policy.shared_room import SharePart
from aisched.policy.topology import DomainId, Level


@dataclass(slots=True)
class RunningGang:
    """A gang that holds GPUs in this cycle: running before it, or admitted in it."""

    job: JobRequest
    placement: Placement
    end: datetime | None
    admitted_now: bool = False


@dataclass(frozen=True, slots=True)
class HeldReplica:
    """One running InferenceService replica on one node, holding whole GPUs, a fraction's part of one GPU
    (PART) or a MIG instance (MIG_PROFILE): what a lending queue may take back when its service's queue
    borrows (`preemption`), knowing what its going frees."""

    service: str
    """namespace/name of the InferenceService."""
    pod: str
    node: str
    gpus: int
    priority: int
    created: datetime | None = None
    """When its pod was made; None: not known (newest, ties to the later name)."""
    part: SharePart | None = None
    """The part of a GPU it holds, as its claim is allocated (the device known): going gives it back."""
    mig_profile: str | None = None
    """The MIG instance it holds: going frees one of this profile on its node."""

    @property
    def shared(self) -> bool:
        return self.part is not None or self.mig_profile is not None


@dataclass(frozen=True, slots=True)
class HeldGpus:
    """GPU-equivalents (thousandths) a queue's pods hold that are no gang of this cycle's (an
    InferenceService's replicas): charged to the queue, and never preempted by the cycle but for a
    REPLICA the lending queue reclaims while the queue borrows."""

    queue: str
    milli: int
    gpu_type: str | None = None
    replica: HeldReplica | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPUs held for the first job that could not start, from when running jobs are expected to free them."""

    key: str
    priority: int
    start: datetime | None
    nodes: frozenset[str]
    domain: DomainId


# Most gangs one cycle admits (rule 7 of `cycle`): what the operator launches between two cycles.
ADMISSIONS_PER_CYCLE = 256


class CycleState:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        jobs: Sequence[JobRequest],
        queues: Sequence[QueueQuota],
        now: datetime,
        *,
        admissions_per_cycle: int = ADMISSIONS_PER_CYCLE,
        first_band_gpu_seconds: float = FIRST_BAND_GPU_SECONDS,
        held_elsewhere: Sequence[HeldGpus] = (),
    ) -> None:
        self.snapshot = snapshot
        self.now = now
        self.admissions_per_cycle = admissions_per_cycle
        self.first_band_gpu_seconds = first_band_gpu_seconds
        self.deferred: tuple[str, ...] = ()
        """Pending jobs the cycle did not reach, having admitted its most: the next cycle's first."""
        self.quotas = {q.name: q for q in queues}
        self.quotas.setdefault(DEFAULT_QUEUE, QueueQuota.unlimited())
        self.ledger = QuotaLedger(self.quotas, snapshot.total_gpus)
        self.jobs = jobs
        self.running: dict[str, RunningGang] = {}
        for job in jobs:
            if job.placement is not None:
                end = time_after(job.started, job.expected_duration) if job.started and job.expected_duration else None
                self.running[job.key] = RunningGang(job, job.placement, end)
                self.ledger.charge(job.queue, job.held_milli, job.placement.gpu_type)
        for held in held_elsewhere:  # what the queue's other kinds of work hold: its quota is one
            self.ledger.charge(held.queue, held.milli, held.gpu_type)
        self.service_replicas = _service_replicas(held_elsewhere, snapshot, now)
        """Running replicas a lending queue may reclaim (`preemption`), as one-replica gangs, by key."""
        self.reclaimed: list[ReclaimedReplica] = []
        self.admitted: list[Admission] = []
        self.waiting: list[Waiting] = []
        self.preempted: list[Preemption] = []
        self.resized: dict[str, Resize] = {}
        self.reservation: Reservation | None = None
        self.waiting_for_gpus: list[tuple[int, str | None]] = []
        """Priority and GPU product (None: any) of each job left waiting for GPUs: growth gives no GPUs
        to jobs below them, and services' replicas below them leave them the GPUs they could use."""
        self.failures: dict[GangRequest, Unplaceable] = {}
        self.blocked: dict[tuple[object, ...], tuple[str, str]] = {}
        """(reason, message) a job waits for, by the shape of what it asks: alike jobs share it."""
        # Who could ever be displaced this cycle: lets most jobs skip the search for victims.
        self.lowest_priority = min((r.job.priority for r in self.running.values()), default=None)
        self.lowest_elastic_priority = min(
            (r.job.priority for r in self.running.values() if r.job.elastic), default=None
        )
        self.tightest: dict[GangRequest, Level | None] = {}
        self._bands: dict[str, int] = {}
        self.highest_running_band = max((self.band(r.job) for r in self.running.values()), default=0)
        self.slices = 0
        self.released_nodes: set[str] = set()
        """Nodes where this cycle stopped or shrank a running gang: their GPUs free only once its stops land."""
        """Gangs preempted this cycle for time-slicing (`MAX_SLICES_PER_CYCLE`)."""
        self.displaceable: dict[tuple[int, int, bool, str | None], tuple[list[RunningGang], list[RunningGang]]] = {}
        """Making room's candidates (shrinkable, preemptible) by (priority, band, slicing) of the job
        making room, cheapest first, as the cycle began: the jobs alike share one list."""
        self.domains_of: dict[tuple[tuple[str, ...], Level | None], list[DomainId]] = {}
        """The domains of a level a set of nodes is in, in the nodes' order."""
        self.products = frozenset(p.gpu_product for p in snapshot.pools if p.gpu_product is not None)

    def consolidated(self, request: GangRequest) -> GangRequest:
        """A gang that names no required level is held to the tightest domain that could ever hold it.

        A gang spread over more nodes, racks or zones than it needs runs slower for as long as it
        runs (by up to 2-3x for communication-heavy models, as Pollux measured), while the wait
        for its domain is bounded: time-slicing and reservation open one.
        """
        if request.required_level is not None or request.replicas < 2:
            return request
        return replace(request, required_level=self.tightest_level(request))

    def tightest_level(self, request: GangRequest) -> Level | None:
        """The tightest level at which some domain could hold the gang were the cluster empty."""
        shape = replace(request, excluded_nodes=frozenset())
        if shape not in self.tightest:
            self.tightest[shape] = tightest_possible_level(shape, self.snapshot)
        return self.tightest[shape]

    def band(self, job: JobRequest) -> int:
        """The job's band of attained service now: lower goes first among equal priorities.

        Worked out once per job and cycle (`now` does not move within one): making room asks it of
        every running gang for every job that may time-slice."""
        band = self._bands.get(job.key)
        if band is None:
            band = self._bands[job.key] = service_band(attained_gpu_seconds(job, self.now), self.first_band_gpu_seconds)
        return band

    def turn(self, job: JobRequest) -> int:
        """Where JOB goes among pending jobs of its priority, lowest first: its band of attained service,
        before every band when an interruption set it back (it resumes ahead of newcomers)."""
        return -1 if job.set_back else self.band(job)

    def sliceable_for(self, running: RunningGang, job: JobRequest) -> bool:
        """May `running` be preempted for `job`, an equal-priority job with less attained service?

        Only when its queue time-slices, it has run its queue's minimum run time, and `job` is in a
        strictly lower band, so two jobs never preempt each other back and forth.
        """
        other = running.job
        quota = self.quotas.get(other.queue)
        if quota is None or quota.min_run_seconds is None or other.priority != job.priority:
            return False
        if not ran_long_enough(other, self.now, quota.min_run_seconds):
            return False
        return self.band(other) > self.band(job)

    def gpu_types(self, job: JobRequest, blocked: frozenset[str]) -> frozenset[str] | None:
        if job.gpu_type is not None:
            return frozenset({job.gpu_type})
        if blocked:
            return self.products - blocked
        return None

    def reserved_against(self, job: JobRequest) -> frozenset[str]:
        """Nodes this job must keep off so as not to delay the reservation."""
        reservation = self.reservation
        if reservation is None or reservation.key == job.key:
            return frozenset()
        if (
            reservation.start is not None
            and job.expected_duration is not None
            and time_after(self.now, job.expected_duration) <= reservation.start
        ):
            return frozenset()
        return reservation.nodes

    def place(self, request: GangRequest) -> Placement | Unplaceable:
        """place_gang, remembering failures: within a cycle free GPUs only shrink until a release."""
        known = self.failures.get(request)
        if known is not None:
            return known
        outcome = place_gang(request, self.snapshot)
        if isinstance(outcome, Unplaceable):
            self.failures[request] = outcome
        return outcome

    def place_most(self, request: GangRequest, fewest: int) -> Placement | Unplaceable:
        """The placement with the most replicas in [fewest, request.replicas]; fitting is monotone in replicas."""
        outcome = self.place(request)
        if isinstance(outcome, Placement) or request.replicas <= fewest:
            return outcome
        smallest = self.place(replace(request, replicas=fewest))
        if isinstance(smallest, Unplaceable):
            return smallest
        best, low, high = smallest, fewest + 1, request.replicas - 1
        while low <= high:
            middle = (low + high) // 2
            attempt = self.place(replace(request, replicas=middle))
            if isinstance(attempt, Placement):
                best, low = attempt, middle + 1
            else:
                high = middle - 1
        return best

    def admit(self, job: JobRequest, placement: Placement, preempting: tuple[str, ...] = ()) -> None:
        hold(self.snapshot, placement)
        if placement.gpu_type is None and job.spread is not None:  # a service's replicas over several products
            for product, count in Counter(products_by_rank(placement, self.snapshot)).items():
                self.ledger.charge(job.queue, job.charge(count), product)
        else:
            self.ledger.charge(job.queue, job.charge(placement.replicas), placement.gpu_type)
        self.admitted.append(Admission(job.key, placement, preempting))
        end = time_after(self.now, job.expected_duration) if job.expected_duration else None
        self.running[job.key] = RunningGang(job, placement, end, admitted_now=True)

    def result(self) -> ScheduleResult:
        return ScheduleResult(
            admitted=tuple(self.admitted),
            waiting=tuple(self.waiting),
            preempted=tuple(self.preempted),
            resized=tuple(self.resized.values()),
            queues=self._usage(),
            deferred=self.deferred,
            reserved_nodes=self.reservation.nodes if self.reservation is not None else frozenset(),
            reserved_priority=self.reservation.priority if self.reservation is not None else None,
            reclaimed=tuple(self.reclaimed),
        )

    def _usage(self) -> dict[str, QueueUsage]:
        admitted: dict[str, int] = dict.fromkeys(self.quotas, 0)
        pending: dict[str, int] = dict.fromkeys(self.quotas, 0)
        for running in self.running.values():
            if running.job.queue in admitted:
                admitted[running.job.queue] += 1
        keys = {w.key for w in self.waiting} | set(self.deferred)
        for job in self.jobs:
            if job.key in keys and job.queue in pending:
                pending[job.queue] += 1
        return {
            name: QueueUsage(
                used_gpus=-(-self.ledger.used[name] // MILLI),
                borrowed_gpus=-(-self.ledger.borrowed(name) // MILLI),
                used_milli=self.ledger.used[name],
                admitted_jobs=admitted[name],
                pending_jobs=pending[name],
                room_gpus=None if (room := self.ledger.room(name)) is None else room // MILLI,
                room_milli=room,
                quota=self.quotas[name],
            )
            for name in sorted(self.quotas)
        }


def _service_replicas(held: Sequence[HeldGpus], snapshot: ClusterSnapshot, now: datetime) -> dict[str, RunningGang]:
    """The replicas in HELD as running one-replica gangs of their queue, for making room to weigh beside
    gangs (charged through HELD already, so never charged again)."""
    found: dict[str, RunningGang] = {}
    for entry in held:
        replica = entry.replica
        if replica is None or not (replica.gpus > 0 or replica.shared):
            continue
        on_mig = replica.mig_profile is not None and replica.node in snapshot.shared.mig_nodes
        if replica.node not in snapshot and not on_mig:
            continue
        created = replica.created or now
        gpus = 1 if replica.shared else replica.gpus
        placement = replace(
            Placement.of_nodes((replica.node,), gpus, snapshot),
            gpu_type=entry.gpu_type,  # as charged: what it gives back goes to the same product's quota
            parts=(replica.part,) if replica.part is not None else (),
            mig_profile=replica.mig_profile,
        )
        job = JobRequest(
            key=f"{replica.service}{REPLICA_KEY_MARK}{replica.pod}",
            queue=entry.queue,
            priority=replica.priority,
            created=created,
            gpus_per_replica=gpus,
            replicas=1,
            placement=placement,
            started=created,
            milli_per_replica=entry.milli,
            replica_set=True,
        )
        found[job.key] = RunningGang(job, placement, None)
    return found


REPLICA_KEY_MARK = "@replicas/"
"""Between a service's namespace/name and its pod's name in a replica's key: no TrainingJob key has '@'."""
