"""The InferenceService reconcile loop: one writer for every InferenceService.

Watch handlers (handlers.py) record services and their pods and mark services
dirty in the controller's work queue; this loop wakes on those marks, on each
autoscaler's timer and on the queue's periodic resync. Each pass first starts
reading the metric of every service whose autoscaler is due, in the background:
no pass waits on a query, so neither placement nor another tenant's autoscaler
waits on a slow Prometheus or a slow tenant's PromQL; a reading that comes in
marks its service, and the next pass decides on it. A pass reconciles the dirty
services one by one:

1. the Service in front (server-side apply when the spec changed);
2. pods that ended, or that kube-scheduler could not bind to their node, go
   (placement.py);
3. the autoscaler, when due (autoscaling.py);
4. a rollout step: replicas retired, new ones asked of the scheduling cycle and
   those it granted started (placement.py, replica_asks.py);
5. status (`policy.serving_status`) and events say what happened and why.

A service whose reconcile fails is retried with backoff by the work queue and
never holds up the others. Pods are created under deterministic names and
recorded the moment they are created or deleted (replica_pods.py), so a pass
that runs before the watch catches up neither creates nor retires a replica twice.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from aisched.api.inference_service import InferenceService, InferenceServiceStatus
from aisched.controller.closing_namespaces import ClosingNamespaces
from aisched.controller.in_flight import CurrentSnapshot, InFlightPlacements
from aisched.controller.replica_asks import ReplicaAsks
from aisched.controller.serving.autoscaling import MetricReading, ServiceAutoscaler
from aisched.controller.serving.copies import is_older, scaled, written
from aisched.controller.serving.front import ServiceFront
from aisched.controller.serving.placement import ReplicaPlacement, replica_promise
from aisched.controller.serving.queue_share import ReplicaOwner, replicas_held
from aisched.controller.serving.replica_pods import PodKey, ReplicaPods, ServiceKey
from aisched.controller.serving.status_writer import ServiceStatusWriter
from aisched.controller.serving.templates import ServiceTemplates
from aisched.controller.sharing import GpuShares
from aisched.controller.tenancy import TenancyBook
from aisched.controller.workqueue import RefusedError, WorkQueue
from aisched.kube.claims import SHARE_ANNOTATION
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.kube.serving_builders import (
    ServingPod,
    service_selector,
    serving_pod_from_object,
)
from aisched.metrics import Metrics
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import stored_queue
from aisched.policy.scheduler import HeldGpus
from aisched.policy.serving import doomed_interrupted
from aisched.policy.serving_status import find_condition, observed_status, replica_failure, set_service_condition
from aisched.policy.shared_room import SharePart
from aisched.policy.tenancy import Refusal
from aisched.settings import Settings
from aisched.sources.prometheus import PrometheusSource

log = logging.getLogger(__name__)
MANUAL_SCALING = "spec.replicas is set by hand, kubectl scale or another autoscaler"


def utc_now() -> datetime:
    return datetime.now(UTC)


# The InferenceService's condition about the Service in front of its replicas.
SERVICE_EXPOSED = "ServiceExposed"
# Whether its queue takes it (`policy.tenancy`); set only once a queue has refused it.
ADMITTED = "Admitted"


@dataclass
class InferenceServiceController:
    settings: Settings
    kube: KubeClient
    inventory: Inventory
    cluster_snapshot: Callable[[], ClusterSnapshot]
    """Every pod's GPUs plus what other controllers have promised but not bound yet."""
    in_flight: InFlightPlacements = field(default_factory=InFlightPlacements)
    """GPUs promised and not yet written down, by every controller (`ClusterState.in_flight`)."""
    prometheus: PrometheusSource | None = None
    metrics: Metrics | None = None
    clock: Callable[[], datetime] = utc_now
    queues: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    """The Queue objects by name, as their watch keeps them (`ClusterState.queues`)."""
    services: dict[ServiceKey, dict[str, Any]] = field(default_factory=dict)
    queue: WorkQueue[ServiceKey] = field(init=False)
    replicas: ReplicaPods = field(init=False)
    placement: ReplicaPlacement = field(init=False)
    autoscaler: ServiceAutoscaler = field(init=False)
    front: ServiceFront = field(init=False)
    templates: ServiceTemplates = field(init=False)
    status_writer: ServiceStatusWriter = field(init=False)
    tenancy: TenancyBook = field(default_factory=TenancyBook)
    shares: GpuShares | None = None
    """The GPU shares handed out (`ClusterState.shares`, one record of them); None: a record of its own."""
    closing: ClosingNamespaces = field(default_factory=ClosingNamespaces)
    """Namespaces being deleted (`ClusterState.closing`): their services are left alone a while."""
    replica_asks: ReplicaAsks | None = None
    """Where new replicas are asked of the scheduling cycle (`ClusterState.replica_asks`); None: asks
    answered in this controller's passes, with no gangs to weigh them against (its tests)."""

    def __post_init__(self) -> None:
        self.queue = WorkQueue(
            name="InferenceService",
            resync_seconds=self.settings.resync_seconds,
            max_batch=self.settings.reconciles_per_pass,
        )
        self.replicas = ReplicaPods(self.settings.gpu_resource, confirmed=self._replica_confirmed)
        self.templates = ServiceTemplates(self.kube)
        asks = self.replica_asks if self.replica_asks is not None else ReplicaAsks(self.in_flight)
        asks.on_answer = self.mark
        shares = self.shares or GpuShares(self.inventory)
        self.placement = ReplicaPlacement(
            self.settings,
            self.kube,
            self.replicas,
            self.in_flight,
            self.templates,
            asks,
            shares=shares,
            closing=self.closing,
        )
        self.autoscaler = ServiceAutoscaler(self.settings, self.kube, self.prometheus, self.metrics, self._scaled)
        self.front = ServiceFront(self.kube, self.settings.relist_seconds, time.monotonic)
        self.status_writer = ServiceStatusWriter(self.kube, self.replicas, self.metrics)

    # -- fed by the watch handlers ------------------------------------------

    def service_seen(self, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if not is_older(obj, self.services.get(key)):
            self.services[key] = self.templates.kept(obj)
        self.mark(key)

    def service_gone(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self.services.pop(key, None)
        self.autoscaler.forget(key)
        self.front.forget(key)
        self.templates.forget(key)
        self.tenancy.forget(key)
        self.placement.waiting_for_capacity.discard(key)
        self.placement.asks.withdraw(key)
        self.placement.asks.take_reclaimed(key)  # its pods go with it; a namesake made later keeps its own
        self.placement.reclaimed_by.pop(key, None)
        self.placement.quota_said.pop(key, None)
        self.placement.refused.pop(key, None)
        if self.placement.shares is not None:
            self.placement.shares.note_waiting_replicas(key, None, 0, None)
        self.queue.forget(key)
        if self.metrics is not None:
            self.metrics.serving.forget_inference_service(namespace, name)
        self.queue.wake()  # its GPUs are free for whoever waits

    def pod_changed(self, obj: dict[str, Any], *, deleted: bool) -> None:
        """Any pod's watch event: ours update the replicas, anyone's may free GPUs."""
        pod = serving_pod_from_object(obj, self.settings.gpu_resource)
        if pod is None:
            self.capacity_changed()
            return
        if deleted:
            self.replicas.gone(pod)
            if SHARE_ANNOTATION in (obj["metadata"].get("annotations") or {}):
                self.placement.claim_departed(pod)
            self.capacity_changed()
        else:
            self.replicas.seen(pod)
        self.mark((pod.namespace, pod.service))

    def pods_relisted(self, pods: Iterable[ServingPod], list_version: str) -> None:
        """A full relist of replica pods at LIST_VERSION: repairs whatever a dropped watch missed."""
        for key in self.replicas.relisted(pods, list_version):
            self.mark(key)
        self.capacity_changed()  # pods of others the watch missed may have come or gone too

    def capacity_changed(self) -> None:
        """Someone else's pod came or went: services short of room may fit now."""
        for key in self.placement.waiting_for_capacity:
            self.queue.add(key)

    def node_changed(self, name: str) -> None:
        """NAME came, went, or changed as placement sees it (taints, readiness, GPUs, labels)."""
        # An interruption taint or a lost node affects the services with a replica there;
        # new room matters to those waiting for it.
        for key in self.replicas.services_on(name):
            self.queue.add(key)
        self.capacity_changed()

    def queue_changed(self, name: str) -> None:
        """Queue NAME came, changed or went: the services it takes or refuses are checked again."""
        for key, obj in self.services.items():
            if ((obj.get("spec") or {}).get("queue") or "default") == name:
                self.queue.add(key)

    def mark(self, key: ServiceKey) -> None:
        self.queue.add(key)

    # -- the loop -----------------------------------------------------------

    async def run(self) -> None:
        while True:
            dirty = await self.queue.next_batch(self.services.keys)
            try:
                await self.reconcile_once(dirty)
            except Exception:
                log.exception("InferenceService reconcile pass failed; retrying at the next wake")

    async def reconcile_once(self, dirty: Iterable[ServiceKey]) -> None:
        """One pass: the due autoscalers' reads started, then DIRTY services and those with a reading in."""
        now = self.clock()
        for key in [key for key in self.services if self._autoscale_due(key, now)]:
            self.autoscaler.start_read(key, _parse(self.services[key]), self.replicas.of(key), self.mark)
        keys = (set(dirty) | self.autoscaler.readings_in()) & self.services.keys()
        if not keys:
            return
        readings = {key: reading for key in keys if (reading := self.autoscaler.take_reading(key)) is not None}
        snapshot = CurrentSnapshot(functools.partial(self._snapshot, now), self.in_flight)

        async def reconcile(key: ServiceKey) -> None:
            try:
                await self.reconcile(key, readings.get(key), snapshot.now, now)
            except BaseException:
                # Asked again at its retry, after the backoff: not at the cycle's answer, at once.
                self.placement.asks.withdraw(key)
                raise

        # One at a time: each placement promises GPUs the next one's snapshot counts.
        await self.queue.process(keys, reconcile, concurrency=1, on_done=self._record_reconcile)

    def _record_reconcile(self, _key: ServiceKey, seconds: float, failed: bool) -> None:
        if self.metrics is not None:
            self.metrics.process.record_reconcile("InferenceService", seconds, failed=failed)

    async def reconcile(
        self,
        key: ServiceKey,
        reading: MetricReading | None,
        snapshot: Callable[[], ClusterSnapshot],
        now: datetime,
    ) -> None:
        if self.closing.closing(key[0]):
            self.placement.asks.withdraw(key)
            return
        await self.placement.delete_departed_claims(key)
        obj = self.services.get(key)
        service = _parse(obj) if obj is not None else None
        if obj is None or service is None:
            return
        queue = service.spec.queue
        refused = self.tenancy.refusal(
            key,
            queue_name=queue,
            queue=stored_queue(self.queues, queue),
            priority=service.spec.priority,
            template=service.spec.template,
        )
        if refused is not None:
            self.placement.asks.withdraw(key)
            await self.placement.retire_reclaimed(obj, key)  # what its queue borrowed goes back all the same
            await self._refused(obj, service, refused, now)
            return
        exposed = await self.front.ensure(key, service)
        await self.placement.clear_out(obj, self.replicas.of(key), now)
        status = service.status.model_copy(deep=True)
        if (admitted := find_condition(status, ADMITTED)) is not None and admitted.status != "True":
            status.conditions = set_service_condition(
                status, ADMITTED, True, "Admitted", f"queue {queue} takes it", service=service, now=now
            )
        status.conditions = set_service_condition(
            status,
            SERVICE_EXPOSED,
            exposed,
            "ServiceReady" if exposed else "ServiceNotOwned",
            f"Service {service.metadata['name']} sends traffic to the ready replicas"
            if exposed
            else f"a Service named {service.metadata['name']} exists and is not this InferenceService's: "
            "it is left as it is; delete it or rename the InferenceService",
            service=service,
            now=now,
        )
        desired = service.spec.replicas
        autoscaling = service.spec.autoscaling
        if autoscaling is not None and autoscaling.enabled:
            if reading is not None:
                desired = await self.autoscaler.decide(obj, service, status, reading, now)
        else:
            status.desired_replicas, status.current_metric_value = desired, None
            status.conditions = set_service_condition(
                status, "ScalingActive", False, "AutoscalingDisabled", MANUAL_SCALING, service=service, now=now
            )
        plan = await self.placement.place(obj, service, desired, snapshot, now)
        observed = observed_status(
            service,
            status,
            desired,
            self.replicas.of(key),
            plan,
            now=now,
            current_hash=self.templates.current_hash(service),
            selector=service_selector(str(service.metadata["name"])),
        )
        refusal = self.placement.refused.get(key)
        observed.conditions = replica_failure(observed, refusal, service=service, now=now)
        await self._write_status(obj, service, observed)
        if refusal is not None:
            raise RefusedError(f"a replica was refused: {refusal}")

    async def _refused(self, obj: dict[str, Any], service: InferenceService, refused: Refusal, now: datetime) -> None:
        """Its queue does not take it: no Service and no new replica, and its status says why.

        Replicas it already has (its queue changed since) are left as they are: taking a model
        server away is the administrator's call, not a side effect of tightening a policy.
        """
        status = service.status.model_copy(deep=True)
        before = find_condition(status, ADMITTED)
        status.conditions = set_service_condition(
            status, ADMITTED, False, refused.reason, refused.message, service=service, now=now
        )
        status.observed_generation = service.metadata.get("generation")
        if not self.replicas.of((service.metadata["namespace"], service.metadata["name"])):
            status.phase = "Pending"
        if before is None or (before.reason, before.message) != (refused.reason, refused.message):
            self.kube.post_event(obj, "Warning", refused.reason, refused.message)
        await self._write_status(obj, service, status)

    # -- 3: the autoscaler's timers and metric ---------------------------------

    def _autoscale_due(self, key: ServiceKey, now: datetime) -> bool:
        due = self.autoscaler.due(key, _parse(self.services[key]), now)
        next_due = self.autoscaler.next_due(key)
        if next_due is not None:
            # However busy the watches keep the loop, every autoscaler keeps its time.
            self.queue.add_after(key, (next_due - now).total_seconds())
        return due

    def _scaled(self, key: ServiceKey, replicas: int) -> None:
        """Our copy shows the new count at once; watch events older than the write must not undo it."""
        self.services[key] = scaled(self.services[key], replicas)

    # -- 4: the cluster placement sees ------------------------------------------

    def gpus_held(self) -> list[HeldGpus]:
        """What each service's replicas hold, by its queue, and what the cycle granted them that has no pod
        yet: the scheduling cycle charges it, and may reclaim a replica for a lending queue."""
        pods = (
            (
                ReplicaOwner(service.spec.queue, service.spec.priority, self.placement.asks.reclaiming(key)),
                self._as_held(pod),
            )
            for key, obj in self.services.items()
            if (service := _parse(obj)) is not None
            for pod in self.replicas.of(key)
        )
        return [*replicas_held(pods, self.inventory.nodes), *self.placement.asks.held(self.inventory.nodes)]

    def _as_held(self, pod: ServingPod) -> ServingPod:
        """POD charged what the inventory says it holds: a share as its claim is allocated, not as annotated;
        and the part of a GPU, or the MIG instance, its going would free (for a lending queue to reclaim)."""
        record = self.inventory.pods.get((pod.namespace, pod.name))
        if record is None:
            return pod
        share, node = record.share, record.node
        part = SharePart(node, share.device, share.milli, share.memory_mib, splits=False) if share and node else None
        mig = record.mig_profiles[0] if len(record.mig_profiles) == 1 and not record.claimed else None
        return dataclasses.replace(pod, gpu_milli=record.gpu_milli, part=part, mig_profile=mig)

    def _replica_confirmed(self, key: PodKey) -> None:
        """The watch shows a replica we made (the inventory counts it now) or its end: its promise goes."""
        self.in_flight.settle(replica_promise(key))

    def _snapshot(self, now: datetime) -> ClusterSnapshot:
        """The cluster for this pass, nodes that must be left counting as interrupted. Replicas we just made
        count through their promises (`in_flight`) until the watch shows them, in both controllers' snapshots."""
        return doomed_interrupted(self.cluster_snapshot(), self.inventory.doomed_nodes(now))

    # -- 5: status ----------------------------------------------------------

    async def _write_status(
        self, obj: dict[str, Any], service: InferenceService, status: InferenceServiceStatus
    ) -> None:
        version = await self.status_writer.write(obj, service, status)
        key = (service.metadata["namespace"], service.metadata["name"])
        if version is not None and key in self.services:
            # The version too: the watch events of earlier writes (the autoscaler's annotation),
            # still on their way, are then older and cannot put the old status back.
            self.services[key] = written(self.services[key], status.to_wire(), version)


def _parse(obj: dict[str, Any]) -> InferenceService | None:
    try:
        return InferenceService.model_validate(obj)
    except ValidationError as error:
        # The API server validated it; this means our model and the CRD differ.
        log.error("cannot read InferenceService %s: %s", obj.get("metadata", {}).get("name"), error)
        return None
