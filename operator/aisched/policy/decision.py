"""One decision for every GPU: TrainingJob gangs and InferenceService replicas in the same cycle. Pure.

A service that wants new replicas asks the cycle (`ReplicaAsk`); the cycle asks `schedule`
for its gangs and for each service's new replicas together, so both are taken in one fair
order (priority first, then `queueing.fair_order`) against one snapshot and one quota ledger.
A service's replicas are not a gang: as many start as free GPUs and the queue's quota hold,
and they never preempt, shrink or reserve (`JobRequest.replica_set`); neither are they ever
preempted by a gang, but for quota lent: a job of a queue within its nominal quota takes back
what another queue of its cohort borrows through its replicas (`scheduler.preemption`), and the
serving controller retires them (`Decision.reclaimed`). Where they run is the serving
policy's choice (`policy.serving`: capacity mix, spread), made once, by `schedule` itself at
their turn (`JobRequest.spread`, `policy.serving.place_replica_set`): on what is free then,
off the nodes a higher gang's reservation holds and those where this cycle stopped a gang
(its GPUs free only once its stops land).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from aisched.api.common import CapacityType, SpotPolicy
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.policy.queueing import QUOTA_EXCEEDED, QueueQuota
from aisched.policy.replica_placement import ReplicaSpread, granted_plan, replicas_placed
from aisched.policy.scheduler import (
    HeldGpus,
    JobRequest,
    ReclaimedReplica,
    ScheduleResult,
    schedule,
)
from aisched.policy.scheduler.service import FIRST_BAND_GPU_SECONDS
from aisched.policy.scheduler.state import ADMISSIONS_PER_CYCLE
from aisched.policy.serving import (
    PlanReason,
    ServingPlan,
    ServingReplica,
    ServingRequest,
    tag_replacements,
)

ServiceKey = tuple[str, str]
REPLICA_SET_MARK = "@replicas"
"""Ends a service's key in `schedule`: no TrainingJob's (namespace/name, no '@' in either) ends so."""


@dataclass(frozen=True)
class ReplicaAsk:
    """The new replicas one InferenceService asks of a cycle, and what they are placed beside."""

    service: ServiceKey
    queue: str
    priority: int
    created: datetime
    request: ServingRequest
    kept: tuple[ServingReplica, ...]
    """Its replicas of the current template on healthy nodes: new ones are spread around them."""
    desired: int
    """How many replicas of the current template it aims for in this rollout step."""
    wanted: int
    """How many new ones that takes (replacements of replicas on interrupted nodes included)."""
    replacing: tuple[str, ...] = ()
    """Replicas on nodes that announced their end, for new ones to stand in for."""
    milli_per_replica: int | None = None
    """What one replica is charged, in thousandths of a GPU, when that is not whole GPUs (a gpuShare)."""
    gpu_memory_mib: int = 0
    excluded: frozenset[str] = frozenset()
    """Nodes that announced their end: no new replica goes there."""

    @property
    def key(self) -> str:
        return f"{self.service[0]}/{self.service[1]}{REPLICA_SET_MARK}"

    def as_request(self) -> JobRequest:
        """Its new replicas as `schedule` takes them: any count from one to all, none preempting."""
        request = self.request
        spot = request.spot_policy != SpotPolicy.NEVER
        return JobRequest(
            key=self.key,
            queue=self.queue,
            priority=self.priority,
            created=self.created,
            gpus_per_replica=request.gpus_per_replica,
            replicas=self.wanted,
            min_replicas=1,
            max_replicas=self.wanted,
            gpu_type=request.gpu_type,
            tolerations=request.tolerations,
            capacity_types=(CapacityType.ON_DEMAND, CapacityType.SPOT) if spot else (CapacityType.ON_DEMAND,),
            excluded_nodes=self.excluded,
            milli_per_replica=self.milli_per_replica,
            gpu_memory_mib=self.gpu_memory_mib,
            share=request.share,
            replica_set=True,
            spread=ReplicaSpread(self.kept, self.desired, request),
        )


@dataclass(frozen=True)
class ReplicaReclaim:
    """Running replicas of one service that go: a lending queue takes back the GPUs its queue borrowed."""

    pods: tuple[str, ...]
    lenders: tuple[str, ...]
    """The queues that reclaim them."""

    @property
    def message(self) -> str:
        """What the service's status and events say: the lending queue, never another tenant's object."""
        queues = ", ".join(self.lenders)
        return f"{len(self.pods)} replica(s) reclaimed by the lending queue {queues}"


@dataclass(frozen=True)
class Decision:
    """A cycle's answer: what `schedule` decided for the gangs, and for each service that asked, the
    replicas it starts now (none, when it waits: `unplaced` and the message say why)."""

    jobs: ScheduleResult
    replicas: Mapping[ServiceKey, ServingPlan]
    replicas_deferred: tuple[ServiceKey, ...] = ()
    """Services the cycle did not reach (it admitted its most): the next cycle, at once, does."""
    reclaimed: Mapping[ServiceKey, ReplicaReclaim] = field(default_factory=dict)
    """Running replicas that go, by service, for the lending queues' jobs admitted in their GPUs."""


def decide(
    snapshot: ClusterSnapshot,
    jobs: Sequence[JobRequest],
    asks: Sequence[ReplicaAsk],
    queues: Sequence[QueueQuota],
    now: datetime,
    *,
    admissions_per_cycle: int = ADMISSIONS_PER_CYCLE,
    first_band_gpu_seconds: float = FIRST_BAND_GPU_SECONDS,
    held_elsewhere: Sequence[HeldGpus] = (),
) -> Decision:
    """Decide one cycle for JOBS and ASKS. SNAPSHOT is left as it was found."""
    by_key = {ask.key: ask for ask in asks}
    result = schedule(
        snapshot,
        [*jobs, *(ask.as_request() for ask in asks)],
        queues,
        now,
        admissions_per_cycle=admissions_per_cycle,
        first_band_gpu_seconds=first_band_gpu_seconds,
        held_elsewhere=held_elsewhere,
    )
    reclaimed = _reclaims(result.reclaimed)
    if not by_key:
        return Decision(result, {}, reclaimed=reclaimed)
    deferred = tuple(by_key[key].service for key in result.deferred if key in by_key)
    gangs = _gangs_only(result, by_key)
    plans: dict[ServiceKey, ServingPlan] = {}
    for admission in result.admitted:  # placed by `schedule`, spread as the serving policy spreads them
        if (ask := by_key.get(admission.key)) is not None:
            plans[ask.service] = _granted(ask, admission.placement, snapshot)
    for waiting in result.waiting:
        if (left := by_key.get(waiting.key)) is not None:
            why = PlanReason.QUOTA_EXCEEDED if waiting.reason == QUOTA_EXCEEDED else PlanReason.INSUFFICIENT_CAPACITY
            plans[left.service] = ServingPlan(unplaced=left.wanted, reason=why, message=waiting.message)
    for key in result.deferred:
        if (later := by_key.get(key)) is not None:
            message = "the cycle admitted its most; the next one, at once, places them"
            plans[later.service] = ServingPlan(unplaced=later.wanted, reason=PlanReason.SCALING, message=message)
    return Decision(gangs, plans, deferred, reclaimed)


def _granted(ask: ReplicaAsk, placement: Placement, snapshot: ClusterSnapshot) -> ServingPlan:
    """What ASK is answered: the new replicas PLACEMENT starts (standing in first for those on interrupted
    nodes), and the rest waiting for room."""
    starts = tag_replacements(replicas_placed(placement, snapshot), ask.replacing)
    return granted_plan(ReplicaSpread(ask.kept, ask.desired, ask.request), starts, ask.wanted)


def _reclaims(reclaimed: Sequence[ReclaimedReplica]) -> dict[ServiceKey, ReplicaReclaim]:
    by_service: dict[ServiceKey, ReplicaReclaim] = {}
    for replica in reclaimed:
        if "@" in replica.service:  # another kind's replica (`namespace/name@kind`): its own kind retires it
            continue
        namespace, _, name = replica.service.partition("/")
        before = by_service.get((namespace, name), ReplicaReclaim((), ()))
        lenders = before.lenders if replica.lender in before.lenders else (*before.lenders, replica.lender)
        by_service[(namespace, name)] = ReplicaReclaim((*before.pods, replica.pod), lenders)
    return by_service


def _gangs_only(result: ScheduleResult, asks: Mapping[str, ReplicaAsk]) -> ScheduleResult:
    """RESULT as the TrainingJob side carries it out: the services' replicas are not its jobs (the
    replicas it reclaims go by the serving controller)."""
    waiting_sets = Counter(asks[w.key].queue for w in result.waiting if w.key in asks)
    waiting_sets.update(asks[key].queue for key in result.deferred if key in asks)
    queues = {
        name: replace(usage, pending_jobs=usage.pending_jobs - waiting_sets[name]) if waiting_sets[name] else usage
        for name, usage in result.queues.items()
    }
    return replace(result.split(asks.keys())[0], queues=queues)
