"""The scheduling cycle: waiting and placed jobs to the scheduler, its decisions to the cluster.

The scheduler (`policy.scheduler`) decides who is admitted, preempted, resized or keeps waiting.
This part reads every job into a request, in stages written out in one place: a waiting job
first passes the checks of `ELIGIBILITY`, in that order, then gets its capacity (spot or
on-demand, `capacity.py`); it hands the decision to `decisions.py` to carry out. Each job's
part, from its request to its decision carried out, is guarded on its own: a job the cycle
cannot handle is set aside, and the cycle goes on without it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from aisched.api import Queue, TrainingJob, TrainingJobPhase
from aisched.controller.concurrency import at_most
from aisched.controller.provisioning import NodeProvisioner
from aisched.controller.replica_asks import ReplicaAsks
from aisched.controller.sharing import GpuShares
from aisched.controller.tenancy import TenancyBook
from aisched.controller.training.capacity import CapacityChooser
from aisched.controller.training.carbon import CarbonDeferral
from aisched.controller.training.decisions import CycleDecisions, CycleJobs
from aisched.controller.training.isolation import CycleWrites, QueueRefusalError, StageGuard
from aisched.controller.training.reporting import Reporting
from aisched.controller.training.requests import GangHolds, RequestBook
from aisched.controller.training.store import JobKey, JobStore, job_key, wake_at
from aisched.controller.training.writer import CONCURRENT_RECONCILES
from aisched.controller.workloads.cycle import WorkloadCycle
from aisched.controller.workqueue import WorkQueue
from aisched.kube.inventory import Inventory
from aisched.kube.pools import PoolTracker
from aisched.metrics import Metrics
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.culprits import culprits
from aisched.policy.decision import Decision, decide
from aisched.policy.level_refusals import level_refusal
from aisched.policy.lifecycle import HOLDS_GPUS
from aisched.policy.provisioning import ProvisioningPlan
from aisched.policy.queueing import QueueQuota, with_locked_default
from aisched.policy.refusals import refusal_retry_at
from aisched.policy.scheduler import HeldGpus, JobRequest, ScheduleResult
from aisched.policy.scheduler.demand import pending_demand
from aisched.policy.spot import CapacityDecision, capacity_types_of
from aisched.settings import Settings

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


@dataclass(kw_only=True)
class SchedulingCycle:
    """Runs one cycle at a time: the jobs read into requests, the scheduler's decision, its writes."""

    settings: Settings
    store: JobStore
    guard: StageGuard
    decisions: CycleDecisions
    capacity: CapacityChooser
    deferral: CarbonDeferral
    reporting: Reporting
    inventory: Inventory
    queue: WorkQueue[JobKey]
    metrics: Metrics
    tenancy: TenancyBook
    pools: PoolTracker
    provisioner: NodeProvisioner | None
    shares: GpuShares
    clock: Callable[[], datetime]
    asks: ReplicaAsks
    """InferenceServices' new replicas, decided in this cycle with the gangs."""
    held_elsewhere: Callable[[], Sequence[HeldGpus]]
    """GPUs the queues' other kinds of work hold (InferenceService replicas), charged to their queues each cycle
    (`ClusterState.charged`)."""
    workloads: WorkloadCycle | None = None
    """The other kinds' workloads (Jobs, PyTorchJobs, model-server Deployments...), decided in this cycle too."""
    # Each job's request to the scheduler, made again only when what it is made of changed.
    _requests_made: RequestBook = field(default_factory=RequestBook, init=False)
    # Queue objects the model refuses, each version logged once.
    _refused_queues: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    _eligibility: tuple[Check, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        checks: dict[str, Check] = {
            "still stopping": self._still_stopping,
            "carbon deferral": self._deferred,
            "refusal retry": self._refusal_waits,
        }
        self._eligibility = tuple(checks[name] for name in ELIGIBILITY)

    async def run(self) -> float:
        """One scheduling cycle: admit, keep waiting, preempt and resize, as the scheduler decides.
        Returns how long it took to decide, its writes left out (`aisched_scheduling_cycle_seconds`).

        Each job is read into the cycle, and each decision carried out, inside its own guard:
        a job the cycle cannot handle is set aside (`isolation.py`) and every other job goes on.
        """
        now = self.clock()
        cycle_started, cpu_started = time.perf_counter(), time.thread_time()
        snapshot = self.store.cluster_snapshot()
        parsed, requests, capacity_of, writes = await self._requests(snapshot, now)
        others = self.workloads.ask(snapshot, now) if self.workloads is not None else None
        if others is not None:
            requests.extend(others.requests)
        started = time.perf_counter()
        decision = await self._decide(snapshot, requests, parsed, now, others.held if others is not None else ())
        self.asks.answer(decision.replicas)  # promised at once: the GPUs granted are no one else's
        self.asks.reclaim(decision.reclaimed)  # replicas a lending queue takes back: their services retire them
        result, theirs = decision.jobs.split({r.key for r in others.requests} if others is not None else set())
        # MIG gangs left waiting for instances: an idle node may be repartitioned for them, within their queue's
        # bound; whole-GPU gangs left waiting: free sliced nodes go back to whole GPUs (controller/mig.py).
        self.shares.mig.cycle_asked(
            ((parsed[w.key][1].spec, w.reason) for w in result.waiting if w.key in parsed), self._queue_quotas()
        )
        elapsed = time.perf_counter() - started
        deciding = time.perf_counter() - cycle_started
        self.metrics.process.record_scheduling_cycle(deciding, time.thread_time() - cpu_started)
        # Thousands of jobs may sit this cycle out with a status to write: the writes overlap, and
        # land before any decision is carried out (one job may be written again by its launch).
        # They wait on the API server, not on the decision, so they are not part of its time.
        await at_most(CONCURRENT_RECONCILES, writes)
        await self.decisions.carry_out(result, parsed, capacity_of, now=now, elapsed=elapsed)
        if self.workloads is not None and others is not None:
            try:
                await self.workloads.carry_out(others, theirs, now)
            except Exception:
                log.exception(
                    "carrying out the cycle's decisions for other kinds' workloads failed; the next cycle tries again"
                )
        plan = await self._provision(decision.jobs, requests, now)
        self._record_demand(snapshot, decision.jobs, requests, plan)
        await self.reporting.report_queues(decision.jobs)
        if decision.jobs.deferred or decision.replicas_deferred:
            self.queue.wake()  # the jobs this cycle did not reach have the next one, at once
        return deciding

    def _record_demand(
        self,
        snapshot: ClusterSnapshot,
        result: ScheduleResult,
        requests: list[JobRequest],
        plan: ProvisioningPlan | None,
    ) -> None:
        """The queue depth other autoscalers scale on: label values only from nodes and offerings."""
        products = {pool.gpu_product for pool in snapshot.pools if pool.gpu_product is not None}
        waiting = {w.key for w in result.waiting} | set(result.deferred)
        zones = {z for z in (n.zone for n, _ in snapshot.node_use()) if z is not None}
        if self.provisioner is not None:  # what the fleet can grow into is known, from zero nodes up
            zones.update(o.zone for o in self.provisioner.offerings)
            products.update(o.gpu_product for o in self.provisioner.offerings if o.gpu_product is not None)
        zone_of = plan.zones if plan is not None else {}
        self.metrics.capacity.record_pending_demand(pending_demand(requests, waiting, products, zone_of, zones))

    async def _provision(
        self, result: ScheduleResult, requests: list[JobRequest], now: datetime
    ) -> ProvisioningPlan | None:
        """Nodes for whole gangs left waiting for capacity (`controller.provisioning`), when it is on.

        On its own: a failure here (Karpenter's CRDs missing, the API server refusing) is logged and
        the next cycle tries again; the decisions of this one are carried out already."""
        if self.provisioner is None:
            return None
        held = {node for r in requests if r.placement is not None for node in r.placement.nodes}
        held.update(node for a in result.admitted for node in a.placement.nodes)
        held.update(node for r in result.resized for node in r.placement.nodes)
        try:
            rates = {pool: self.pools.spot_rate_per_second(*pool) for pool in self.provisioner.spot_offerings()}
            return await self.provisioner.after_cycle(result, requests, held, now, rates)
        except Exception:
            log.exception("asking for nodes failed; the next cycle tries again")
            return None

    async def _requests(
        self, snapshot: ClusterSnapshot, now: datetime
    ) -> tuple[CycleJobs, list[JobRequest], dict[str, CapacityDecision], CycleWrites]:
        """What the scheduler is asked: every waiting job (unless deferred, waiting for capacity or set
        aside) and every placed one, with the jobs by key, the capacity chosen for each waiting job,
        and the status writes of the jobs that sit the cycle out, for the caller to make."""
        doomed = self.inventory.doomed_nodes(now)
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

    async def _decide(
        self,
        snapshot: ClusterSnapshot,
        requests: list[JobRequest],
        parsed: CycleJobs,
        now: datetime,
        held_by_others: Sequence[HeldGpus] = (),
    ) -> Decision:
        """The decision for the gangs and the services' new replicas. Should it raise, it is made again
        without the replicas (they wait a cycle); should it still raise, the jobs it raises on are found
        by halving (`policy.culprits`), set aside (and dropped from PARSED), and it decides for the others."""
        most = self.settings.admissions_per_cycle
        asks = self.asks.pending()
        decide_for = functools.partial(
            decide,
            snapshot,
            queues=self._queue_quotas(),
            now=now,
            first_band_gpu_seconds=self.settings.first_service_band_gpu_seconds,
            held_elsewhere=[*self.held_elsewhere(), *held_by_others, *self._departed_workers()],
        )
        try:
            return decide_for(requests, asks, admissions_per_cycle=most)
        except Exception:
            log.exception("the scheduler raised on this cycle's jobs and replicas; deciding the jobs alone")
        try:
            return decide_for(requests, [], admissions_per_cycle=most)
        except Exception:
            log.exception("the scheduler raised on this cycle's jobs; halving them for the ones it cannot take")

        def fails(some: Sequence[JobRequest]) -> Exception | None:
            try:
                # With no bound on admissions: a job the bound would leave out could be the one raising.
                decide_for(list(some), [], admissions_per_cycle=len(some) + 1)
            except Exception as error:
                return error
            return None

        # Placed gangs are kept in while the waiting jobs are halved: a failure may need one of each.
        placed_gangs = [r for r in requests if r.placement is not None]
        waiting = [r for r in requests if r.placement is None]
        found = culprits([], placed_gangs, fails) if fails(placed_gangs) else culprits(placed_gangs, waiting, fails)
        blamed = set()
        for request, raised in found:
            blamed.add(request.key)
            if request.key not in parsed:  # another kind's workload: it sits this cycle out
                log.error("the scheduler raised on %s: %s; it waits for the next cycle", request.key, raised)
                continue
            obj, job = parsed.pop(request.key)
            await self.guard.set_aside(obj, job, raised, now)
        # With no job to blame this raises, and the stage fails as a whole, to be tried next pass.
        return decide_for([r for r in requests if r.key not in blamed], [], admissions_per_cycle=most)

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

    def _queue_quotas(self) -> list[QueueQuota]:
        """The quotas of the Queues this operator can read; the jobs of one it cannot wait, as for a missing
        queue, but for the default queue's, which get the locked one (`with_locked_default`)."""
        quotas = []
        for name, obj in self.store.queues.items():
            try:
                quotas.append(QueueQuota.from_queue(Queue.model_validate(obj)))
            except ValidationError as error:
                if self._refused_queues.get(name) is not obj:  # once per version of the object, not per cycle
                    log.error("cannot read Queue %s: %s; its jobs wait as for a queue that does not exist", name, error)
                    self._refused_queues[name] = obj
        return with_locked_default(quotas)
