"""Other kinds' workloads in the scheduling cycle: what each asks of it, and its decisions carried out.

Each cycle reads every workload of the book (`book.py`) into a request to the one scheduler
(`policy.scheduler`), beside the TrainingJobs and the InferenceServices' replicas: a held (suspended,
or gated) workload asks to be admitted; an admitted one is charged where its record says its pods
go; a model server's placed replicas (and a RayCluster's grown workers) are charged to its queue as
held GPUs (`asking.py`). The scheduler's answer for them is carried out here: an admission is
recorded on the object in the same write that lets its pods be made, a preemption suspends it again
(its controller then deletes its pods; `admitting.py` writes both), a replica a lending queue takes
back is deleted, and a workload left waiting is told why by an event.

A workload whose queue label changed or went while it runs, or that its namespace may no longer
use, is stopped: it never runs uncharged.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from aisched.controller.cluster_state import UncreatedHolds
from aisched.controller.concurrency import at_most
from aisched.controller.cycle.kind import Asked, CycleView, Decided
from aisched.controller.in_flight import InFlightPlacements
from aisched.controller.tenancy import TenancyBook
from aisched.controller.workloads.admitting import Admissions
from aisched.controller.workloads.asking import (
    GROWTH_MARK,
    Asking,
    CycleAsk,
    Stop,
    any_placed,
    ask_group,
    ask_growth,
    ask_replicas,
    interrupted,
    resized,
    workload_key,
)
from aisched.controller.workloads.book import WorkloadBook, WorkloadEntry
from aisched.controller.workloads.deferral import WorkloadDeferral
from aisched.controller.workloads.placing import PodKey, PodPlacer
from aisched.controller.workloads.pods import WorkloadRef
from aisched.controller.workloads.readiness import PodsReadyWatch
from aisched.controller.workloads.running import RunningWorkloads, admitted_as, fixed, gpu_pods
from aisched.controller.workloads.telling import Teller
from aisched.kube.client import KubeClient
from aisched.kube.workload_api import PodGroups, WorkloadApi
from aisched.metrics.workload import WorkloadMetrics
from aisched.policy.carbon import PlanReason
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.policy.queueing import QUEUE_NOT_FOUND
from aisched.policy.scheduler import HeldGpus, JobRequest, ScheduleResult
from aisched.policy.scheduler.results import ReclaimedReplica
from aisched.policy.workloads.model import (
    AdmittedRecord,
    Refusal,
    Workload,
    WorkloadKind,
)
from aisched.policy.workloads.request import as_request

log = logging.getLogger(__name__)
# Decisions carried out at once, each its own write: the API server sees a cycle's writes overlap, as a
# burst of the Job controller's would, within the client's rate limit.
CONCURRENT_WRITES = 16
# Kinds whose object cannot be suspended: their gated pods are admitted one by one, as they come.
_REPLICA_KINDS = frozenset({WorkloadKind.DEPLOYMENT, WorkloadKind.STATEFUL_SET})


@dataclass(kw_only=True)
class WorkloadCycle:
    book: WorkloadBook
    api: WorkloadApi
    kube: KubeClient
    in_flight: InFlightPlacements
    tenancy: TenancyBook
    queue_object: Callable[[str], Mapping[str, Any] | None]
    metrics: WorkloadMetrics | None = None
    deferral: WorkloadDeferral | None = None
    """Carbon-aware deferral of the held workloads that ask for it (None: no workload's start waits)."""
    pods_ready_seconds: float = 300.0
    """How long an admitted workload's pods may take to exist and bind (`settings.workload_pods_ready_seconds`)."""
    pod_groups: PodGroups | None = None
    """Kubernetes' PodGroups, made for the gangs whose pods name one (None: never made)."""
    admissions: Admissions = field(init=False)
    placer: PodPlacer = field(init=False)
    teller: Teller = field(init=False)
    readiness: PodsReadyWatch = field(init=False)
    running: RunningWorkloads = field(default_factory=RunningWorkloads)
    _deferring: set[str] = field(default_factory=set)
    """Workloads whose start a carbon plan put off, each counted once (`aisched_carbon_deferrals_total`)."""
    _set_back: set[str] = field(default_factory=set)
    """Workloads stopped because a node of theirs announced its end: when they ask again, they resume ahead of
    newcomers of their priority, as an interrupted TrainingJob does (`JobRequest.set_back`)."""
    _reclaiming: set[PodKey] = field(default_factory=set)
    """Pods a lending queue took back whose deletes were sent: never offered to a cycle again while they live."""

    def __post_init__(self) -> None:
        self.placer = PodPlacer(
            api=self.api,
            in_flight=self.in_flight,
            record_of=self.record_of,
            pods_ready_seconds=self.pods_ready_seconds,
            pod_groups=self.pod_groups,
            refused=lambda entry, message: self.say(entry, "Warning", "PodGroupTaken", message),
        )
        self.teller = Teller(self.kube)
        self.admissions = Admissions(api=self.api, kube=self.kube, in_flight=self.in_flight, say=self.say)
        self.readiness = PodsReadyWatch(self.pods_ready_seconds)

    # -- what the workloads hold before their pods do -------------------------------------------

    def uncreated_holds(self) -> UncreatedHolds:
        """Whole GPUs, by node, of admitted workloads' pods not bound yet: the record holds them."""
        reserved: dict[str, int] = {}
        for entry in self.book:
            workload = entry.read
            if not isinstance(workload, Workload) or workload.admitted is None or workload.finished:
                continue
            for node, gpus in self.running.held_by_record(entry, workload, workload.admitted).items():
                reserved[node] = reserved.get(node, 0) + gpus
        return UncreatedHolds(reserved)

    # -- a kind of the scheduling cycle (`controller.cycle.CycleKind`) --------------------------

    name = "workloads of other kinds"

    async def asked(self, view: CycleView) -> Asked[CycleAsk]:
        if self.deferral is not None:
            deferral = self.deferral
            held = (e.read for e in self.book if isinstance(e.read, Workload) and e.read.carbon is not None)
            await deferral.prepare(
                (deferral.region_of(w) for w in held if w.suspended and w.admitted is None), view.now
            )
        ask = self.ask(view.snapshot, view.now, view.doomed)
        return Asked(ask, requests=ask.requests, held=ask.held)

    async def decided(self, asked: Asked[CycleAsk], decided: Decided, view: CycleView) -> None:
        await self.carry_out(asked.carried, decided.part, view.now)

    async def blamed(self, asked: Asked[CycleAsk], request: JobRequest, error: Exception, view: CycleView) -> None:
        """The scheduler raised on this workload: it sits this cycle out (its object says nothing new)."""
        log.error("the scheduler raised on %s: %s; it waits for the next cycle", request.key, error)

    # -- asked of the cycle ----------------------------------------------------------------

    def ask(self, snapshot: ClusterSnapshot, now: datetime, doomed: frozenset[str] = frozenset()) -> CycleAsk:
        """What every workload asks of this cycle, and the stops due before it decides; none is placed on a
        DOOMED node, and what runs on one is stopped to resume elsewhere."""
        asking = Asking(now, doomed, self._still_reclaiming(), stuck=self.placer.stuck(now))
        for entry in self.book:
            workload = entry.read
            running = entry.recorded or any_placed(entry)
            before = (len(asking.requests), len(asking.held))
            if isinstance(workload, Workload) and not workload.finished and self._may_run(entry, workload, asking):
                entry.charged_queue = workload.queue
                self._ask_one(entry, workload, snapshot, asking)
            elif isinstance(workload, Refusal):
                # One that runs and can no longer be read (its annotations, a pod group's size, edited under
                # it) stops: refused, it is charged only its pods still draining, where it was last charged.
                if running:
                    asking.stops.append(Stop(entry, workload.reason, f"stopped: {workload.message}"))
                else:
                    self.say(entry, "Warning", workload.reason, workload.message)
            elif workload is None and running and (entry.seen or entry.kind is WorkloadKind.POD_GROUP):
                message = "its queue label was removed while it ran: stopped"
                asking.stops.append(Stop(entry, "QueueLabelRemoved", message))
            may_charge = functools.partial(self._may_charge, entry.ref[1])
            if (queue := entry.queue_to_charge(may_charge)) is not None:
                self._charge_its_pods(queue, self.running.holding(entry), may_charge, asking, before)
        if self.metrics is not None:
            counts = Counter(
                (workload_key(r.key).rpartition("@")[2], "Running" if r.running else "Waiting")
                for r in asking.requests
                if not r.key.endswith(GROWTH_MARK)  # its gang is counted once
            )
            self.metrics.record_kind_workloads(counts)
        return asking.frozen()

    def _may_charge(self, namespace: str, queue_name: str) -> bool:
        """Queue QUEUE_NAME exists and takes work of NAMESPACE: a pod's operator label may charge it. The label
        is the operator's where the chart's policy is in force; where it is not, a tenant's label naming
        another tenant's queue would charge that queue for the tenant's pods."""
        queue = self.queue_object(queue_name)
        namespaces = self.tenancy.tenancy(queue_name, queue).namespaces
        return queue is not None and (namespaces is None or namespace in namespaces)

    @staticmethod
    def _charge_its_pods(
        queue: str,
        holding: Mapping[str | None, int],
        may_charge: Callable[[str], bool],
        asking: Asking,
        before: tuple[int, int],
    ) -> None:
        """Each pod's holding to the queue its operator label names (a run admitted to another queue before
        a relabel, still draining, stays charged there), the rest to QUEUE, the workload's (HOLDING:
        `RunningWorkloads.holding`)."""
        elsewhere = {q: milli for q, milli in holding.items() if q is not None and q != queue and may_charge(q)}
        _charge_what_its_pods_hold(queue, sum(holding.values()) - sum(elsewhere.values()), asking, before)
        # After its own top-up, which counts what its ask charged since BEFORE: these are not that.
        asking.held.extend(HeldGpus(labelled, milli) for labelled, milli in elsewhere.items())

    def _may_run(self, entry: WorkloadEntry, workload: Workload, asking: Asking) -> bool:
        """Its queue takes it (a running one that it no longer does, or whose queue label changed, stops)."""
        if workload.admitted is not None and workload.admitted.queue != workload.queue:
            was, now = workload.admitted.queue, workload.queue
            message = f"its queue label changed from {was} to {now} while it ran: stopped, to wait in {now}"
            asking.stops.append(Stop(entry, "QueueChanged", message))
            return False
        running = self.record_of(workload) is not None or any_placed(entry)
        if running and self.queue_object(workload.queue) is None:
            # Its queue is gone (or it was relabelled for one that does not exist): the Queues are listed
            # whole before the first cycle, so this is no queue not read yet. It must not run charged to none.
            message = f"stopped: queue {workload.queue} does not exist"
            asking.stops.append(Stop(entry, QUEUE_NOT_FOUND, message))
            return False
        refused = self.tenancy.refusal(
            (workload.namespace, workload.key),
            queue_name=workload.queue,
            queue=self.queue_object(workload.queue),
            priority=workload.priority,
            template={},
        )
        if refused is not None:
            # A running one stops, whatever the refusal: its queue no longer takes it, or is gone (the
            # Queues are listed whole before the first cycle, so a queue unknown here does not exist).
            if running:
                asking.stops.append(Stop(entry, refused.reason, f"stopped: {refused.message}"))
            else:
                self.say(entry, "Warning", refused.reason, refused.message)
            return False
        return True

    def _ask_one(self, entry: WorkloadEntry, workload: Workload, snapshot: ClusterSnapshot, asking: Asking) -> None:
        if not workload.gpu_pods:  # asks no GPU: nothing to decide
            if workload.suspended and self.record_of(workload) is None:
                asking.at_once.append(entry)
        elif entry.kind in _REPLICA_KINDS:
            ask_replicas(self.placer, entry, workload, snapshot, asking)
        elif entry.kind is WorkloadKind.POD_GROUP:
            ask_group(self.placer, entry, workload, snapshot, asking)
        elif (record := self.record_of(workload)) is not None:
            self._admitted(entry, workload, record, snapshot, asking)
        elif workload.suspended:
            self._held(entry, workload, snapshot, asking)
        else:  # labelled, running, and never admitted: made before the policy was in force, or with it off
            message = (
                "it was not suspended when it was made (is the chart's workload-gate admission policy "
                "installed, Kubernetes 1.36+?): suspended, to wait for admission"
            )
            asking.stops.append(Stop(entry, "NotHeld", message))

    def _admitted(
        self,
        entry: WorkloadEntry,
        workload: Workload,
        record: AdmittedRecord,
        snapshot: ClusterSnapshot,
        asking: Asking,
    ) -> None:
        """An admitted gang: charged where its record says, unless it must stop first."""
        if workload.suspended and workload.admitted is not None:
            # Suspended by its own user while admitted: its pods go, and so does its charge.
            asking.stops.append(Stop(entry, "Suspended", "suspended while it ran: its admission is given back"))
        elif not admitted_as(workload, record):
            asking.stops.append(Stop(entry, "ResizedWhileRunning", resized(workload, record)))
        elif lost := sorted(set(record.nodes) & asking.doomed):
            # Its pods get their termination grace to checkpoint (a torchrun job saves on SIGTERM) as its
            # controller deletes them; it waits again, first of its priority, for nodes that stay.
            self._set_back.add(workload.key)
            asking.stops.append(Stop(entry, "NodeInterrupted", interrupted(lost)))
        elif not self._pods_overdue(entry, workload, record, asking):
            asking.requests.append(self.running.ask(entry, workload, record, snapshot))
            ask_growth(self.placer, entry, workload, snapshot, asking, record=record)

    def _held(self, entry: WorkloadEntry, workload: Workload, snapshot: ClusterSnapshot, asking: Asking) -> None:
        """A held (suspended) gang asks to be admitted, once its last run's pods are gone."""
        if any(not p.done for p in entry.pods.values()):  # not while its last run's pods still stop
            return
        if self.readiness.waiting_out(entry.ref, asking.now):
            return
        request = as_request(workload, topology=snapshot.topology, placement=None, excluded_nodes=asking.doomed)
        if self._deferred(entry, workload, request, asking.now):
            return
        if workload.key in self._set_back:
            request = replace(request, set_back=True)
        # Elastic at admission where the kind can be told its size: a Job's parallelism.
        asking.requests.append(request if entry.kind is WorkloadKind.BATCH_JOB else fixed(request))

    def _deferred(self, entry: WorkloadEntry, workload: Workload, request: JobRequest, now: datetime) -> bool:
        """A held workload that asks for carbon-aware deferral waits for its planned start (`deferral.py`)."""
        if self.deferral is None or workload.carbon is None:
            return False
        plan = self.deferral.plan(workload, request, now)
        missing = self.deferral.missing.get(self.deferral.region_of(workload))
        if plan is None or not plan.is_deferred(now):
            if missing is not None:
                self.say(entry, "Warning", "CarbonForecastUnavailable", missing)
            return False
        if plan.reason is PlanReason.FORECAST_PENDING:
            return True  # its zone's first read is under way: it sits out, nothing said or counted yet
        if workload.key not in self._deferring:
            self._deferring.add(workload.key)
            self.deferral.record_deferral()
        self.say(entry, "Normal", "Deferred", f"start deferred to {plan.start:%Y-%m-%d %H:%M} UTC for a cleaner grid")
        return True

    def record_of(self, workload: Workload) -> AdmittedRecord | None:
        return self.admissions.record_of(workload)

    def _pods_overdue(self, entry: WorkloadEntry, workload: Workload, record: AdmittedRecord, asking: Asking) -> bool:
        """Its pods have not all come up within the bound since it was admitted: it stops (`readiness.py`)."""

        def bound() -> int:
            return sum(1 for p in gpu_pods(entry, workload) if p.live and p.bound)

        message = self.readiness.overdue(entry.ref, record, bound, asking.now)
        if message is not None:
            asking.stops.append(Stop(entry, "PodsNotReady", message))
        return message is not None

    # -- the decisions carried out ---------------------------------------------------------

    async def carry_out(self, ask: CycleAsk, result: ScheduleResult, now: datetime) -> None:
        """The stops asked before the decision, then its preemptions, admissions, reclaims and waits, each
        workload's on its own: one whose write fails is logged, and the next cycle finds it as it was."""
        for namespace, name in ask.stuck:
            log.warning(
                "pod %s/%s was placed and never bound within the bound: deleted, to be placed again", namespace, name
            )
            await self.kube.delete_pod(namespace, name)
        by_key = self.book.by_key()
        for waiting in result.waiting:
            if (left := by_key.get(workload_key(waiting.key))) is not None:
                self.say(left, "Normal", waiting.reason, waiting.message)
        writes = [*self._asked_writes(ask, now), *self._decided_writes(result, by_key, now)]
        await at_most(CONCURRENT_WRITES, [functools.partial(_guarded, entry, write) for entry, write in writes])

    def _asked_writes(self, ask: CycleAsk, now: datetime) -> list[_Write]:
        """The stops due before the decision, the admissions of what asks no GPU, the interrupted replicas' deletes,
        the records of gangs scaled down in place."""
        writes: list[_Write] = []
        for asked in ask.stops:
            writes.append((asked.entry, functools.partial(self.stop, asked.entry, asked.reason, asked.message)))
        for entry in ask.at_once:
            writes.append((entry, functools.partial(self._admit, entry, None, now)))
        for entry, pod in ask.interrupted:
            writes.append((entry, functools.partial(self._replace_interrupted, entry, pod)))
        for entry, nodes in ask.shrinks:
            writes.append((entry, functools.partial(self.admissions.shrink, entry, nodes)))
        return writes

    def _decided_writes(
        self, result: ScheduleResult, by_key: Mapping[str, WorkloadEntry], now: datetime
    ) -> list[_Write]:
        """RESULT's preemptions, admissions (a running gang's growth placed, its record unchanged) and reclaims."""
        writes: list[_Write] = []
        for preemption in result.preempted:
            if (preempted := by_key.get(preemption.key)) is not None:
                writes.append(
                    (preempted, functools.partial(self.stop, preempted, preemption.reason, preemption.message))
                )
                self._count(preempted, admitted=False)
        for admission in result.admitted:
            if admission.key.endswith(GROWTH_MARK):
                if (grown := by_key.get(workload_key(admission.key))) is not None:
                    place = functools.partial(self.placer.place_pods, grown, admission.placement.nodes, now=now)
                    writes.append((grown, place))
            elif (admitted := by_key.get(admission.key)) is not None:
                writes.append((admitted, functools.partial(self._admit, admitted, admission.placement, now)))
                self._count(admitted, admitted=True)
        for reclaimed in result.reclaimed:  # the InferenceServices' go by the serving controller
            if (owner := by_key.get(reclaimed.service)) is not None:
                writes.append((owner, functools.partial(self._reclaim, owner, reclaimed)))
        return writes

    async def _reclaim(self, entry: WorkloadEntry, reclaimed: ReclaimedReplica) -> None:
        """A replica (or a grown worker) whose queue borrows goes for the lending queue's job; its controller makes
        it again, gated, and it waits for its queue's own quota."""
        pod = (entry.ref[1], reclaimed.pod)
        self._reclaiming.add(pod)
        try:
            await self.kube.delete_pod(*pod)
        except Exception:
            self._reclaiming.discard(pod)
            raise
        # The lending queue only: the job that takes the GPUs is another tenant's, and none of this one's business.
        message = f"replica {reclaimed.pod} reclaimed by the lending queue {reclaimed.lender}"
        self.say(entry, "Normal", "Reclaimed", message)

    def _still_reclaiming(self) -> frozenset[PodKey]:
        """The pods reclaimed whose deletes the watch has not shown yet (live in the book, not terminating)."""
        if self._reclaiming:
            live = {(p.namespace, p.name) for e in self.book for p in e.live_pods}
            self._reclaiming &= live
        return frozenset(self._reclaiming)

    async def _replace_interrupted(self, entry: WorkloadEntry, pod: str) -> None:
        await self.kube.delete_pod(entry.ref[1], pod)
        self.say(
            entry, "Warning", "ReplicaInterrupted", f"replica {pod}'s node announced its end: made again elsewhere"
        )

    def _count(self, entry: WorkloadEntry, *, admitted: bool) -> None:
        if self.metrics is None or not isinstance(entry.read, Workload):
            return
        record = self.metrics.record_kind_admission if admitted else self.metrics.record_kind_preemption
        record(entry.kind.value, entry.read.queue)

    async def _admit(self, entry: WorkloadEntry, placement: Placement | None, now: datetime) -> None:
        """Its admission carried out: a replica kind's or a pod group's pods placed, another kind's record written."""
        if entry.kind in _REPLICA_KINDS or entry.kind is WorkloadKind.POD_GROUP:
            await self.placer.place_pods(entry, placement.nodes if placement is not None else (), now=now)
        elif isinstance(entry.read, Workload):
            self._set_back.discard(entry.read.key)
            self._deferring.discard(entry.read.key)
            await self.admissions.admit(entry, placement, now)

    async def stop(self, entry: WorkloadEntry, reason: str, message: str) -> None:
        await self.admissions.stop(entry, reason, message)

    def say(self, entry: WorkloadEntry, event_type: str, reason: str, message: str) -> None:
        self.teller.say(entry, event_type, reason, message)

    def forget(self, ref: WorkloadRef) -> None:
        kind, namespace, name = ref
        self.admissions.forget(f"{namespace}/{name}@{kind.value}")
        self._set_back.discard(f"{namespace}/{name}@{kind.value}")
        self._deferring.discard(f"{namespace}/{name}@{kind.value}")
        self.teller.forget(ref)
        self.readiness.forget(ref)
        self.running.forget(ref)
        self.placer.forget(ref)


_Write = tuple[WorkloadEntry, Callable[[], Awaitable[None]]]
"""One workload's write of a decision carried out."""


async def _guarded(entry: WorkloadEntry, write: Callable[[], Awaitable[None]]) -> None:
    """WRITE, whose failure is logged: the next cycle finds its workload as it was, and every other's goes on."""
    try:
        await write()
    except Exception:
        kind, namespace, name = entry.ref
        log.exception("carrying out the cycle's decision for %s %s/%s failed", kind.value, namespace, name)


def _charge_what_its_pods_hold(queue: str, holding: int, asking: Asking, before: tuple[int, int]) -> None:
    """QUEUE, the one a workload was last charged to, is charged at least what its bound, unfinished pods hold,
    as kube-scheduler counts them: what its ask since BEFORE (requests, held) charges, topped up. A
    pod on its way out holds its GPUs until it is gone, and a tenant sets how long that is (its termination
    grace): a replica deleted, a stopped, relabelled or deleted gang's pods draining, a replacement beside its
    terminating predecessor are all charged until they go. HOLDING: what its pods hold
    (`RunningWorkloads.holding`), in thousandths."""
    if not holding:
        return
    requests, held = before
    charged = sum(r.held_milli for r in asking.requests[requests:])
    charged += sum(h.milli for h in asking.held[held:])
    if holding > charged:
        asking.held.append(HeldGpus(queue, holding - charged))
