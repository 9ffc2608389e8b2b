"""What the other kinds' workloads ask of one cycle: the shapes of the ask, and the asks of pods placed one by one.

A gang kind is asked whole (`cycle.py`). Pods the cycle places one at a time are asked here: a model
server's replicas, a plain pod group once all its pods exist, and the workers a running RayCluster
grows by (its in-tree autoscaler raising a worker group's `replicas`, or a hand edit). Each of these
is asked as a replica set: as many as free GPUs and the queue's quota hold, from one up, preempting
no one; those placed are charged to the queue as held GPUs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final

from aisched.controller.workloads.book import WorkloadEntry
from aisched.controller.workloads.placing import PodKey, PodPlacer, fits_its_set
from aisched.controller.workloads.pods import WorkloadPod
from aisched.controller.workloads.running import gpu_pods
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.policy.queueing import MILLI
from aisched.policy.scheduler import HeldGpus, HeldReplica, JobRequest
from aisched.policy.workloads.model import AdmittedRecord, Workload, WorkloadKind
from aisched.policy.workloads.pod_nodes import shrunk_record
from aisched.policy.workloads.request import as_request, pod_milli

GROWTH_MARK: Final = "~growth"
"""Ends the key of a running gang's request for the pods it grew by: apart from the gang's own request."""
GROWING_KINDS: Final = frozenset({WorkloadKind.RAY_CLUSTER, WorkloadKind.RAY_JOB})
"""Gang kinds whose running object changes its pod count in place: KubeRay scales a worker group up and down."""


def workload_key(request_key: str) -> str:
    """The workload a request of the cycle is for (a growth request's too)."""
    return request_key.removesuffix(GROWTH_MARK)


@dataclass(frozen=True, slots=True)
class Stop:
    entry: WorkloadEntry
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class CycleAsk:
    """What the workloads ask of one cycle."""

    requests: tuple[JobRequest, ...]
    held: tuple[HeldGpus, ...]
    stops: tuple[Stop, ...]
    at_once: tuple[WorkloadEntry, ...]
    """Held workloads that ask no GPU: nothing to decide, admitted as they come."""
    stuck: tuple[tuple[str, str], ...] = ()
    """Pods a replica kind or a pod group was placed with that never bound within the bound: deleted (their
    controller makes them again, gated), their promise given back."""
    interrupted: tuple[tuple[WorkloadEntry, str], ...] = ()
    """A model server's replicas on nodes that announced their end: deleted, with their termination grace to
    drain; their controller makes them again, gated, for the cycle to place elsewhere."""
    shrinks: tuple[tuple[WorkloadEntry, tuple[str, ...]], ...] = ()
    """Running gangs scaled down in place (a RayCluster's autoscaler): the record each keeps (`shrunk_record`);
    the places it no longer wants go back to its queue and the cluster once the record is rewritten."""


@dataclass
class Asking:
    """A cycle's ask as it is gathered, workload by workload."""

    now: datetime
    doomed: frozenset[str] = frozenset()
    reclaiming: frozenset[PodKey] = frozenset()
    """Pods a lending queue took back, their deletes sent and not seen yet: charged, never offered again."""
    requests: list[JobRequest] = field(default_factory=list)
    held: list[HeldGpus] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    at_once: list[WorkloadEntry] = field(default_factory=list)
    stuck: list[tuple[str, str]] = field(default_factory=list)
    interrupted: list[tuple[WorkloadEntry, str]] = field(default_factory=list)
    shrinks: list[tuple[WorkloadEntry, tuple[str, ...]]] = field(default_factory=list)

    def frozen(self) -> CycleAsk:
        return CycleAsk(
            tuple(self.requests),
            tuple(self.held),
            tuple(self.stops),
            tuple(self.at_once),
            tuple(self.stuck),
            tuple(self.interrupted),
            tuple(self.shrinks),
        )


def ask_replicas(
    placer: PodPlacer, entry: WorkloadEntry, workload: Workload, snapshot: ClusterSnapshot, asking: Asking
) -> None:
    """A model server's replicas: those placed are charged to its queue (those on a node that announced its
    end go, to be made again elsewhere); the gated ones ask, any number."""
    per_pod = pod_milli(workload)
    for pod in entry.live_pods:
        if not pod.gated or placer.placing(pod):
            # What its set asks (a MIG instance's share included), or more should a pod ask more than that.
            asking.held.append(held(workload, pod, max(per_pod, pod.gpus * MILLI), snapshot, asking))
            if not pod.gated and pod.node in asking.doomed and not pod.terminating:
                asking.interrupted.append((entry, pod.name))
    waiting = [p for p in entry.live_pods if p.gated and not placer.placing(p) and fits_its_set(p, workload)]
    if waiting:
        request = as_request(workload, topology=snapshot.topology, placement=None, excluded_nodes=asking.doomed)
        asking.requests.append(as_replicas(request, len(waiting)))


def ask_group(
    placer: PodPlacer, entry: WorkloadEntry, workload: Workload, snapshot: ClusterSnapshot, asking: Asking
) -> None:
    """A plain pod group: placed once all its pods exist, charged on the nodes its placed pods took."""
    nodes = tuple(node for p in entry.live_pods if (node := placer.node_of(p)) is not None)
    if nodes:
        placement = Placement.of_nodes(nodes, workload.gpu_pod_sets[0].gpus_per_pod, snapshot)
        asking.requests.append(as_request(workload, topology=snapshot.topology, placement=placement))
        return
    if len([p for p in entry.live_pods if p.gated]) >= workload.gpu_pods:
        request = as_request(workload, topology=snapshot.topology, placement=None, excluded_nodes=asking.doomed)
        asking.requests.append(request)


def ask_growth(
    placer: PodPlacer,
    entry: WorkloadEntry,
    workload: Workload,
    snapshot: ClusterSnapshot,
    asking: Asking,
    *,
    record: AdmittedRecord,
) -> None:
    """The GPU pods a running gang made beyond its admission (a RayCluster scaled up in place): those placed are
    charged to its queue, one replica each, on top of the gang's record; the gated ones ask as new replicas once
    every pod of the record is placed (until then a new pod takes a place of the record, as a replacement does).

    Its queue's quota bounds the growth (the autoscaler's pods beyond it stay gated, and the autoscaler sees them
    pending). A scale-down below the record gives back the places no pod takes beyond what its spec still wants
    (`shrunk_record`): the record is rewritten, and scaling back up is growth again."""
    if entry.kind not in GROWING_KINDS or not record.nodes:
        return
    pods = [p for p in gpu_pods(entry, workload) if p.live and fits_its_set(p, workload)]
    placed = [(p, placer.node_of(p)) for p in pods]
    if record is workload.admitted:  # seen on the object: a record still being written is never shrunk
        kept = shrunk_record(record.nodes, [(p.name, n) for p, n in placed if n is not None], workload.gpu_pods)
        if kept is not None:
            asking.shrinks.append((entry, kept))
    grown, free_slots = beyond_record(record.nodes, placed)
    waiting = [p for p in pods if p.gated and not placer.placing(p)]
    asking.held.extend(held(workload, pod, pod_milli(workload), snapshot, asking) for pod in grown)
    if waiting and not free_slots:
        request = as_request(workload, topology=snapshot.topology, placement=None, excluded_nodes=asking.doomed)
        asking.requests.append(replace(as_replicas(request, len(waiting)), key=workload.key + GROWTH_MARK))


def beyond_record(
    nodes: Sequence[str], pods: Sequence[tuple[WorkloadPod, str | None]]
) -> tuple[list[WorkloadPod], int]:
    """The placed PODS (each with its node, None: not placed) beyond what the record NODES holds on each node, and
    how many of the record's places no pod takes. On a node, the record's places go to its bound pods first, by
    name: what a pod beyond them frees when it goes is no place of the record (which its gang's charge holds)."""
    free = Counter(nodes)
    beyond: list[WorkloadPod] = []
    placed = [(pod, node) for pod, node in pods if node is not None]
    for pod, node in sorted(placed, key=lambda x: (not x[0].bound, x[0].name)):
        if free[node] > 0:
            free[node] -= 1
        else:
            beyond.append(pod)
    return beyond, sum(free.values())


def held(workload: Workload, pod: WorkloadPod, milli: int, snapshot: ClusterSnapshot, asking: Asking) -> HeldGpus:
    """What POD, placed one by one, holds for WORKLOAD's queue: once bound, on its own (`HeldReplica`), so that a
    lending queue may take back what its queue borrows through it, as it may an InferenceService's replica."""
    node = snapshot.node(pod.node) if pod.node is not None and pod.node in snapshot else None
    product = node.gpu_product if node is not None else None
    if node is None or not pod.bound or not pod.live or (pod.namespace, pod.name) in asking.reclaiming:
        return HeldGpus(workload.queue, milli, product)
    replica = HeldReplica(
        workload.key,
        pod.name,
        node.name,
        0 if pod.mig_profile is not None else max(pod.gpus, 0),
        workload.priority,
        mig_profile=pod.mig_profile,
    )
    return HeldGpus(workload.queue, milli, product, replica)


def as_replicas(request: JobRequest, waiting: int) -> JobRequest:
    """REQUEST as pods placed one by one: any count from one to WAITING, none preempting."""
    return replace(request, replicas=waiting, min_replicas=1, max_replicas=waiting, replica_set=True)


def any_placed(entry: WorkloadEntry) -> bool:
    """Some live pod of ENTRY runs ungated (the operator placed it): whatever its object says now, it holds GPUs."""
    return any(p.live and not p.gated and p.gpus != 0 for p in entry.pods.values())


def resized(workload: Workload, record: AdmittedRecord) -> str:
    shape = workload.gpu_pod_sets[0] if workload.gpu_pod_sets else None
    now = "no GPU" if shape is None else (shape.mig_profile or f"{shape.gpus_per_pod} GPU(s)")
    was = record.mig_profile or f"{record.gpus_per_pod} GPU(s)"
    return (
        f"its pods' GPUs were changed from {was} to {now} per pod while it ran: stopped, to be admitted "
        "again at its new size (it is charged what it was admitted with until its pods are gone)"
    )


def interrupted(nodes: list[str]) -> str:
    return (
        f"node(s) {', '.join(nodes)} of its pods announced their end (a spot interruption, or lost): suspended, "
        "its pods given their termination grace to checkpoint; it resumes when admitted again, ahead of newcomers"
    )
