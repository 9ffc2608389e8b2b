"""What a running workload asks of each cycle and holds before its pods do, kept while nothing it rests on changes.

Most of a busy cluster's workloads are running, and each cycle asked every one of them again: its
request rebuilt from its object and record, its placement from the snapshot, its record's holds
from its pods. Each answer is kept with what it was derived from (the object's read, the record,
the snapshot's layout, the entry's revision) and given again until one of them changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from aisched.controller.workloads.book import WorkloadEntry
from aisched.controller.workloads.pods import WorkloadPod, WorkloadRef
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.policy.scheduler import JobRequest
from aisched.policy.workloads.model import AdmittedRecord, Workload
from aisched.policy.workloads.request import as_request, milli_of


@dataclass
class RunningWorkloads:
    _asks: dict[WorkloadRef, tuple[Workload, AdmittedRecord, object, JobRequest]] = field(default_factory=dict)
    _holds: dict[WorkloadRef, tuple[int, AdmittedRecord, dict[str, int]]] = field(default_factory=dict)
    _holding: dict[WorkloadRef, tuple[int, Mapping[str | None, int]]] = field(default_factory=dict)

    def ask(
        self, entry: WorkloadEntry, workload: Workload, record: AdmittedRecord, snapshot: ClusterSnapshot
    ) -> JobRequest:
        """What a running workload asks: to stay where its record says, at the size it was admitted at (the
        executor resizes no running workload)."""
        kept = self._asks.get(entry.ref)
        if kept is not None and kept[0] is workload and kept[1] is record and kept[2] is snapshot.layout:
            return kept[3]
        placement = Placement.of_nodes(record.nodes, record.gpus_per_pod, snapshot)
        request = fixed(as_request(workload, topology=snapshot.topology, placement=placement))
        self._asks[entry.ref] = (workload, record, snapshot.layout, request)
        return request

    def held_by_record(self, entry: WorkloadEntry, workload: Workload, record: AdmittedRecord) -> dict[str, int]:
        """Whole GPUs, by node, RECORD holds for the GPU pods of it not bound yet."""
        kept = self._holds.get(entry.ref)
        if kept is not None and kept[0] == entry.revision and kept[1] is record:
            return kept[2]
        bound = Counter(p.node for p in gpu_pods(entry, workload) if p.bound and p.live)
        held: dict[str, int] = {}
        for node, pods in Counter(record.nodes).items():
            if (left := pods - bound[node]) > 0:
                held[node] = left * record.gpus_per_pod
        self._holds[entry.ref] = (entry.revision, record, held)
        return held

    def holding(self, entry: WorkloadEntry) -> Mapping[str | None, int]:
        """What ENTRY's bound, unfinished pods hold (terminating ones too), in thousandths, as kube-scheduler
        counts them (whole GPUs, a MIG instance at its share), by the queue each pod's operator label names
        (None: a pod not placed by this operator): what each queue is charged at least (kept while its pods
        do not change)."""
        kept = self._holding.get(entry.ref)
        if kept is not None and kept[0] == entry.revision:
            return kept[1]
        held: dict[str | None, int] = {}
        for pod in entry.pods.values():
            if pod.bound and not pod.done:
                held[pod.charged_queue] = held.get(pod.charged_queue, 0) + pod_holds(pod)
        self._holding[entry.ref] = (entry.revision, held)
        return held

    def forget(self, ref: WorkloadRef) -> None:
        self._asks.pop(ref, None)
        self._holds.pop(ref, None)
        self._holding.pop(ref, None)


def pod_holds(pod: WorkloadPod) -> int:
    """What POD holds once bound, in thousandths: its whole GPUs, or its MIG instance's share of one GPU."""
    return milli_of(pod.gpus, pod.mig_profile)  # gpus -1: a spec that cannot be read, never placed by aisched


def admitted_as(workload: Workload, record: AdmittedRecord) -> bool:
    """WORKLOAD's GPU pods still ask what RECORD admitted them with (whole GPUs each, or a MIG profile).

    A tenant may edit a running workload's template (a PyTorchJob's, a RayCluster's: their CRDs let
    it); pods made after that ask the new size, while the record charges the old. Such a workload is
    stopped and admitted again at its new size, and none of its pods is placed meanwhile."""
    shape = workload.gpu_pod_sets[0] if workload.gpu_pod_sets else None
    if shape is None or not record.nodes:
        return shape is None and not record.nodes
    if shape.mig_profile is not None or record.mig_profile is not None:
        return shape.mig_profile == record.mig_profile
    return shape.gpus_per_pod == record.gpus_per_pod


def gpu_pods(entry: WorkloadEntry, workload: Workload) -> list[WorkloadPod]:
    """ENTRY's pods of WORKLOAD's GPU pod sets (all its pods when it has one set)."""
    gpu_sets = {s.name.lower() for s in workload.gpu_pod_sets}
    return [p for p in entry.pods.values() if p.pod_set.lower() in gpu_sets or len(workload.pod_sets) == 1]


def fixed(request: JobRequest) -> JobRequest:
    """REQUEST at its one size: never admitted smaller, never shrunk or grown."""
    return replace(request, min_replicas=None, max_replicas=None)
