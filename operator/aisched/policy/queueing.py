"""Queues: GPU quotas with borrowing inside a cohort, and the fair order in which pending jobs are considered.

Quota rules (quotas in GPUs; the ledger counts GPU-equivalents in thousandths, `MILLI` to a GPU, so that
a worker holding 30% of a GPU is charged 300 and three of them fit a quota of one GPU):

- A queue may always use up to its nominal quota.
- Beyond that it borrows: only when borrowing is enabled and it is in a cohort,
  only up to its borrowing limit, and only while the cohort as a whole stays
  within the sum of its members' nominal quotas (it borrows what others leave idle).
- Per-GPU-type quotas are hard caps inside the nominal quota; they are not borrowed.
- The default queue exists without a Queue object; it then has no quota at all. The operator
  never leaves it so: where nobody wrote it, it takes `locked_default_queue`, which grants nothing.

Order: higher priority first; among equal priorities the lowest band of attained
service (see `scheduler.service`), then the queue with the lowest weighted share
(used / nominal / weight); FIFO inside a band of a queue.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from aisched.api.queue import DEFAULT_MIN_RUN_SECONDS, DEFAULT_QUEUE, Queue, QueueSpec

QUOTA_EXCEEDED = "QuotaExceeded"
MILLI = 1000
"""GPU-equivalents of one whole GPU in the ledger."""
QUEUE_NOT_FOUND = "QueueNotFound"


def locked_default_queue(name: str = DEFAULT_QUEUE) -> Queue:
    """The default queue as the operator makes it where nobody wrote one: it grants nothing.

    Every job that names no queue lands in it, whoever submits it, so it gives none of them
    rights a platform team did not write: no GPUs of its own and no cohort to borrow from
    (nominalGPUs 0), no priority above the default (maxPriority 0: nobody preempts by asking
    more) and no toleration in a job's template (allowedTolerations []: nobody reaches nodes
    tainted for a team). It takes every namespace, being everyone's default. A platform team
    writes the default queue it wants (the chart's `queues`), which the operator leaves alone.
    """
    spec = QueueSpec(nominal_gpus=0, max_priority=0, allowed_tolerations=[])
    return Queue(metadata={"name": name}, spec=spec)


def stored_queue(queues: Mapping[str, dict[str, Any]], name: str) -> dict[str, Any] | None:
    """Queue NAME as stored in QUEUES; the default queue, where nobody wrote one, as the locked one
    the operator creates (it grants nothing), never an open one. Both kinds of work read it so."""
    queue = queues.get(name)
    if queue is None and name == DEFAULT_QUEUE:
        return locked_default_queue().to_wire()
    return queue


def with_locked_default(quotas: Sequence[QueueQuota]) -> list[QueueQuota]:
    """QUOTAS, with the locked default queue where they have none (it is missing, or unreadable).

    The scheduler takes a default queue without a quota as one with no limit, which suits the
    simulator; the operator passes this, so deleting the default queue opens it to no one.
    """
    if any(q.name == DEFAULT_QUEUE for q in quotas):
        return list(quotas)
    return [*quotas, QueueQuota.from_queue(locked_default_queue())]


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """What a queue may use; `nominal_gpus` None means no limit."""

    name: str
    nominal_gpus: int | None
    gpu_type_quotas: Mapping[str, int] = field(default_factory=dict)
    weight: int = 1
    cohort: str | None = None
    borrowing_enabled: bool = True
    borrowing_limit: int | None = None
    """Most GPUs borrowed at once; None: no limit."""
    min_run_seconds: float | None = DEFAULT_MIN_RUN_SECONDS
    """Seconds a gang runs before it may be preempted for attained service; None: never (no time-slicing)."""

    @classmethod
    def from_queue(cls, queue: Queue) -> QueueQuota:
        spec = queue.spec
        return cls(
            name=str(queue.metadata["name"]),
            nominal_gpus=spec.nominal_gpus,
            gpu_type_quotas={q.gpu_type: q.gpus for q in spec.gpu_type_quotas or ()},
            weight=spec.weight,
            cohort=spec.cohort,
            borrowing_enabled=spec.borrowing.enabled,
            borrowing_limit=spec.borrowing.limit_gpus,
            min_run_seconds=spec.time_slicing.min_run_seconds if spec.time_slicing.enabled else None,
        )

    @classmethod
    def unlimited(cls, name: str = DEFAULT_QUEUE) -> QueueQuota:
        return cls(name=name, nominal_gpus=None)


@dataclass(frozen=True, slots=True)
class Allowance:
    """How many GPU-equivalents (thousandths) a queue may still take for one job, or why none."""

    max_milli: int | None
    """None: no limit from quota."""
    blocked_gpu_types: frozenset[str] = frozenset()
    """GPU products whose per-type quota has no room for the job."""
    refusal: str | None = None


def gpus_text(milli: int) -> str:
    """THOUSANDTHS of a GPU as a person reads them: `3`, `0.9`."""
    return f"{milli / MILLI:g}"


class QuotaLedger:
    """GPU-equivalents (thousandths) in use per queue (and per GPU type), updated as the scheduler admits
    and evicts. Quotas are whole GPUs; every count here is in thousandths."""

    def __init__(self, quotas: Mapping[str, QueueQuota], cluster_gpus: int) -> None:
        self.quotas = quotas
        self._cluster_milli = max(cluster_gpus, 1) * MILLI
        self.used: dict[str, int] = defaultdict(int)
        self.used_by_type: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._cohort_nominal: dict[str, int] = defaultdict(int)
        self._cohort_used: dict[str, int] = defaultdict(int)
        for quota in quotas.values():
            if quota.cohort is not None:
                self._cohort_nominal[quota.cohort] += (quota.nominal_gpus or 0) * MILLI

    def charge(self, queue: str, milli: int, gpu_type: str | None) -> None:
        """QUEUE holds MILLI more GPU-equivalents (thousandths) of GPU_TYPE."""
        self._add(queue, milli, gpu_type)

    def refund(self, queue: str, milli: int, gpu_type: str | None) -> None:
        self._add(queue, -milli, gpu_type)

    def _add(self, queue: str, milli: int, gpu_type: str | None) -> None:
        self.used[queue] += milli
        if gpu_type is not None:
            self.used_by_type[queue][gpu_type] += milli
        cohort = self._cohort(queue)
        if cohort is not None:
            self._cohort_used[cohort] += milli

    def _cohort(self, queue: str) -> str | None:
        quota = self.quotas.get(queue)
        return quota.cohort if quota is not None else None

    def reclaimer_cohort(self, queue: str, milli: int) -> str | None:
        """The cohort from whose borrowers QUEUE may take back MILLI: those it takes stay within its
        nominal quota, which its cohort guarantees it; None when they would not (or it lends nothing)."""
        quota = self.quotas.get(queue)
        if quota is None or quota.nominal_gpus is None or quota.cohort is None:
            return None
        return quota.cohort if self.used[queue] + milli <= quota.nominal_gpus * MILLI else None

    def in_cohort(self, queue: str, cohort: str) -> bool:
        return self._cohort(queue) == cohort

    def borrowed(self, queue: str) -> int:
        quota = self.quotas.get(queue)
        if quota is None or quota.nominal_gpus is None:
            return 0
        return max(0, self.used[queue] - quota.nominal_gpus * MILLI)

    def share(self, queue: str) -> float:
        """Weighted dominant share: the queue furthest below its share goes first."""
        quota = self.quotas[queue]
        base = quota.nominal_gpus * MILLI if quota.nominal_gpus is not None else self._cluster_milli
        return self.used[queue] / max(base, 1) / quota.weight

    def allowance(self, queue: str, gpu_type: str | None, min_milli: int) -> Allowance:
        """What quota lets a job of `queue` take, given it needs at least `min_milli` GPU-equivalents."""
        quota = self.quotas[queue]
        blocked = frozenset(
            product
            for product, cap in quota.gpu_type_quotas.items()
            if cap * MILLI - self.used_by_type[queue][product] < min_milli
        )
        if gpu_type is not None and gpu_type in blocked:
            cap = quota.gpu_type_quotas[gpu_type]
            return Allowance(
                0,
                blocked,
                f"queue {queue} allows {cap} {gpu_type} GPUs and "
                f"{gpus_text(self.used_by_type[queue][gpu_type])} are in use; this asks for {gpus_text(min_milli)}",
            )
        limit = self._total_room(quota)
        if gpu_type is not None and gpu_type in quota.gpu_type_quotas:
            type_room = quota.gpu_type_quotas[gpu_type] * MILLI - self.used_by_type[queue][gpu_type]
            limit = type_room if limit is None else min(limit, type_room)
        if limit is not None and limit < min_milli:
            return Allowance(limit, blocked, self._refusal(quota, min_milli))
        return Allowance(limit, blocked)

    def room(self, queue: str) -> int | None:
        """GPU-equivalents (thousandths) QUEUE may still take, borrowing included; None when it has no quota
        (or is unknown)."""
        quota = self.quotas.get(queue)
        return None if quota is None else self._total_room(quota)

    def _total_room(self, quota: QueueQuota) -> int | None:
        if quota.nominal_gpus is None:
            return None
        own = quota.nominal_gpus * MILLI - self.used[quota.name]
        if not (quota.borrowing_enabled and quota.cohort is not None):
            return max(own, 0)
        borrowable = self._cohort_nominal[quota.cohort] - self._cohort_used[quota.cohort]
        if quota.borrowing_limit is not None:
            borrowable = min(borrowable, own + quota.borrowing_limit * MILLI)
        return max(own, borrowable, 0)

    def _refusal(self, quota: QueueQuota, needed_milli: int) -> str:
        used = self.used[quota.name]
        nominal = (quota.nominal_gpus or 0) * MILLI
        u, n = gpus_text(used), gpus_text(nominal)
        if used > nominal:
            head = f"queue {quota.name} is borrowing: {u} GPUs in use on a quota of {n}"
        elif used == nominal:
            head = f"queue {quota.name} is at its quota: {u} of {n} GPUs in use"
        else:
            head = (
                f"queue {quota.name} has {gpus_text(nominal - used)} of its {n} GPUs free "
                f"and this asks for {gpus_text(needed_milli)}"
            )
        if quota.cohort is None:
            return f"{head}; it is in no cohort, so it cannot borrow"
        if not quota.borrowing_enabled:
            return f"{head}; borrowing is disabled for it"
        idle = self._cohort_nominal[quota.cohort] - self._cohort_used[quota.cohort]
        if quota.borrowing_limit is not None and used + needed_milli - nominal > quota.borrowing_limit * MILLI:
            borrowed = gpus_text(self.borrowed(quota.name))
            return f"{head}; borrowing limit reached ({borrowed} of {quota.borrowing_limit} borrowed)"
        return f"{head}; cohort {quota.cohort} has {gpus_text(max(idle, 0))} idle GPUs to lend"


class Queued(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def created(self) -> datetime: ...


J = TypeVar("J", bound=Queued)


def fair_order(jobs: Sequence[J], ledger: QuotaLedger, band: Callable[[J], int] | None = None) -> Iterator[J]:
    """Pending jobs in the order they are considered, shares re-read after every step.

    The ledger may change between steps (the caller admits jobs), which is how a
    queue that just got GPUs falls behind the others at the same priority. `band`
    (attained service) orders jobs of equal priority, lowest band first, before
    fair share and arrival.
    """
    bands = {job.key: band(job) if band is not None else 0 for job in jobs}
    by_queue: dict[str, list[J]] = defaultdict(list)
    for job in jobs:
        by_queue[job.queue].append(job)
    heads = {
        queue: deque(sorted(queued, key=lambda j: (-j.priority, bands[j.key], j.created, j.key)))
        for queue, queued in sorted(by_queue.items())
    }
    while heads:
        queue = min(
            heads,
            key=lambda q: (
                -heads[q][0].priority,
                bands[heads[q][0].key],
                ledger.share(q),
                heads[q][0].created,
                heads[q][0].key,
            ),
        )
        yield heads[queue].popleft()
        if not heads[queue]:
            del heads[queue]
