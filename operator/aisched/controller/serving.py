"""The InferenceService reconcile loop: one writer for every InferenceService.

Watch handlers (handlers.py) record services and their pods and mark services
dirty; this loop wakes on those marks and on a timer. Each pass first reads the
metric of every service whose autoscaler is due, all at once (a slow Prometheus
must not hold up placement), then reconciles the dirty services one by one
against one cluster snapshot, so two replicas never count on the same GPUs:

1. the Service in front (server-side apply when the spec changed);
2. pods that ended, or that kube-scheduler could not bind to their node, go;
3. the autoscaler, when due: metric -> `policy.autoscale.decide_replicas` ->
   spec.replicas through the scale subresource (the path `kubectl scale` and
   HPA take, so it changes nothing else in the spec and RBAC can grant just
   it), with the law's memory kept in an annotation;
4. `policy.rollout.plan_rollout` bounds a template change by surge and
   unavailability, `policy.serving.plan_serving` says where new replicas go
   (capacity mix, spread, replacing replicas on interrupted nodes first);
5. status and events say what happened and why.

Pods are created under deterministic names and recorded here the moment they
are created or deleted, so a pass that runs before the watch catches up neither
creates nor retires a replica twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from aisched.api import ConditionStatus
from aisched.api.common import CapacityType, Condition, set_condition
from aisched.api.inference_service import InferenceService, InferenceServiceStatus, ScalingDecision
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.kube.serving_builders import (
    AUTOSCALER_STATE,
    ReplicaSlot,
    ServingPod,
    build_replica_pod,
    build_service,
    free_pod_names,
    service_selector,
    serving_pod_from_object,
    template_hash,
)
from aisched.metrics import Metrics
from aisched.policy.autoscale import AutoscalerState, MetricSample, ReasonCode, ScalingBehavior
from aisched.policy.autoscale import decide_replicas as decide_autoscale
from aisched.policy.cluster import ClusterSnapshot, Toleration
from aisched.policy.rollout import plan_rollout
from aisched.policy.serving import NewReplica, PlanReason, ServingPlan, ServingReplica, ServingRequest, plan_serving
from aisched.settings import Settings
from aisched.sources.prometheus import PrometheusError, PrometheusSource

log = logging.getLogger(__name__)
Key = tuple[str, str]
PLURAL = "inferenceservices"
UNSCHEDULABLE_GRACE = timedelta(seconds=30)
"""A replica kube-scheduler cannot bind to its node this long is placed again: the node filled up meanwhile."""
SPOT_GRACE_MARGIN_SECONDS = 10
"""Of a spot notice, what a replica's pod teardown may not use, so it ends before the node does."""
MIN_SLEEP_SECONDS = 0.05
NO_PROMETHEUS = "no Prometheus is configured (AISCHED_AUTOSCALER__PROMETHEUS_URL)"


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class MetricReading:
    """What the metric source said for one service: a sample, nothing, or why it could not say."""

    sample: MetricSample | None
    error: str | None = None


@dataclass
class InferenceServiceController:
    settings: Settings
    kube: KubeClient
    inventory: Inventory
    cluster_snapshot: Callable[[], ClusterSnapshot]
    """Every pod's GPUs plus what other controllers have promised but not bound yet."""
    prometheus: PrometheusSource | None = None
    metrics: Metrics | None = None
    clock: Callable[[], datetime] = utc_now
    services: dict[Key, dict[str, Any]] = field(default_factory=dict)
    pods: dict[Key, dict[str, ServingPod]] = field(default_factory=dict)
    """Replica pods by service, then pod name."""
    _deleting: set[Key] = field(default_factory=set)
    """(namespace, pod) we deleted and whose deletion the watch has not shown yet."""
    _autoscaler_states: dict[Key, AutoscalerState] = field(default_factory=dict)
    _next_autoscale: dict[Key, datetime] = field(default_factory=dict)
    _service_applied: dict[Key, tuple[int | None, float]] = field(default_factory=dict)
    _waiting_for_capacity: set[Key] = field(default_factory=set)
    _next_resync: datetime = field(default_factory=utc_now)
    _dirty: set[Key] = field(default_factory=set)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    # -- fed by the watch handlers ------------------------------------------

    def service_seen(self, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if not _is_older(obj, self.services.get(key)):
            self.services[key] = obj
        self.mark(key)

    def service_gone(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self.services.pop(key, None)
        self._autoscaler_states.pop(key, None)
        self._next_autoscale.pop(key, None)
        self._service_applied.pop(key, None)
        self._waiting_for_capacity.discard(key)
        if self.metrics is not None:
            self.metrics.forget_inference_service(namespace, name)
        self._wake.set()  # its GPUs are free for whoever waits

    def pod_changed(self, obj: dict[str, Any], *, deleted: bool) -> None:
        """Any pod's watch event: ours update the replicas, anyone's may free GPUs."""
        pod = serving_pod_from_object(obj, self.settings.gpu_resource)
        if pod is None:
            self.capacity_changed()
            return
        key = (pod.namespace, pod.service)
        if deleted:
            self._deleting.discard((pod.namespace, pod.name))
            self.pods.get(key, {}).pop(pod.name, None)
            self.capacity_changed()
        else:
            self.pods.setdefault(key, {})[pod.name] = pod
        self.mark(key)

    def replace_pods(self, objects: Iterable[dict[str, Any]]) -> None:
        """A full relist: repairs whatever a dropped watch missed."""
        pods: dict[Key, dict[str, ServingPod]] = {}
        for obj in objects:
            pod = serving_pod_from_object(obj, self.settings.gpu_resource)
            if pod is None:
                continue
            key = (pod.namespace, pod.service)
            # The list was read while events kept coming: an event newer than it wins.
            seen = self.pods.get(key, {}).get(pod.name)
            pods.setdefault(key, {})[pod.name] = seen if seen and seen.resource_version > pod.resource_version else pod
        self.pods = pods
        listed = {(p.namespace, p.name) for by_name in pods.values() for p in by_name.values()}
        self._deleting &= listed
        self._dirty.update(self.services)
        self._wake.set()

    def capacity_changed(self) -> None:
        """Someone else's pod came or went: services short of room may fit now."""
        if self._waiting_for_capacity:
            self._dirty.update(self._waiting_for_capacity)
            self._wake.set()

    def nodes_changed(self) -> None:
        # An interruption taint or a lost node affects every service with a replica there.
        self._dirty.update(self.services)
        self._wake.set()

    def mark(self, key: Key) -> None:
        self._dirty.add(key)
        self._wake.set()

    # -- the loop -----------------------------------------------------------

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._seconds_to_next_timer())
            self._wake.clear()
            try:
                await self.reconcile_once()
            except Exception:
                log.exception("InferenceService reconcile pass failed; retrying at the next wake")

    def _seconds_to_next_timer(self) -> float:
        # However busy the watches keep the loop, the resync and every autoscaler keep their times.
        timers = [self._next_resync, *self._next_autoscale.values()]
        return max(min(timers) - self.clock(), timedelta(seconds=MIN_SLEEP_SECONDS)).total_seconds()

    async def reconcile_once(self) -> None:
        dirty, self._dirty = self._dirty, set()
        now = self.clock()
        if now >= self._next_resync:
            dirty.update(self.services)
            self._next_resync = now + timedelta(seconds=self.settings.resync_seconds)
        due = [key for key in self.services if self._autoscale_due(key, now)]
        keys = sorted((dirty | set(due)) & self.services.keys())
        readings = dict(zip(due, await asyncio.gather(*(self._read_metric(key) for key in due)), strict=True))
        snapshot = self._snapshot() if keys else None
        for key in keys:
            assert snapshot is not None
            started = time.monotonic()
            failed = False
            try:
                await self.reconcile(key, readings.get(key), snapshot, now)
            except Exception:
                failed = True
                log.exception("reconciling InferenceService %s/%s failed; will retry", *key)
                self._dirty.add(key)
            if self.metrics is not None:
                self.metrics.record_reconcile("InferenceService", time.monotonic() - started, failed=failed)

    async def reconcile(
        self, key: Key, reading: MetricReading | None, snapshot: ClusterSnapshot, now: datetime
    ) -> None:
        obj = self.services.get(key)
        service = _parse(obj) if obj is not None else None
        if obj is None or service is None:
            return
        await self._apply_service(key, service)
        await self._clear_out(obj, self._pods_of(key), now)
        status = service.status.model_copy(deep=True)
        desired = service.spec.replicas
        autoscaling = service.spec.autoscaling
        if autoscaling is not None and autoscaling.enabled:
            if reading is not None:
                desired = await self._autoscale(obj, service, status, reading, now)
        else:
            status.desired_replicas, status.current_metric_value = desired, None
            status.conditions = _set(status, "ScalingActive", False, "AutoscalingDisabled", _MANUAL, service, now)
        plan = await self._place(obj, service, desired, snapshot)
        await self._write_status(obj, service, _observed(service, status, desired, self._pods_of(key), plan, now))

    # -- 1, 2: the Service and pods that are no replicas any more -------------

    async def _apply_service(self, key: Key, service: InferenceService) -> None:
        # Applied on every spec change, and again each relist period in case someone deleted it.
        generation = service.metadata.get("generation")
        applied = self._service_applied.get(key)
        fresh = applied is not None and time.monotonic() - applied[1] < self.settings.relist_seconds
        if fresh and applied is not None and applied[0] == generation:
            return
        await self.kube.apply_service(build_service(service))
        self._service_applied[key] = (generation, time.monotonic())

    async def _clear_out(self, obj: dict[str, Any], pods: Sequence[ServingPod], now: datetime) -> None:
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
        await self._delete([*ended, *stuck])

    # -- 3: the autoscaler --------------------------------------------------

    def _autoscale_due(self, key: Key, now: datetime) -> bool:
        service = _parse(self.services[key])
        autoscaling = service.spec.autoscaling if service is not None else None
        if autoscaling is None or not autoscaling.enabled:
            self._next_autoscale.pop(key, None)
            return False
        due = self._next_autoscale.get(key)
        if due is not None and now < due:
            return False
        self._next_autoscale[key] = now + timedelta(seconds=self.settings.autoscaler.interval_seconds)
        return True

    async def _read_metric(self, key: Key) -> MetricReading:
        service = _parse(self.services[key])
        if service is None or service.spec.autoscaling is None:
            return MetricReading(None)
        if self.prometheus is None:
            return MetricReading(None, NO_PROMETHEUS)
        pods = sorted(p.name for p in self._pods_of(key) if p.serving_candidate)
        try:
            sample = await self.prometheus.service_metric(service.spec.autoscaling.metric, key[0], pods)
        except PrometheusError as error:
            return MetricReading(None, str(error))
        except Exception as error:  # one service's metric must not stop the others' reconciles
            log.exception("reading the metric of InferenceService %s/%s failed", *key)
            return MetricReading(None, f"reading the metric failed: {error}")
        return MetricReading(sample)

    async def _autoscale(
        self,
        obj: dict[str, Any],
        service: InferenceService,
        status: InferenceServiceStatus,
        reading: MetricReading,
        now: datetime,
    ) -> int:
        """One autoscaler decision, carried out; returns the replica count it settled on."""
        autoscaling = service.spec.autoscaling
        assert autoscaling is not None
        namespace, name = service.metadata["namespace"], service.metadata["name"]
        key = (namespace, name)
        current = service.spec.replicas
        behavior = ScalingBehavior.from_spec(autoscaling, self.settings.autoscaler.metric_max_age_seconds)
        state = self._autoscaler_states.get(key) or AutoscalerState.from_json(
            (service.metadata.get("annotations") or {}).get(AUTOSCALER_STATE)
        )
        decision = decide_autoscale(behavior, state, current, reading.sample, now)
        message = f"{decision.message} ({reading.error})" if reading.error else decision.message
        previous = _condition(status, "ScalingActive")
        if decision.replicas != current:
            await self.kube.scale_custom(PLURAL, namespace, name, decision.replicas)
            self._scaled(key, decision.replicas)
            status.last_scaling = ScalingDecision(
                time=now, from_replicas=current, to_replicas=decision.replicas, reason=f"{decision.reason}: {message}"
            )
            self.kube.post_event(obj, "Normal", decision.reason, message)
        elif decision.reason == ReasonCode.METRIC_UNAVAILABLE and (previous is None or previous.status != "False"):
            self.kube.post_event(obj, "Warning", decision.reason, message)
        self._autoscaler_states[key] = decision.state
        await self.kube.annotate_custom(PLURAL, namespace, name, {AUTOSCALER_STATE: decision.state.to_json()})
        status.desired_replicas = decision.replicas
        status.current_metric_value = decision.metric_per_replica
        active = decision.reason != ReasonCode.METRIC_UNAVAILABLE
        status.conditions = _set(status, "ScalingActive", active, decision.reason, message, service, now)
        if self.metrics is not None:
            self.metrics.record_autoscaler_decision(current, decision.replicas, decision.reason)
        return decision.replicas

    def _scaled(self, key: Key, replicas: int) -> None:
        """Our copy shows the new count at once; watch events older than the write must not undo it."""
        obj = self.services[key]
        metadata = {**obj["metadata"], "generation": int(obj["metadata"].get("generation") or 0) + 1}
        self.services[key] = {**obj, "metadata": metadata, "spec": {**obj["spec"], "replicas": replicas}}

    # -- 4: placement and rollout --------------------------------------------

    async def _place(
        self, obj: dict[str, Any], service: InferenceService, desired: int, snapshot: ClusterSnapshot
    ) -> ServingPlan:
        key = (service.metadata["namespace"], service.metadata["name"])
        pods = [p for p in self._pods_of(key) if p.serving_candidate]
        current_hash = template_hash(service)
        current = [_replica(p) for p in pods if p.template_hash == current_hash]
        old = [_replica(p) for p in pods if p.template_hash != current_hash]
        rollout = service.spec.rollout
        step = plan_rollout(current, old, desired, rollout.max_surge, rollout.max_unavailable)
        plan = plan_serving(current, step.current_target, self._request(service), snapshot)
        await self._start(obj, service, current_hash, plan.start, snapshot)
        by_name = {p.name: p for p in pods}
        await self._delete([by_name[name] for name in (*plan.retire, *step.retire_old) if name in by_name])
        if plan.retire or step.retire_old:
            self.kube.post_event(
                obj, "Normal", "ReplicasRetired", f"retired {', '.join((*plan.retire, *step.retire_old))}"
            )
        if plan.unplaced:
            self._waiting_for_capacity.add(key)
        else:
            self._waiting_for_capacity.discard(key)
        return plan

    def _request(self, service: InferenceService) -> ServingRequest:
        template_spec = service.spec.template.get("spec") or {}
        tolerations = [Toleration.from_dict(t) for t in template_spec.get("tolerations") or []]
        return ServingRequest.from_spec(service.spec, tolerations)

    async def _start(
        self,
        obj: dict[str, Any],
        service: InferenceService,
        current_hash: str,
        starts: Sequence[NewReplica],
        snapshot: ClusterSnapshot,
    ) -> None:
        if not starts:
            return
        key = (service.metadata["namespace"], service.metadata["name"])
        taken = set(self.pods.get(key, {}))
        names = free_pod_names(key[1], current_hash, taken, len(starts))
        grace = max(5, self.settings.spot_notice_seconds - SPOT_GRACE_MARGIN_SECONDS)
        pods = [
            build_replica_pod(
                service,
                ReplicaSlot(pod_name, start.node, CapacityType(start.capacity_type), current_hash),
                gpu_resource=self.settings.gpu_resource,
                spot_grace_seconds=grace,
            )
            for pod_name, start in zip(names, starts, strict=True)
        ]
        try:
            await asyncio.gather(*(self.kube.create(pod) for pod in pods))
        except ApiException as error:
            if error.status == 403 and "NamespaceTerminating" in str(error.body):
                return  # the namespace is going, and the service with it
            raise
        for built in pods:
            # The watch may have told us more already (bound, ready): never overwrite it with what we sent.
            pod = serving_pod_from_object(built, self.settings.gpu_resource)
            assert pod is not None
            self.pods.setdefault(key, {}).setdefault(pod.name, pod)
        snapshot.allocate(_gpus_by_node(service.spec.gpus_per_replica, (s.node for s in starts)))
        described = ", ".join(
            f"{name} on {s.node} ({s.capacity_type})" + (f" replacing {s.replaces}" if s.replaces else "")
            for name, s in zip(names, starts, strict=True)
        )
        self.kube.post_event(obj, "Normal", "ReplicasStarted", f"started {described}")

    async def _delete(self, pods: Sequence[ServingPod]) -> None:
        await asyncio.gather(*(self.kube.delete_pod(p.namespace, p.name) for p in pods))
        self._deleting.update((p.namespace, p.name) for p in pods)

    def _pods_of(self, key: Key) -> list[ServingPod]:
        return [
            replace(p, terminating=True) if (p.namespace, p.name) in self._deleting else p
            for _, p in sorted(self.pods.get(key, {}).items())
        ]

    def _snapshot(self) -> ClusterSnapshot:
        """The cluster for this pass: nodes that must be left count as interrupted, pods we just made as used."""
        base = self.cluster_snapshot()
        doomed = self.inventory.doomed_nodes()
        snapshot = ClusterSnapshot(replace(n, interrupted=n.interrupted or n.name in doomed) for n in base.nodes())
        unbound: dict[str, int] = {}
        for by_name in self.pods.values():
            for pod in by_name.values():
                node = pod.pinned_node
                # The inventory counts pinned pods once the watch has seen them; before that, we do.
                known = (pod.namespace, pod.name) in self.inventory.pods
                if pod.node is None and not pod.finished and node is not None and node in snapshot and not known:
                    unbound[node] = unbound.get(node, 0) + pod.gpus
        snapshot.allocate(unbound)
        return snapshot

    # -- 5: status ----------------------------------------------------------

    async def _write_status(
        self, obj: dict[str, Any], service: InferenceService, status: InferenceServiceStatus
    ) -> None:
        namespace, name = service.metadata["namespace"], service.metadata["name"]
        if self.metrics is not None:
            self.metrics.record_inference_service(
                namespace,
                name,
                desired=status.desired_replicas or 0,
                on_demand=status.on_demand_replicas or 0,
                spot=status.spot_replicas or 0,
                metric_per_replica=status.current_metric_value,
                target_per_replica=(
                    service.spec.autoscaling.metric.target_per_replica if service.spec.autoscaling else None
                ),
            )
            self.metrics.record_job_pods(
                namespace, name, "InferenceService", [p.name for p in self._pods_of((namespace, name))]
            )
        await self._post_condition_events(obj, service.status, status)
        if status == service.status:
            return
        wire = status.to_wire()
        if status.current_metric_value is None and service.status.current_metric_value is not None:
            wire["currentMetricValue"] = None  # merge patch: null removes the field
        await self.kube.patch_status(PLURAL, namespace, name, wire)
        key = (namespace, name)
        if key in self.services:
            self.services[key] = {**self.services[key], "status": status.to_wire()}

    async def _post_condition_events(
        self, obj: dict[str, Any], before: InferenceServiceStatus, after: InferenceServiceStatus
    ) -> None:
        """An event when placement gets stuck or starts replacing interrupted replicas, once per change."""
        was, now = _condition(before, "Progressing"), _condition(after, "Progressing")
        if now is None or (was is not None and was.reason == now.reason):
            return
        if now.reason in (PlanReason.INSUFFICIENT_CAPACITY, PlanReason.ON_DEMAND_FLOOR_UNMET):
            self.kube.post_event(obj, "Warning", now.reason, now.message)
        elif now.reason == PlanReason.REPLACING_INTERRUPTED:
            self.kube.post_event(obj, "Normal", now.reason, now.message)


_MANUAL = "spec.replicas is set by hand, kubectl scale or another autoscaler"


def _is_older(incoming: dict[str, Any], cached: dict[str, Any] | None) -> bool:
    """The same object at an older generation: a watch event from before our own scale write."""
    if cached is None or incoming["metadata"].get("uid") != cached["metadata"].get("uid"):
        return False
    return int(incoming["metadata"].get("generation") or 0) < int(cached["metadata"].get("generation") or 0)


def _parse(obj: dict[str, Any]) -> InferenceService | None:
    try:
        return InferenceService.model_validate(obj)
    except ValidationError as error:
        # The API server validated it; this means our model and the CRD differ.
        log.error("cannot read InferenceService %s: %s", obj.get("metadata", {}).get("name"), error)
        return None


def _replica(pod: ServingPod) -> ServingReplica:
    # A pod not bound yet is where it was pinned; one with neither counts as lost and is replaced.
    return ServingReplica(pod.name, pod.node or pod.pinned_node or "", pod.capacity_type, pod.ready)


def _gpus_by_node(gpus: int, nodes: Iterable[str]) -> dict[str, int]:
    total: dict[str, int] = {}
    for node in nodes:
        total[node] = total.get(node, 0) + gpus
    return total


def _condition(status: InferenceServiceStatus, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)


def _set(
    status: InferenceServiceStatus,
    type_: str,
    true: bool,
    reason: str,
    message: str,
    service: InferenceService,
    now: datetime,
) -> list[Condition]:
    return set_condition(
        status.conditions,
        type_,
        ConditionStatus.TRUE if true else ConditionStatus.FALSE,
        reason,
        message,
        now=now,
        generation=service.metadata.get("generation"),
    )


def _observed(
    service: InferenceService,
    status: InferenceServiceStatus,
    desired: int,
    pods: Sequence[ServingPod],
    plan: ServingPlan,
    now: datetime,
) -> InferenceServiceStatus:
    """Status from the replicas as they are after this pass's actions."""
    live = [p for p in pods if p.serving_candidate]
    ready = sum(p.ready for p in live)
    current_hash = template_hash(service)
    updated = sum(p.template_hash == current_hash for p in live)
    min_available = max(desired - service.spec.rollout.max_unavailable, 0)
    status.observed_generation = service.metadata.get("generation")
    status.replicas = len(live)
    status.ready_replicas = ready
    status.on_demand_replicas = sum(p.capacity_type == CapacityType.ON_DEMAND for p in live)
    status.spot_replicas = sum(p.capacity_type == CapacityType.SPOT for p in live)
    status.selector = service_selector(str(service.metadata["name"]))
    if status.desired_replicas is None:
        status.desired_replicas = desired
    available = ready >= min_available and (ready > 0 or desired == 0)
    status.conditions = _set(
        status,
        "Available",
        available,
        "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
        f"{ready} of {desired} replica(s) ready; at least {min_available} must be",
        service,
        now,
    )
    done = updated == len(live) == ready == desired
    if plan.reason in (PlanReason.INSUFFICIENT_CAPACITY, PlanReason.ON_DEMAND_FLOOR_UNMET):
        reason, message = plan.reason.value, plan.message
    elif updated < len(live):
        reason, message = "RollingOut", f"{updated} of {len(live)} replica(s) run the current template"
    elif done:
        reason, message = "Complete", f"{desired} replica(s) of the current template ready"
    else:
        reason, message = plan.reason.value, plan.message
    status.conditions = _set(
        status, "Progressing", plan.reason != PlanReason.INSUFFICIENT_CAPACITY, reason, message, service, now
    )
    status.phase = _phase(desired, len(live), ready, min_available, done)
    return status


def _phase(desired: int, live: int, ready: int, min_available: int, done: bool) -> str:
    if desired == 0 and live == 0:
        return "Idle"
    if done:
        return "Running"
    if ready == 0:
        return "Pending"
    if ready < min_available:
        return "Degraded"
    return "Progressing"
