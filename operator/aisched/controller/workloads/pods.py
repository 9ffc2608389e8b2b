"""The pods of other kinds' workloads, read once per watch event: whose they are and where they stand.

A pod belongs to the workload its controlling owner names (a Job, a PyTorchJob, a RayCluster, a
StatefulSet, a Deployment through its ReplicaSet), or, with no owner, to the plain pod group its
label names (a pod with a queue label and no group is a group of one). Only pods the chart's
admission policy marked (the queue label its templates carry, or the admission gate) or the operator
admitted (the queue it is charged to, which only the operator writes) are read: every other pod of the
cluster is no workload's here. A pod admitted stays read when its tenant takes the queue label off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aisched.kube.labels import HOSTNAME
from aisched.policy.workloads.model import (
    ADMISSION_GATE,
    CHARGED_QUEUE_LABEL,
    POD_GROUP_LABEL,
    QUEUE_LABEL,
    WorkloadKind,
)
from aisched.policy.workloads.pod_shape import pod_gpus

# The controlling owner's kind (apiVersion group, kind) -> the workload kind it makes pods for.
_OWNER_KINDS: Final = {
    ("batch", "Job"): WorkloadKind.BATCH_JOB,
    ("kubeflow.org", "PyTorchJob"): WorkloadKind.PYTORCH_JOB,
    ("ray.io", "RayCluster"): WorkloadKind.RAY_CLUSTER,
    ("apps", "StatefulSet"): WorkloadKind.STATEFUL_SET,
    ("apps", "ReplicaSet"): WorkloadKind.DEPLOYMENT,
}
_JOB_INDEX: Final = "batch.kubernetes.io/job-completion-index"
_KUBEFLOW_TYPE: Final = "training.kubeflow.org/replica-type"
_KUBEFLOW_INDEX: Final = "training.kubeflow.org/replica-index"
_RAY_NODE_TYPE: Final = "ray.io/node-type"
_RAY_GROUP: Final = "ray.io/group"
_STATEFUL_INDEX: Final = "apps.kubernetes.io/pod-index"
_TEMPLATE_HASH: Final = "pod-template-hash"

WorkloadRef = tuple[WorkloadKind, str, str]
"""(kind, namespace, name) of the workload a pod belongs to."""


@dataclass(frozen=True, slots=True)
class WorkloadPod:
    namespace: str
    name: str
    workload: WorkloadRef
    gated: bool
    """It still carries the admission gate: kube-scheduler does not see it."""
    node: str | None
    """The node it is bound to, or (gated or not) pinned to by its node selector."""
    bound: bool
    done: bool
    """Succeeded or Failed: it holds nothing more."""
    terminating: bool
    pod_set: str
    index: int | None
    gates: tuple[str, ...]
    """Every scheduling gate it carries (others' too, which the operator leaves on)."""
    has_node_selector: bool
    gpus: int = 0
    """Whole GPUs it asks, as kube-scheduler sums them; -1 when its spec cannot be read (it is never placed)."""
    mig_profile: str | None = None
    pod_group: str | None = None
    """The PodGroup it was named into at creation (`spec.schedulingGroup`, the chart's policy), if any."""
    charged_queue: str | None = None
    """The queue the operator admitted it to (`CHARGED_QUEUE_LABEL`); None before it is placed."""
    has_labels: bool = True

    @property
    def live(self) -> bool:
        return not self.done and not self.terminating


def read_workload_pod(obj: Mapping[str, Any]) -> WorkloadPod | None:
    """OBJ as a workload's pod; None for a pod the admission policy did not mark (no one's here)."""
    metadata, spec, status = _map(obj.get("metadata")), _map(obj.get("spec")), _map(obj.get("status"))
    labels = _str_map(metadata.get("labels"))
    gates = tuple(str(g.get("name")) for g in _list(spec.get("schedulingGates")) if isinstance(g, Mapping))
    if QUEUE_LABEL not in labels and ADMISSION_GATE not in gates and CHARGED_QUEUE_LABEL not in labels:
        return None
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    ref = _owner_workload(metadata, labels, namespace, name)
    if ref is None:
        return None
    selector = _str_map(spec.get("nodeSelector"))
    bound_to = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) else None
    phase = status.get("phase")
    pod_set, index = _set_and_index(ref[0], labels, _str_map(metadata.get("annotations")))
    asked = pod_gpus({"spec": spec})
    gpus, mig_profile = asked if isinstance(asked, tuple) else (-1, None)
    return WorkloadPod(
        namespace=namespace,
        name=name,
        workload=ref,
        gated=ADMISSION_GATE in gates,
        node=bound_to or selector.get(HOSTNAME),
        bound=bound_to is not None,
        done=phase in ("Succeeded", "Failed"),
        terminating=metadata.get("deletionTimestamp") is not None,
        pod_set=pod_set,
        index=index,
        gates=gates,
        has_node_selector=bool(selector),
        gpus=gpus,
        mig_profile=mig_profile,
        pod_group=_pod_group(spec),
        charged_queue=labels.get(CHARGED_QUEUE_LABEL),
        has_labels=bool(labels),
    )


def _pod_group(spec: Mapping[str, Any]) -> str | None:
    name = _map(spec.get("schedulingGroup")).get("podGroupName")
    return name if isinstance(name, str) and name else None


def _owner_workload(
    metadata: Mapping[str, Any], labels: Mapping[str, str], namespace: str, name: str
) -> WorkloadRef | None:
    owners = [o for o in _list(metadata.get("ownerReferences")) if isinstance(o, Mapping) and o.get("controller")]
    if owners:
        owner = owners[0]
        group = str(owner.get("apiVersion") or "").rpartition("/")[0]
        kind = _OWNER_KINDS.get((group, str(owner.get("kind") or "")))
        owner_name = str(owner.get("name") or "")
        if kind is None or not owner_name:
            return None  # a kind aisched does not take: its pods are left to it
        if kind is WorkloadKind.DEPLOYMENT:  # ReplicaSet <deployment>-<pod-template-hash>
            suffix = labels.get(_TEMPLATE_HASH)
            if not suffix or not owner_name.endswith(f"-{suffix}"):
                return None  # a bare ReplicaSet, no Deployment's
            owner_name = owner_name[: -len(suffix) - 1]
        return (kind, namespace, owner_name)
    return (WorkloadKind.POD_GROUP, namespace, labels.get(POD_GROUP_LABEL) or name)


def _set_and_index(
    kind: WorkloadKind, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[str, int | None]:
    if kind is WorkloadKind.BATCH_JOB:
        return "main", _int(annotations.get(_JOB_INDEX) or labels.get(_JOB_INDEX))
    if kind is WorkloadKind.PYTORCH_JOB:
        return labels.get(_KUBEFLOW_TYPE, "").lower(), _int(labels.get(_KUBEFLOW_INDEX))
    if kind is WorkloadKind.RAY_CLUSTER:
        return ("head", None) if labels.get(_RAY_NODE_TYPE) == "head" else (labels.get(_RAY_GROUP, ""), None)
    if kind is WorkloadKind.STATEFUL_SET:
        return "main", _int(labels.get(_STATEFUL_INDEX))
    return "main", None


def _int(value: str | None) -> int | None:
    """A tenant's index: ASCII digits only (`isdigit` takes '²', which `int` refuses)."""
    return int(value) if value is not None and value.isascii() and value.isdigit() and len(value) < 10 else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str_map(value: Any) -> dict[str, str]:
    return {k: v for k, v in _map(value).items() if isinstance(k, str) and isinstance(v, str)}
