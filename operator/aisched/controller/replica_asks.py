"""Services' new replicas, asked of the scheduling cycle and answered by it: the one place GPUs are handed out.

An InferenceService pass works out how many new replicas its service wants and asks
(`ask`); it places none itself. The scheduling cycle (`ClusterState.replica_asks`) takes the asks
with its gangs (`policy.decision.decide`) and answers each: the replicas that start now, on
which nodes, promised at once in the one in-flight record (`in_flight`) under the key the
replica placement settles once their pods are made; or why they wait. The service's next
pass makes the pods of what was granted. Running replicas the cycle reclaims for a lending
queue (`reclaim`) are handed the same way to the service's next pass, which retires them.

A serving controller built without a cycle (its own tests) answers its asks in its pass,
with the same decision over no gangs (`decide_alone`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from aisched.controller.in_flight import InFlightPlacements, Promised, gpus_by_node
from aisched.policy.cluster import ClusterSnapshot, Node
from aisched.policy.decision import ReplicaAsk, ReplicaReclaim, ServiceKey, decide
from aisched.policy.queueing import MILLI, QueueQuota
from aisched.policy.scheduler import HeldGpus
from aisched.policy.serving import NewReplica, ServingPlan, ServingRequest


def grant_promise(service: ServiceKey) -> tuple[str, ServiceKey]:
    """The in-flight record's key for what the cycle granted SERVICE, until its pods are made."""
    return ("InferenceService", service)


@dataclass
class ReplicaAsks:
    in_flight: InFlightPlacements
    wake_cycle: Callable[[], None] | None = None
    """Has the scheduling cycle run soon; None: no cycle takes the asks (`decide_alone` answers them)."""
    on_answer: Callable[[ServiceKey], None] = lambda _service: None
    """Told of each service whose answer changed (the serving controller marks it for a pass)."""
    _asks: dict[ServiceKey, ReplicaAsk] = field(default_factory=dict)
    _answers: dict[ServiceKey, ServingPlan] = field(default_factory=dict)
    _granted: dict[ServiceKey, ReplicaAsk] = field(default_factory=dict)
    """The ask behind each answer with replicas to start, until its pass takes them (`take`)."""
    _reclaimed: dict[ServiceKey, ReplicaReclaim] = field(default_factory=dict)
    """Running replicas the cycle reclaimed for a lending queue, until the service's pass retires them."""

    def ask(self, ask: ReplicaAsk) -> None:
        """ASK replaces the service's earlier one; the cycle runs soon if it is new."""
        if self._asks.get(ask.service) == ask:
            return
        self._asks[ask.service] = ask
        if self.wake_cycle is not None:
            self.wake_cycle()

    def withdraw(self, service: ServiceKey) -> None:
        """SERVICE wants no new replica (or is gone): its ask goes, and any grant it did not take."""
        self._asks.pop(service, None)
        self._answers.pop(service, None)
        if self._granted.pop(service, None) is not None:
            self.in_flight.settle(grant_promise(service))

    def pending(self) -> list[ReplicaAsk]:
        """The asks for the cycle: those without replicas granted and not yet taken."""
        return [ask for service, ask in self._asks.items() if service not in self._granted]

    def answer(self, plans: Mapping[ServiceKey, ServingPlan], *, tell: bool = True) -> None:
        """The cycle's answers: replicas granted are promised at once, before anything else is decided;
        the services whose answer changed are told (TELL), for a pass to carry it out."""
        for service, plan in plans.items():
            ask = self._asks.get(service)
            if ask is None:
                continue
            if plan.start:
                self.in_flight.promise(grant_promise(service), promised(ask.request, plan.start))
                self._granted[service] = ask
            before = self._answers.get(service)
            self._answers[service] = plan
            changed = before is None or (before.unplaced, before.message) != (plan.unplaced, plan.message)
            if tell and (plan.start or changed):
                self.on_answer(service)

    def reclaim(self, reclaimed: Mapping[ServiceKey, ReplicaReclaim]) -> None:
        """Running replicas that go for a lending queue's job: kept for the service's next pass (told at
        once), and no longer offered to a cycle as reclaimable meanwhile (`reclaiming`)."""
        for service, reclaim in reclaimed.items():
            before = self._reclaimed.get(service, ReplicaReclaim((), ()))
            pods = (*before.pods, *(p for p in reclaim.pods if p not in before.pods))
            lenders = (*before.lenders, *(q for q in reclaim.lenders if q not in before.lenders))
            self._reclaimed[service] = ReplicaReclaim(pods, lenders)
            self.on_answer(service)

    def reclaiming(self, service: ServiceKey) -> frozenset[str]:
        """The pods of SERVICE reclaimed and not retired yet."""
        reclaim = self._reclaimed.get(service)
        return frozenset(reclaim.pods) if reclaim is not None else frozenset()

    def take_reclaimed(self, service: ServiceKey) -> ReplicaReclaim | None:
        """The replicas of SERVICE to retire for a lending queue, handed over once."""
        return self._reclaimed.pop(service, None)

    def take(self, service: ServiceKey) -> ServingPlan | None:
        """The cycle's last answer for SERVICE; replicas it granted are handed over once (their promise
        stays, under `grant_promise`, for the caller to settle once their pods are made)."""
        plan = self._answers.get(service)
        if plan is not None and self._granted.pop(service, None) is not None:
            self._answers[service] = ServingPlan(unplaced=plan.unplaced, reason=plan.reason, message=plan.message)
            self._asks.pop(service, None)  # answered; the pass asks again for what is still wanted
        return plan

    def held(self, nodes: Mapping[str, Node]) -> list[HeldGpus]:
        """What the replicas granted and not made yet are charged, by queue and GPU product of NODES."""
        held = []
        for service, ask in self._granted.items():
            each = ask.milli_per_replica or ask.request.gpus_per_replica * MILLI
            for start in self._answers[service].start:
                node = nodes.get(start.node)
                held.append(HeldGpus(ask.queue, each, node.gpu_product if node is not None else None))
        return held

    def decide_alone(self, snapshot: ClusterSnapshot, now: datetime) -> None:
        """Answer the pending asks with no cycle to take them: the same decision, over no gangs, each
        queue without limit (no cycle keeps a ledger of quotas here)."""
        asks = self.pending()
        if not asks:
            return
        queues = [QueueQuota.unlimited(name) for name in sorted({ask.queue for ask in asks})]
        self.answer(decide(snapshot, [], asks, queues, now).replicas, tell=False)  # the asking pass carries it out


def promised(request: ServingRequest, starts: tuple[NewReplica, ...] | list[NewReplica]) -> Promised:
    """What new replicas take while their pods are made: a fraction's planned part of a GPU (a whole
    GPU only where it splits a free one), a MIG instance, or whole GPUs."""
    share = request.share
    if share is not None and share.mig_profile is not None:
        return Promised({}, mig=tuple((s.node, share.mig_profile) for s in starts))
    if share is not None:
        parts = tuple(s.part for s in starts if s.part is not None)
        return Promised(gpus_by_node([p.node for p in parts if p.splits], 1), parts)
    return Promised(gpus_by_node([s.node for s in starts], request.gpus_per_replica))
