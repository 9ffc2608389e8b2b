"""Steps 2 and 4 of a pass: replicas that are no replicas any more go, and new ones are asked for and started.

`policy.rollout.plan_rollout` bounds a template change by surge and unavailability,
`policy.serving.serving_changes` says which replicas retire and how many new ones the service
wants, placing none; those are asked of the scheduling cycle (`controller/replica_asks.py`), which decides
them with the gangs and says where they go (capacity mix, spread, replacing replicas on
interrupted nodes first). This module carries the answer out and tells the service's events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from aisched.api.common import CapacityType
from aisched.api.inference_service import InferenceService
from aisched.controller.closing_namespaces import ClosingNamespaces
from aisched.controller.concurrency import all_done
from aisched.controller.in_flight import InFlightPlacements
from aisched.controller.replica_asks import ReplicaAsks, grant_promise, promised
from aisched.controller.serving.replica_pods import ReplicaPods, ServiceKey
from aisched.controller.serving.templates import ServiceTemplates
from aisched.controller.sharing import GpuShares, ShareDoesNotFitError
from aisched.kube.api_errors import namespace_closing, refused_create
from aisched.kube.builders import owner_reference
from aisched.kube.client import KubeClient
from aisched.kube.serving_builders import ReplicaSlot, ServingPod, build_replica_pod, free_pod_names
from aisched.policy.cluster import ClusterSnapshot, Toleration
from aisched.policy.decision import ReplicaAsk
from aisched.policy.rollout import plan_rollout
from aisched.policy.serving import (
    NewReplica,
    PlanReason,
    ServingChanges,
    ServingPlan,
    ServingReplica,
    ServingRequest,
    serving_changes,
)
from aisched.policy.sharing.charge import replica_milli
from aisched.settings import Settings

UNSCHEDULABLE_GRACE = timedelta(seconds=30)
"""A replica kube-scheduler cannot bind to its node this long is placed again: the node filled up meanwhile."""
FAILED_CREATE = "FailedCreate"
"""Why a service's new replica does not exist: the API server refused its pod."""
_LONG_AGO = datetime.min.replace(tzinfo=UTC)  # a service with no creation time yet goes first among equals
SPOT_GRACE_MARGIN_SECONDS = 10
"""Of a spot notice, what a replica's pod teardown may not use, so it ends before the node does."""


@dataclass
class ReplicaPlacement:
    settings: Settings
    kube: KubeClient
    replicas: ReplicaPods
    in_flight: InFlightPlacements
    """Where new replicas' GPUs are promised until their pods are in `replicas`, which counts them then."""
    templates: ServiceTemplates
    """A service's template hash, and its whole template to build replicas from."""
    asks: ReplicaAsks
    """New replicas asked of the scheduling cycle, and its answers."""
    waiting_for_capacity: set[ServiceKey] = field(default_factory=set)
    """Services with replicas that fit nowhere: someone else's pod going may make room."""
    refused: dict[ServiceKey, str] = field(default_factory=dict)
    """What the API server said refusing a service's last new replica (admission, an invalid
    template); gone once one is created."""
    shares: GpuShares | None = None
    """Which GPU each replica of a service with gpuShare gets, and its claim."""
    closing: ClosingNamespaces = field(default_factory=ClosingNamespaces)
    """Namespaces being deleted: their services are left alone a while."""
    departed_claims: dict[ServiceKey, set[str]] = field(default_factory=dict)
    """ResourceClaimTemplates of replicas the watch showed gone, by service, to delete at its next pass: the
    service owns them, and a long-lived one scaling up and down would otherwise keep one per replica ever made."""
    quota_said: dict[ServiceKey, str] = field(default_factory=dict)
    """What the service's events last said of its queue's quota holding back new replicas."""
    reclaimed_by: dict[ServiceKey, str] = field(default_factory=dict)
    """Why the service has fewer replicas than it wants, while it has: a lending queue reclaimed some."""

    def claim_departed(self, pod: ServingPod) -> None:
        """POD of a service with gpuShare is gone: its claim template (named after it, `kube/claims.py`) goes."""
        self.departed_claims.setdefault((pod.namespace, pod.service), set()).add(pod.name)

    async def delete_departed_claims(self, key: ServiceKey) -> None:
        names = self.departed_claims.pop(key, set())
        try:
            await all_done(*(self.kube.delete_claim_template(key[0], name) for name in sorted(names)))
        except Exception:
            self.departed_claims.setdefault(key, set()).update(names)  # the next pass tries again
            raise

    async def clear_out(self, obj: dict[str, Any], pods: Sequence[ServingPod], now: datetime) -> None:
        """Pods that ended, or that kube-scheduler could not bind to their node, go."""
        ended = [p for p in pods if p.finished and not p.terminating]
        stuck = [
            p
            for p in pods
            if p.serving_candidate
            and p.unschedulable_since is not None
            and now - p.unschedulable_since > UNSCHEDULABLE_GRACE
        ]
        if ended:
            self.kube.post_event(
                obj, "Warning", "ReplicaEnded", f"replica(s) {', '.join(p.name for p in ended)} ended; replacing them"
            )
        if stuck:
            self.kube.post_event(
                obj,
                "Warning",
                "ReplicaUnschedulable",
                f"replica(s) {', '.join(p.name for p in stuck)} could not be bound to their node "
                f"for {UNSCHEDULABLE_GRACE.seconds} s; placing them again",
            )
        await self.delete([*ended, *stuck])

    async def place(
        self,
        obj: dict[str, Any],
        service: InferenceService,
        desired: int,
        snapshot: Callable[[], ClusterSnapshot],
        now: datetime,
    ) -> ServingPlan:
        """Start and retire replicas toward DESIRED, a rollout step at a time; returns the placement plan.

        Replicas are retired here; new ones are asked of the scheduling cycle (`replica_asks`), which
        decides them with the gangs, and started at the pass after its answer. SNAPSHOT gives the
        cluster as of now, promises of decisions under way included."""
        key = (service.metadata["namespace"], service.metadata["name"])
        await self.retire_reclaimed(obj, key)
        pods = [p for p in self.replicas.of(key) if p.serving_candidate]
        current_hash = self.templates.current_hash(service)
        current = [_replica(p) for p in pods if p.template_hash == current_hash]
        old = [_replica(p) for p in pods if p.template_hash != current_hash]
        rollout = service.spec.rollout
        step = plan_rollout(current, old, desired, rollout.max_surge, rollout.max_unavailable)
        room = snapshot()
        # What goes and how many new replicas it wants; where new ones go is the cycle's (`policy.decision`).
        changes = serving_changes(current, step.current_target, _request(service), room)
        wanted = changes.wanted
        if wanted:
            self.asks.ask(self._ask(service, current, step.current_target, wanted, room))
            if self.asks.wake_cycle is None:
                self.asks.decide_alone(room, now)
        else:
            self.asks.withdraw(key)
        answer = self.asks.take(key)
        starts = answer.start[:wanted] if answer is not None else ()
        self._tell_quota(obj, key, answer if wanted else None)
        await self._start(obj, service, current_hash, starts)
        by_name = {p.name: p for p in pods}
        await self.delete([by_name[name] for name in (*changes.retire, *step.retire_old) if name in by_name])
        if changes.retire or step.retire_old:
            self.kube.post_event(
                obj, "Normal", "ReplicasRetired", f"retired {', '.join((*changes.retire, *step.retire_old))}"
            )
        plan = _carried(changes, starts, answer)
        if plan.unplaced and key in self.reclaimed_by:
            plan = replace(plan, reason=PlanReason.RECLAIMED, message=f"{self.reclaimed_by[key]}; {plan.message}")
        else:
            self.reclaimed_by.pop(key, None)  # back to what it wants: what was reclaimed is history
        if plan.unplaced:
            self.waiting_for_capacity.add(key)
        else:
            self.waiting_for_capacity.discard(key)
        if self.shares is not None:  # for the stranded-GPU measure, and a MIG repartition
            self.shares.note_waiting_replicas(
                key, service.spec.gpu_share, plan.unplaced, service.spec.gpu_type, service.spec.queue
            )
        return plan

    async def retire_reclaimed(self, obj: dict[str, Any], key: ServiceKey) -> None:
        """The replicas the cycle reclaimed for a lending queue go, by the same path as any retired replica;
        the status and an event say why, naming the lending queue and nothing else of another tenant's."""
        reclaim = self.asks.take_reclaimed(key)
        if reclaim is None:
            return
        by_name = {p.name: p for p in self.replicas.of(key) if p.serving_candidate}
        going = [by_name[name] for name in reclaim.pods if name in by_name]
        try:
            await self.delete(going)
        except BaseException:
            self.asks.reclaim({key: reclaim})  # the next pass tries again
            raise
        if going:
            self.reclaimed_by[key] = reclaim.message
            self.kube.post_event(
                obj, "Normal", "ReplicasReclaimed", f"{reclaim.message}: retired {', '.join(p.name for p in going)}"
            )

    def _tell_quota(self, obj: dict[str, Any], key: ServiceKey, answer: ServingPlan | None) -> None:
        """Say once, in an event, that the queue's quota holds back new replicas (and again when that changes)."""
        if answer is None or answer.reason != PlanReason.QUOTA_EXCEEDED or not answer.unplaced:
            self.quota_said.pop(key, None)
            return
        if self.quota_said.get(key) != answer.message:
            self.kube.post_event(obj, "Warning", "QuotaExceeded", f"{answer.message}; the rest start when it has room")
            self.quota_said[key] = answer.message

    def _ask(
        self,
        service: InferenceService,
        current: Sequence[ServingReplica],
        desired: int,
        wanted: int,
        snapshot: ClusterSnapshot,
    ) -> ReplicaAsk:
        """What SERVICE asks of the cycle: WANTED new replicas, spread beside the healthy CURRENT ones."""
        doomed = {n.name for n in snapshot.nodes() if n.interrupted}
        created = service.metadata.get("creationTimestamp")
        return ReplicaAsk(
            service=(service.metadata["namespace"], service.metadata["name"]),
            queue=service.spec.queue,
            priority=service.spec.priority,
            created=datetime.fromisoformat(created) if isinstance(created, str) else created or _LONG_AGO,
            request=_request(service),
            kept=tuple(r for r in current if r.node not in doomed),
            desired=desired,
            wanted=wanted,
            replacing=tuple(sorted(r.name for r in current if r.node in doomed)),
            # A memory share is charged whole until it holds a part (then what its pod holds).
            milli_per_replica=(
                replica_milli(service.spec.gpu_share, service.spec.gpus_per_replica)
                if service.spec.gpu_share is not None
                else None
            ),
            excluded=frozenset(doomed),
        )

    async def _start(
        self,
        obj: dict[str, Any],
        service: InferenceService,
        current_hash: str,
        starts: Sequence[NewReplica],
    ) -> None:
        key = (service.metadata["namespace"], service.metadata["name"])
        if not starts:
            self.refused.pop(key, None)  # nothing asked of the API server, so nothing it refuses
            return
        request = _request(service)
        try:
            made = await self._create(obj, service, current_hash, starts)
            # Each pod made holds its promise until the watch shows it (then the inventory counts it), as
            # kube-scheduler "assumes" a pod until its bind is seen: the TrainingJob cycle counts it too.
            for pod, start in made:
                pod_key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                if self.replicas.unconfirmed(pod_key):
                    self.in_flight.promise(replica_promise(pod_key), promised(request, [start]))
        finally:
            self.in_flight.settle(grant_promise(key))  # each pod made holds its own now (or none was made)

    async def _create(
        self, obj: dict[str, Any], service: InferenceService, current_hash: str, starts: Sequence[NewReplica]
    ) -> list[tuple[dict[str, Any], NewReplica]]:
        """The replica pods of STARTS made; those the API server took, with what each was planned."""
        key = (service.metadata["namespace"], service.metadata["name"])
        whole = await self.templates.whole(service)
        if whole is None:
            return []  # deleted meanwhile
        service = whole
        names = free_pod_names(key[1], current_hash, self.replicas.names_of(key), len(starts))
        grace = max(5, self.settings.spot_notice_seconds - SPOT_GRACE_MARGIN_SECONDS)
        pods = [
            build_replica_pod(
                service,
                ReplicaSlot(pod_name, start.node, CapacityType(start.capacity_type), current_hash),
                gpu_resource=self.settings.gpu_resource,
                spot_grace_seconds=grace,
                priority_class_name=self.settings.worker_priority_class_name,
            )
            for pod_name, start in zip(names, starts, strict=True)
        ]
        if self.shares is not None and service.spec.gpu_share is not None:
            try:
                claims, pods = self.shares.shared_pods(
                    service.spec.gpu_share, pods, owner_reference(service), service.spec.gpu_type
                )
            except ShareDoesNotFitError as full:
                self.kube.post_event(obj, "Warning", "ShareDoesNotFit", str(full))
                self.waiting_for_capacity.add(key)
                waiting = self.shares.replicas_waiting.get(key, (None, 0, None))[1] + len(starts)
                self.shares.note_waiting_replicas(
                    key, service.spec.gpu_share, waiting, service.spec.gpu_type, service.spec.queue
                )
                return []
            claimed = await asyncio.gather(*(self.kube.create(claim) for claim in claims), return_exceptions=True)
            failed = [outcome for outcome in claimed if isinstance(outcome, BaseException)]
            if failed:
                self.shares.forget(pods)
                if self._claims_refused(obj, key, failed):
                    return []
                if not any(namespace_closing(error) for error in failed):
                    raise failed[0]
                self.closing.closed(key[0])  # the service goes with its namespace
                return []
        outcomes = await asyncio.gather(*(self.kube.create(pod) for pod in pods), return_exceptions=True)
        made = [(pod, start) for pod, start, outcome in zip(pods, starts, outcomes, strict=True) if outcome is None]
        if self.shares is not None:
            self.shares.forget([pod for pod, outcome in zip(pods, outcomes, strict=True) if outcome is not None])
        self.replicas.created([pod for pod, _ in made])
        if made:
            self.refused.pop(key, None)
            described = ", ".join(
                f"{pod['metadata']['name']} on {s.node} ({s.capacity_type})"
                + (f" replacing {s.replaces}" if s.replaces else "")
                for pod, s in made
            )
            self.kube.post_event(obj, "Normal", "ReplicasStarted", f"started {described}")
        for error in (outcome for outcome in outcomes if isinstance(outcome, BaseException)):
            if namespace_closing(error):
                self.closing.closed(key[0])  # the namespace is going, and the service with it
                continue
            refusal = refused_create(error)
            if refusal is None:
                raise error
            if self.refused.get(key) != refusal:
                self.kube.post_event(obj, "Warning", FAILED_CREATE, f"a replica was refused: {refusal}")
            self.refused[key] = refusal
        return made

    def _claims_refused(self, obj: dict[str, Any], key: tuple[str, str], failed: list[BaseException]) -> bool:
        """The API server refused a replica's claim template for good (a template someone else made first
        under its name, say): the service is told once, and no replica is made."""
        refusal = next((r for error in failed if (r := refused_create(error)) is not None), None)
        if refusal is None:
            return False
        if self.refused.get(key) != refusal:
            self.kube.post_event(obj, "Warning", FAILED_CREATE, f"a replica was refused: {refusal}")
        self.refused[key] = refusal
        return True

    async def delete(self, pods: Sequence[ServingPod]) -> None:
        await all_done(*(self.kube.delete_pod(p.namespace, p.name) for p in pods))
        self.replicas.deleted(pods)


def replica_promise(pod: tuple[str, str]) -> tuple[str, str, str]:
    """The in-flight record's key for a replica pod (namespace, name) made and not seen yet."""
    return ("ReplicaPod", *pod)


def _request(service: InferenceService) -> ServingRequest:
    template_spec = service.spec.template.get("spec") or {}
    tolerations = [Toleration.from_dict(t) for t in template_spec.get("tolerations") or []]
    return ServingRequest.from_spec(service.spec, tolerations)


def _replica(pod: ServingPod) -> ServingReplica:
    # A pod not bound yet is where it was pinned; one with neither counts as lost and is replaced.
    return ServingReplica(pod.name, pod.node or pod.pinned_node or "", pod.capacity_type, pod.ready)


def _carried(changes: ServingChanges, starts: Sequence[NewReplica], answer: ServingPlan | None) -> ServingPlan:
    """CHANGES as carried out: STARTS are what the cycle granted of the new replicas wanted; how they were
    placed (or why the rest wait) is its ANSWER's to say."""
    unplaced = changes.wanted - len(starts)
    if unplaced and answer is None:
        message = f"{unplaced} new replica(s) asked of the scheduling cycle"
        return ServingPlan(tuple(starts), changes.retire, unplaced, PlanReason.SCALING, message)
    if answer is not None and (unplaced or starts):
        return ServingPlan(tuple(starts), changes.retire, unplaced, answer.reason, answer.message)
    reason, message = changes.reason_and_message()
    return ServingPlan(tuple(starts), changes.retire, 0, reason, message)
