"""Any kind of work as the scheduler sees it: a workload of pod sets. Pure.

A team's PyTorchJob, RayCluster, Indexed Job, vLLM Deployment or group of plain pods is read
(`policy.workloads.kinds`) into one `Workload`: the pods it will make, in sets that share one pod
template (count, GPUs per pod, the least count it can run with), and what the cycle needs to order
and place it (queue, priority, creation, topology, capacity). The object it was read from stays
the record; a `Workload` is parsed once per watch event and never written back.

A kind's object that aisched cannot take (a queue label on a kind it cannot gang, pod sets of
different GPU shapes) is read into a `Refusal` instead, whose message the object's events carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from aisched.api.common import CapacityType
from aisched.policy.taints import Toleration

# The tenant's word: which queue a workload is charged to, on the workload's own object (a Job,
# a PyTorchJob...) or on each pod of a plain pod group. Not under `aisched.io/`, which only the
# operator writes (the chart's admission policies).
QUEUE_LABEL: Final = "scheduling.aisched.io/queue"
# Plain pods that start together: each carries the group's name and its size.
POD_GROUP_LABEL: Final = "scheduling.aisched.io/pod-group"
POD_GROUP_SIZE_ANNOTATION: Final = "scheduling.aisched.io/pod-group-size"
# An admin's namespace label: the queue of the namespace's workloads that name none.
DEFAULT_QUEUE_NAMESPACE_LABEL: Final = "scheduling.aisched.io/default-queue"
# Optional tenant annotations on a workload, as TrainingJob's spec fields say them.
PRIORITY_ANNOTATION: Final = "scheduling.aisched.io/priority"
REQUIRED_LEVEL_ANNOTATION: Final = "scheduling.aisched.io/required-topology"
PREFERRED_LEVEL_ANNOTATION: Final = "scheduling.aisched.io/preferred-topology"
SPOT_ANNOTATION: Final = "scheduling.aisched.io/spot-policy"
EXPECTED_DURATION_ANNOTATION: Final = "scheduling.aisched.io/expected-duration-seconds"
# Carbon-aware deferral, as TrainingJob's `spec.carbon` says it: the start may wait for a cleaner grid,
# for at most the delay given (a start planned on the forecast of the region given, or the operator's).
CARBON_DEFERRABLE_ANNOTATION: Final = "scheduling.aisched.io/carbon-deferrable"
CARBON_MAX_DELAY_ANNOTATION: Final = "scheduling.aisched.io/carbon-max-delay-seconds"
CARBON_REGION_ANNOTATION: Final = "scheduling.aisched.io/carbon-region"
# A batch Job that can start with fewer of its `parallelism` pods (an elastic gang): the fewest it runs with.
MIN_PODS_ANNOTATION: Final = "scheduling.aisched.io/min-pods"
# The gate every pod of a workload is made with (the chart's MutatingAdmissionPolicy), lifted by
# the operator only, once the pod's node is set: kube-scheduler then binds it where it was placed.
ADMISSION_GATE: Final = "aisched.io/admission"
# The operator's record on a workload's object of where its admitted pods go (JSON, `AdmittedRecord`).
PLACEMENT_ANNOTATION: Final = "aisched.io/placement"
# The queue an admitted pod is charged to, set by the operator in the write that lifts its gate. Under
# `aisched.io/`, so the chart's policy lets nobody else add, change or remove it: a restarted operator
# that finds the pod draining after its workload was deleted still knows whose quota it holds.
CHARGED_QUEUE_LABEL: Final = "aisched.io/charged-queue"


class WorkloadKind(StrEnum):
    """The kinds aisched schedules beside its own, by `<plural>.<group>` (a key's mark)."""

    BATCH_JOB = "jobs.batch"
    PYTORCH_JOB = "pytorchjobs.kubeflow.org"
    RAY_JOB = "rayjobs.ray.io"
    RAY_CLUSTER = "rayclusters.ray.io"
    DEPLOYMENT = "deployments.apps"
    STATEFUL_SET = "statefulsets.apps"
    POD_GROUP = "pods"


@dataclass(frozen=True, slots=True)
class PodSet:
    """Pods of one workload made from one template."""

    name: str
    """The set's name within its workload: a PyTorchJob's replica type (`Master`, `Worker`), a
    RayCluster's `head` or worker group name, `main` for kinds of one template."""
    count: int
    gpus_per_pod: int
    """Whole GPUs each pod asks (its containers' `nvidia.com/gpu` limits, init containers' most)."""
    min_count: int | None = None
    """The fewest pods it can run with, when elastic (None: all of `count`)."""
    mig_profile: str | None = None
    """A MIG instance each pod asks instead of whole GPUs (`nvidia.com/mig-<profile>`)."""
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)

    @property
    def holds_gpus(self) -> bool:
        return self.gpus_per_pod > 0 or self.mig_profile is not None


@dataclass(frozen=True, slots=True)
class CarbonAsk:
    """A workload's start may wait for a cleaner grid (`CARBON_DEFERRABLE_ANNOTATION`)."""

    max_delay_seconds: int
    """The latest start, after its creation."""
    region: str | None = None
    """The grid region whose forecast it is planned on; None: the operator's (`settings.carbon.region`)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """One workload of any kind, as the cycle orders, charges and places it."""

    kind: WorkloadKind
    namespace: str
    name: str
    uid: str
    queue: str
    priority: int
    created: datetime
    pod_sets: tuple[PodSet, ...]
    gang: bool = True
    """All its GPU pods start together or none do. False for a model server's replicas
    (Deployment, StatefulSet): each replica is admitted on its own, as many as quota and room hold."""
    required_level: str | None = None
    preferred_level: str | None = None
    capacity_types: tuple[CapacityType, ...] = (CapacityType.ON_DEMAND,)
    expected_duration_seconds: int | None = None
    carbon: CarbonAsk | None = None
    """Carbon-aware deferral of its start, when it asks for it."""
    suspended: bool = False
    """The object is suspended (the kinds that have `suspend`): no pods exist or are made."""
    finished: bool = False
    """It ran to its end (a Job Complete or Failed, a RayJob's Complete): it holds nothing more."""
    admitted: AdmittedRecord | None = None
    """What the operator recorded when it admitted the current run (`PLACEMENT_ANNOTATION`)."""

    @property
    def key(self) -> str:
        """`namespace/name@kind`: apart from any TrainingJob's key (no '@' in a name) and from any other kind's."""
        return f"{self.namespace}/{self.name}@{self.kind.value}"

    @property
    def gpu_pod_sets(self) -> tuple[PodSet, ...]:
        return tuple(s for s in self.pod_sets if s.holds_gpus)

    @property
    def gpu_pods(self) -> int:
        return sum(s.count for s in self.gpu_pod_sets)


@dataclass(frozen=True, slots=True)
class AdmittedRecord:
    """Where the operator placed a workload's GPU pods when it admitted it: one node per GPU pod, in
    pod-set order. It is written on the object in one patch with the write that lets its pods be made
    (unsuspend), so a restarted operator reads each admitted workload's charge from the object itself."""

    nodes: tuple[str, ...]
    gpus_per_pod: int
    mig_profile: str | None
    queue: str
    admitted_at: datetime
    generation: int = 1
    """Counts the admissions of this object: the pods of an older run are never placed by a newer record."""

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "nodes": list(self.nodes),
            "gpusPerPod": self.gpus_per_pod,
            "queue": self.queue,
            "admittedAt": self.admitted_at.isoformat(),
            "generation": self.generation,
        }
        if self.mig_profile is not None:
            record["migProfile"] = self.mig_profile
        return record


@dataclass(frozen=True, slots=True)
class Refusal:
    """An object labelled for a queue that aisched cannot take as it is: said on the object, never run."""

    kind: WorkloadKind
    namespace: str
    name: str
    reason: str
    message: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}@{self.kind.value}"
