"""Pinning the gated pods of other kinds' workloads to their nodes, and lifting their gates.

An admitted workload's pods are made by its own controller, each gated: this pins each GPU pod to a
node of its admission and lifts the gates of the whole gang together (a replacement alone, as it
comes). A model server's or a pod group's pods have no record on an object: the nodes the cycle
gave them are promised (`in_flight`) until each pod binds, and a pod placed that never binds is
given back after the bound. Every placement sent is remembered until the watch shows it, so a pod
is never placed twice.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aisched.controller.concurrency import at_most
from aisched.controller.in_flight import InFlightPlacements, Promised
from aisched.controller.workloads.book import WorkloadEntry
from aisched.controller.workloads.pods import WorkloadPod, WorkloadRef
from aisched.controller.workloads.running import admitted_as
from aisched.kube.workload_api import KIND_APIS, PodGroupOwner, PodGroups, PodGroupTakenError, WorkloadApi
from aisched.policy.workloads.model import AdmittedRecord, PodSet, Workload, WorkloadKind
from aisched.policy.workloads.pod_nodes import PodSlot, assign_nodes

PodKey = tuple[str, str]
GANG_WRITES = 16
"""One gang's pods placed at once."""


def pod_promise(namespace: str, name: str) -> tuple[str, str, str]:
    """The in-flight record's key for a pod the operator placed, until it binds or goes."""
    return ("WorkloadPod", namespace, name)


@dataclass(kw_only=True)
class PodPlacer:
    api: WorkloadApi
    in_flight: InFlightPlacements
    record_of: Callable[[Workload], AdmittedRecord | None]
    """Where a workload's current run goes: its object's record, or the one written and not seen yet."""
    pods_ready_seconds: float = 300.0
    pod_groups: PodGroups | None = None
    """Kubernetes' PodGroups, for the gangs whose pods were named into one at creation (None: never made)."""
    refused: Callable[[WorkloadEntry, str], None] = lambda entry, message: None
    """Told when a gang's pods cannot be placed as they are (a PodGroup of their name is someone else's)."""
    _groups_made: dict[WorkloadRef, dict[str, int]] = field(default_factory=dict)
    """The PodGroups made, by workload and name, with the admission each was made for: made once a run."""
    _placing: dict[PodKey, str | None] = field(default_factory=dict)
    """Pods whose pin-and-ungate was sent and is not seen yet, with the node each was given: never placed twice."""
    _promised_at: dict[PodKey, datetime] = field(default_factory=dict)
    """When each replica's or group pod's GPUs were promised: a promise its pod never binds to is not kept for good."""

    def placing(self, pod: WorkloadPod) -> bool:
        return (pod.namespace, pod.name) in self._placing

    def node_of(self, pod: WorkloadPod) -> str | None:
        """The node POD holds or was given: its own once ungated, the one its placement in flight names while gated."""
        return pod.node if not pod.gated else self._placing.get((pod.namespace, pod.name))

    def pod_seen(self, namespace: str, name: str, *, gated: bool, holding: bool = False) -> None:
        """The watch shows the pod ungated (or gone): its placement landed, or there is nothing left to place.
        HOLDING: it is bound or gone, so its promise (settled by the caller) needs no watch any more."""
        if not gated:
            self._placing.pop((namespace, name), None)
        if holding:
            self._promised_at.pop((namespace, name), None)

    def stuck(self, now: datetime) -> list[PodKey]:
        """Pods placed with a promise that have not bound within the bound: their promise is given back."""
        bound_by = now - timedelta(seconds=self.pods_ready_seconds)
        late = [pod for pod, since in self._promised_at.items() if since < bound_by]
        for pod in late:
            del self._promised_at[pod]
            self.in_flight.settle(pod_promise(*pod))
        return late

    async def place_pods(
        self, entry: WorkloadEntry, nodes: Sequence[str] | None = None, *, now: datetime | None = None
    ) -> None:
        """Pin the admitted workload's gated pods to their nodes and lift their gates: once every GPU pod
        of its first run exists (the gang binds together), then each replacement as it comes. NODES: the
        nodes the cycle gave a replica kind's or a pod group's gated pods, or the pods a running gang grew by
        (no record holds them)."""
        workload = entry.read
        if not isinstance(workload, Workload):
            return
        gpu_sets = {s.name.lower() for s in workload.gpu_pod_sets}
        # Only pods that ask what their pod set asks: a pod made to look like one of the workload's
        # (its owner named, its labels copied) asking more GPUs, or of a set it does not have, stays gated.
        live = [p for p in entry.live_pods if fits_its_set(p, workload)]
        gpu_pods = [p for p in live if p.pod_set.lower() in gpu_sets or len(workload.pod_sets) == 1]
        record = self.record_of(workload)
        promised = nodes is not None  # nodes no record holds: promised until each pod binds
        if nodes is None:
            if record is None or not admitted_as(workload, record):
                return  # no record, or its template was resized since: the cycle stops it, nothing is placed
            nodes = record.nodes
            first_run = not any(not p.gated or self.placing(p) for p in gpu_pods)
            if first_run and len(gpu_pods) < len(nodes):
                return  # its controller has not made every pod yet: the gang's gates come off together
            targets = gpu_pods
        else:
            targets = [p for p in gpu_pods if p.gated and not self.placing(p)]
        slots = [PodSlot(p.name, self.node_of(p), p.index, p.pod_set) for p in targets]
        assigned = assign_nodes(nodes, slots, [s.name for s in workload.pod_sets])
        per_pod = workload.gpu_pod_sets[0].gpus_per_pod if workload.gpu_pod_sets else 0
        places: list[tuple[WorkloadPod, str | None]] = []
        for pod in targets:
            if pod.gated and (node := assigned.get(pod.name)) is not None and self.node_of(pod) is None:
                if promised:  # a replica's, a group's or a grown gang's pod: promised until it binds
                    self.in_flight.promise(pod_promise(pod.namespace, pod.name), Promised({node: per_pod}))
                    if now is not None:
                        self._promised_at[(pod.namespace, pod.name)] = now
                places.append((pod, node))
        if record is not None or entry.kind is WorkloadKind.POD_GROUP:
            # The pods of no GPUs (a Ray head, a launcher) start with the gang, wherever kube-scheduler puts them.
            places.extend((pod, None) for pod in live if pod.gated and pod not in gpu_pods and not self.placing(pod))
        if record is not None and not await self._pod_groups_ready(entry, workload, record, places):
            return
        # Each is remembered as placing before any write is sent: a pass that overlaps this one places none twice.
        for pod, node in places:
            self._placing[(pod.namespace, pod.name)] = node
        # A gang's pods are pinned and ungated together, not one API round trip after another.
        writes = [functools.partial(self._place_one, pod, node, workload.queue) for pod, node in places]
        await at_most(GANG_WRITES, writes)

    async def _pod_groups_ready(
        self,
        entry: WorkloadEntry,
        workload: Workload,
        record: AdmittedRecord,
        places: Sequence[tuple[WorkloadPod, str | None]],
    ) -> bool:
        """The PodGroups the gang's pods to place were named into exist for this run, made with as many pods
        as are placed together, so that kube-scheduler binds them all or none. False: they stay gated."""
        named = Counter(pod.pod_group for pod, _ in places if pod.pod_group is not None)
        if not named or self.pod_groups is None:
            return True
        api = KIND_APIS[workload.kind]
        owner = PodGroupOwner(api.api_version, api.kind, workload.name, workload.uid)
        made = self._groups_made.setdefault(entry.ref, {})
        for name, pods in sorted(named.items()):
            if made.get(name) == record.generation:
                continue
            try:
                await self.pod_groups.ensure(
                    workload.namespace, name, min_count=pods, owner=owner, run=record.generation
                )
            except PodGroupTakenError as error:
                self.refused(entry, str(error))
                return False
            made[name] = record.generation
        return True

    def forget(self, ref: WorkloadRef) -> None:
        """The workload is gone, and its PodGroups with it (their owner): a namesake's are made afresh."""
        self._groups_made.pop(ref, None)

    async def _place_one(self, pod: WorkloadPod, node: str | None, queue: str) -> None:
        key = (pod.namespace, pod.name)
        try:
            await self.api.place_pod(
                pod.namespace,
                pod.name,
                node,
                pod.gates,
                has_selector=pod.has_node_selector,
                queue=queue,
                has_labels=pod.has_labels,
            )
        except Exception:
            self._placing.pop(key, None)
            raise


def fits_its_set(pod: WorkloadPod, workload: Workload) -> bool:
    """POD asks what its pod set asks (whole GPUs or a MIG instance), and its set is one WORKLOAD has."""
    pod_set: PodSet | None = workload.pod_sets[0] if len(workload.pod_sets) == 1 else None
    if pod_set is None:
        pod_set = next((s for s in workload.pod_sets if s.name.lower() == pod.pod_set.lower()), None)
    return pod_set is not None and pod.gpus == pod_set.gpus_per_pod and pod.mig_profile == pod_set.mig_profile
