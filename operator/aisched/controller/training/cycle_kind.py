"""TrainingJobs in the scheduling cycle: waiting and placed jobs read into requests, their decisions carried out.

The cycle (`controller.cycle`) asks this kind, with every other, what it asks and hands it its
part of the one decision. Each job is read into a request in stages written out in one place: a
waiting job first passes the checks of `ELIGIBILITY`, in that order, then gets its capacity (spot
or on-demand, `capacity.py`); its part of the decision is carried out by `decisions.py`. Each
job's part, from its request to its decision carried out, is guarded on its own: a job the cycle
cannot handle is set aside, and the cycle goes on without it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from aisched.api import TrainingJob, TrainingJobPhase
from aisched.controller.concurrency import at_most
from aisched.controller.cycle.kind import Asked, CycleView, Decided
from aisched.controller.sharing import GpuShares
from aisched.controller.tenancy import TenancyBook
from aisched.controller.training.capacity import CapacityChooser
from aisched.controller.training.carbon import CarbonDeferral
from aisched.controller.training.decisions import CycleDecisions, CycleJobs
from aisched.controller.training.isolation import CycleWrites, QueueRefusalError, StageGuard
from aisched.controller.training.requests import GangHolds, RequestBook
from aisched.controller.training.store import JobKey, JobStore, job_key, wake_at
from aisched.controller.training.writer import CONCURRENT_RECONCILES
from aisched.controller.workqueue import WorkQueue
from aisched.kube.inventory import Inventory
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.level_refusals import level_refusal
from aisched.policy.lifecycle import HOLDS_GPUS
from aisched.policy.refusals import refusal_retry_at
from aisched.policy.scheduler import HeldGpus, JobRequest
from aisched.policy.spot import CapacityDecision, capacity_types_of

log = logging.getLogger(__name__)
Phase = TrainingJobPhase


@dataclass(frozen=True, slots=True)
class Entering:
    """A waiting job on its way into the cycle, with what its checks read."""

    obj: dict[str, Any]
    job: TrainingJob
    snapshot: ClusterSnapshot
    doomed: frozenset[str]
    now: datetime
    writes: CycleWrites


# A check that keeps a waiting job out of this cycle (True), having said why or asked to be woken.
Check = Callable[[Entering], Awaitable[bool]]
# The checks a waiting job passes before its capacity is chosen and the scheduler is asked for it, in order.
ELIGIBILITY = ("still stopping", "carbon deferral", "refusal retry")


@dataclass
class TrainingAsked:
    """What this kind read on its way into one cycle, for its part of the decision."""

    parsed: CycleJobs
    """The jobs asked for, by the scheduler's key, each with the object it was read from."""
    capacity_of: dict[str, CapacityDecision]
    """The capacity chosen for each waiting job."""
    writes: CycleWrites
    """The status writes of the jobs that sit the cycle out, made before any decision is carried out."""


@dataclass(kw_only=True)
class TrainingCycleKind:
    """TrainingJobs as a kind of the scheduling cycle."""

    store: JobStore
    guard: StageGuard
    decisions: CycleDecisions
    capacity: CapacityChooser
    deferral: CarbonDeferral
    inventory: Inventory
    queue: WorkQueue[JobKey]
    tenancy: TenancyBook
    shares: GpuShares
    name: str = "TrainingJob"
    # Each job's request to the scheduler, made again only when what it is made of changed.
    _requests_made: RequestBook = field(default_factory=RequestBook, init=False)
    _eligibility: tuple[Check, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        checks: dict[str, Check] = {
            "still stopping": self._still_stopping,
            "carbon deferral": self._deferred,
            "refusal retry": self._refusal_waits,
        }
        self._eligibility = tuple(checks[name] for name in ELIGIBILITY)

    async def asked(self, view: CycleView) -> Asked[TrainingAsked]:
        """Every waiting job (unless deferred, waiting for capacity or set aside) and every placed one; and what
        the workers of deleted jobs still hold."""
        parsed, requests, capacity_of, writes = await self._requests(view.snapshot, view.now, view.doomed)
        return Asked(TrainingAsked(parsed, capacity_of, writes), requests=requests, held=self._departed_workers())

    async def decided(self, asked: Asked[TrainingAsked], decided: Decided, view: CycleView) -> None:
        mine, result = asked.carried, decided.part
        # MIG gangs left waiting for instances: an idle node may be repartitioned for them, within their queue's
        # bound; whole-GPU gangs left waiting: free sliced nodes go back to whole GPUs (controller/mig.py).
        self.shares.mig.cycle_asked(
            ((mine.parsed[w.key][1].spec, w.reason) for w in result.waiting if w.key in mine.parsed), view.quotas
        )
        # Thousands of jobs may sit this cycle out with a status to write: the writes overlap, and
        # land before any decision is carried out (one job may be written again by its launch).
        await at_most(CONCURRENT_RECONCILES, mine.writes)
        await self.decisions.carry_out(
            result, mine.parsed, mine.capacity_of, now=view.now, elapsed=decided.deciding_seconds
        )

    async def blamed(self, asked: Asked[TrainingAsked], request: JobRequest, error: Exception, view: CycleView) -> None:
        """The scheduler raised on this job: it is set aside, with the error on its status."""
        obj, job = asked.carried.parsed.pop(request.key)
        await self.guard.set_aside(obj, job, error, view.now)

    async def _requests(
        self, snapshot: ClusterSnapshot, now: datetime, doomed: frozenset[str]
    ) -> tuple[CycleJobs, list[JobRequest], dict[str, CapacityDecision], CycleWrites]:
        """What the scheduler is asked: every waiting job (unless deferred, waiting for capacity or set
        aside) and every placed one, with the jobs by key, the capacity chosen for each waiting job,
        and the status writes of the jobs that sit the cycle out, for the caller to make."""
        self.capacity.begin_cycle()
        self._requests_made.begin_cycle()
        parsed: CycleJobs = {}
        requests: list[JobRequest] = []
        capacity_of: dict[str, CapacityDecision] = {}
        writes: CycleWrites = []
        for key, obj in self.store.unfinished():
            if self.guard.still_set_aside(key, obj):
                continue
            job = self.store.parse_once(obj)
            if isinstance(job, ValidationError):  # a CRD older or looser than this operator let it in
                await self.guard.set_aside(obj, None, job, now)
                continue
            queue = job.spec.queue
            try:
                refused = self.tenancy.refusal(
                    key,
                    queue_name=queue,
                    queue=self.store.queue_object(queue),
                    priority=job.spec.priority,
                    template=job.spec.template,
                )
                if refused is not None and job.status.phase in HOLDS_GPUS and queue in self.store.queues:
                    # Its spec changed under a running gang (a priority raised past the cap, another
                    # queue, a toleration, a template the pod policy refuses): it stops to a checkpoint,
                    # so it never runs uncharged, and the next cycle finds it waiting and refused. Not
                    # for a queue this process has not read (yet): a new leader's first cycle may come
                    # before the Queues, and that is no reason to stop anyone.
                    await self.decisions.stop_gang(obj, job, now, refused.reason, f"stopped: {refused.message}")
                    continue
                if refused is not None:  # tenancy: its namespace is not bound to the queue, or it asks too much
                    raise QueueRefusalError(refused)
                if job.status.phase not in HOLDS_GPUS:  # a level the cluster cannot give: said at once
                    levels = level_refusal(job.spec.topology, snapshot.topology, snapshot.labelled_levels())
                    if levels is not None:
                        raise QueueRefusalError(levels)
                entry = await self._enter_cycle(obj, job, snapshot, doomed, now=now, writes=writes)
                self.guard.taken_back(key, obj, job, now, writes)
            except Exception as error:
                await self.guard.set_aside(obj, job, error, now)
                continue
            if entry is None:
                continue
            request, capacity = entry
            requests.append(request)
            if capacity is not None:
                capacity_of[request.key] = capacity
            parsed[request.key] = (obj, job)
        self._requests_made.end_cycle()
        return parsed, requests, capacity_of, writes

    async def _enter_cycle(
        self,
        obj: dict[str, Any],
        job: TrainingJob,
        snapshot: ClusterSnapshot,
        doomed: frozenset[str],
        *,
        now: datetime,
        writes: CycleWrites,
    ) -> tuple[JobRequest, CapacityDecision | None] | None:
        """What JOB asks of this cycle, and the capacity chosen for it; None when it sits this one out.

        The status writes this asks for are added to WRITES, for the cycle to make together."""
        phase = job.status.phase
        key = job_key(job)
        # A new job (no phase yet) is first written Queued only if this cycle cannot place it.
        if phase in (None, Phase.QUEUED, Phase.DEFERRED) and not job.spec.suspend:
            entering = Entering(obj, job, snapshot, doomed, now, writes)
            for check in self._eligibility:
                if await check(entering):
                    return None
            capacity = self.capacity.choose(job, snapshot, doomed, now)
            types = capacity_types_of(capacity)  # the simulator enters its gangs by the same rule
            memory = self.inventory.smallest_gpu_memory_mib() if job.spec.gpu_share else 0
            made = self._requests_made.waiting(
                key, obj, job, types, doomed, topology=snapshot.topology, gpu_memory_mib=memory
            )
            return made, capacity
        if phase in (Phase.PLACING, Phase.RUNNING) and job.status.placement and job.status.placement.nodes:
            generation = self.inventory.node_generation
            memory = self.inventory.smallest_gpu_memory_mib() if job.spec.gpu_share else 0
            request = self._requests_made.running(
                key,
                obj,
                job,
                snapshot,
                node_generation=generation,
                excluded=doomed,
                gpu_memory_mib=memory,
                holds=GangHolds.of(self.store.parts_held(job), self.inventory.pods_of_job(*key)),
            )
            return request, None
        return None

    # -- the eligibility checks, in the order ELIGIBILITY names them ----------------------------

    async def _still_stopping(self, entering: Entering) -> bool:
        """Its last gang is still stopping: the step it would resume from is not in yet."""
        return bool(self.inventory.pods_of_job(*job_key(entering.job)))

    async def _deferred(self, entering: Entering) -> bool:
        """A carbon-aware job waits for its planned start (`carbon.py`)."""
        return await self.deferral.defer(entering.obj, entering.job, entering.now, entering.writes)

    async def _refusal_waits(self, entering: Entering) -> bool:
        """A gang whose workers the API server refused waits out its retry before it asks again."""
        retry_at = refusal_retry_at(entering.job, entering.now)
        if retry_at is None:
            return False
        wake_at(self.queue, entering.job, retry_at, entering.now)
        return True

    def _departed_workers(self) -> list[HeldGpus]:
        """What the workers of deleted TrainingJobs hold while they stop (a long termination grace), charged to
        the queue each was made for: a job deleted and submitted again never holds its queue's quota twice."""
        held = []
        for key in self.inventory.jobs_with_pods():
            if key in self.store.jobs:
                continue
            for pod in self.inventory.pods_of_job(*key):
                if pod.holds_gpus and pod.queue is not None and pod.gpu_milli:
                    held.append(HeldGpus(pod.queue, pod.gpu_milli))
        return held
