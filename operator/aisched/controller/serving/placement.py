"""Steps 2 and 4 of a pass: replicas that are no replicas any more go, and new ones are placed.

`policy.rollout.plan_rollout` bounds a template change by surge and
unavailability, `policy.serving.plan_serving` says where new replicas go
(capacity mix, spread, replacing replicas on interrupted nodes first); this
module carries their plans out and tells the service's events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aisched.api.common import CapacityType
from aisched.api.inference_service import InferenceService
from aisched.controller.in_flight import InFlightPlacements, Promised, gpus_by_node
from aisched.controller.serving.replica_pods import ReplicaPods, ServiceKey
from aisched.controller.serving.templates import ServiceTemplates
from aisched.controller.sharing import GpuShares, ShareDoesNotFitError
from aisched.kube.api_errors import namespace_closing, refused_create
from aisched.kube.builders import owner_reference
from aisched.kube.client import KubeClient
from aisched.kube.serving_builders import ReplicaSlot, ServingPod, build_replica_pod, free_pod_names
from aisched.policy.cluster import ClusterSnapshot, Toleration
from aisched.policy.rollout import plan_rollout
from aisched.policy.serving import NewReplica, ServingPlan, ServingReplica, ServingRequest, plan_serving
from aisched.settings import Settings

UNSCHEDULABLE_GRACE = timedelta(seconds=30)
"""A replica kube-scheduler cannot bind to its node this long is placed again: the node filled up meanwhile."""
FAILED_CREATE = "FailedCreate"
"""Why a service's new replica does not exist: the API server refused its pod."""
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
    waiting_for_capacity: set[ServiceKey] = field(default_factory=set)
    """Services with replicas that fit nowhere: someone else's pod going may make room."""
    refused: dict[ServiceKey, str] = field(default_factory=dict)
    """What the API server said refusing a service's last new replica (admission, an invalid
    template); gone once one is created."""
    shares: GpuShares | None = None
    """Which GPU each replica of a service with gpuShare gets, and its claim."""

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
        self, obj: dict[str, Any], service: InferenceService, desired: int, snapshot: Callable[[], ClusterSnapshot]
    ) -> ServingPlan:
        """Start and retire replicas toward DESIRED, a rollout step at a time; returns the placement plan.

        SNAPSHOT gives the cluster as of now, promises of decisions under way included: it is asked
        right before planning, with no wait between that and the promise of the new replicas' GPUs."""
        key = (service.metadata["namespace"], service.metadata["name"])
        pods = [p for p in self.replicas.of(key) if p.serving_candidate]
        current_hash = self.templates.current_hash(service)
        current = [_replica(p) for p in pods if p.template_hash == current_hash]
        old = [_replica(p) for p in pods if p.template_hash != current_hash]
        rollout = service.spec.rollout
        step = plan_rollout(current, old, desired, rollout.max_surge, rollout.max_unavailable)
        plan = plan_serving(current, step.current_target, _request(service), snapshot())
        await self._start(obj, service, current_hash, plan.start)
        by_name = {p.name: p for p in pods}
        await self.delete([by_name[name] for name in (*plan.retire, *step.retire_old) if name in by_name])
        if plan.retire or step.retire_old:
            self.kube.post_event(
                obj, "Normal", "ReplicasRetired", f"retired {', '.join((*plan.retire, *step.retire_old))}"
            )
        if plan.unplaced:
            self.waiting_for_capacity.add(key)
        else:
            self.waiting_for_capacity.discard(key)
        if self.shares is not None:  # for the stranded-GPU measure, and a MIG repartition
            self.shares.note_waiting_replicas(key, service.spec.gpu_share, plan.unplaced, service.spec.gpu_type)
        return plan

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
        promise = ("InferenceService", key)
        self.in_flight.promise(promise, _promised(service, starts))
        try:
            made = await self._create(obj, service, current_hash, starts)
            # Each pod made holds its promise until the watch shows it (then the inventory counts it), as
            # kube-scheduler "assumes" a pod until its bind is seen: the TrainingJob cycle counts it too.
            for pod, start in made:
                pod_key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                if self.replicas.unconfirmed(pod_key):
                    self.in_flight.promise(replica_promise(pod_key), _promised(service, [start]))
        finally:
            self.in_flight.settle(promise)  # each pod made holds its own now (or none was made)

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
                self.shares.note_waiting_replicas(key, service.spec.gpu_share, waiting, service.spec.gpu_type)
                return []
            await asyncio.gather(*(self.kube.create(claim) for claim in claims))
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
                continue  # the namespace is going, and the service with it
            refusal = refused_create(error)
            if refusal is None:
                raise error
            if self.refused.get(key) != refusal:
                self.kube.post_event(obj, "Warning", FAILED_CREATE, f"a replica was refused: {refusal}")
            self.refused[key] = refusal
        return made

    async def delete(self, pods: Sequence[ServingPod]) -> None:
        await asyncio.gather(*(self.kube.delete_pod(p.namespace, p.name) for p in pods))
        self.replicas.deleted(pods)


def replica_promise(pod: tuple[str, str]) -> tuple[str, str, str]:
    """The in-flight record's key for a replica pod (namespace, name) made and not seen yet."""
    return ("ReplicaPod", *pod)


def _promised(service: InferenceService, starts: Sequence[NewReplica]) -> Promised:
    """What new replicas take while their pods are made: a fraction's planned part of a GPU (a whole
    GPU only where it splits a free one), a MIG instance, or whole GPUs."""
    share = service.spec.gpu_share
    if share is not None and share.mig_profile is not None:
        return Promised({}, mig=tuple((s.node, share.mig_profile) for s in starts))
    if share is not None:
        parts = tuple(s.part for s in starts if s.part is not None)
        return Promised(gpus_by_node([p.node for p in parts if p.splits], 1), parts)
    return Promised(gpus_by_node([s.node for s in starts], service.spec.gpus_per_replica))


def _request(service: InferenceService) -> ServingRequest:
    template_spec = service.spec.template.get("spec") or {}
    tolerations = [Toleration.from_dict(t) for t in template_spec.get("tolerations") or []]
    return ServingRequest.from_spec(service.spec, tolerations)


def _replica(pod: ServingPod) -> ServingReplica:
    # A pod not bound yet is where it was pinned; one with neither counts as lost and is replaced.
    return ServingReplica(pod.name, pod.node or pod.pinned_node or "", pod.capacity_type, pod.ready)
