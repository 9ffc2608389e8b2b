"""What the inventory keeps of each Node and Pod, read from whatever the watch hands over.

A watch hands over whatever an object holds. The readers below take a field of
the wrong type as absent, so that one odd node or pod costs its own accuracy and
never the watch handler (and with it every other object). What is kept is what
placement and the job lifecycle read, not the object: a large cluster has a
hundred thousand pods, most of them not ours, so records are slotted, repeated
strings interned, and labels and messages kept for our own pods only.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aisched.kube import labels
from aisched.kube.claims import (
    CLAIM_NAME,
    MIG_RESOURCE_PREFIX,
    SHARE_ANNOTATION,
    PodShare,
    mig_slices_milli,
    read_share,
)
from aisched.kube.mig_nodes import NodeMig, read_node_mig, requested_profiles
from aisched.kube.quantities import whole_gpus
from aisched.policy.cluster import Node, NodeLabelKeys, Taint, node_from_labels

log = logging.getLogger(__name__)

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
MAX_CLAIM_ENTRIES = 128  # entries read of one pod: a forged list of thousands costs its own accuracy only

PodKey = tuple[str, str]
"""(namespace, name) of a pod."""


@dataclass(frozen=True, slots=True)
class ClaimedDevice:
    """One GPU a pod holds through an allocated DRA claim: its device name on the node, and what it consumes."""

    device: str
    milli: int
    """Thousandths of the GPU's compute it consumes (1000: all of it, a device allocated whole)."""
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class PodRecord:
    namespace: str
    name: str
    node: str | None
    """The node it is bound to: kube-scheduler bound it there, or its kubelet admitted it (`_bound_node`)."""
    gpus: int
    phase: str
    labels: dict[str, str]
    """Only the operator's own labels (`aisched.io/...`): the others are never read."""
    terminating: bool
    gated: bool
    disruption_target: bool
    exit_code: int | None = None
    termination_message: str | None = None
    """Kept for the operator's own pods only: the workers' checkpoint reports."""
    unschedulable_since: datetime | None = None
    unschedulable_message: str | None = None
    tracked: bool = False
    """Carries the operator's report finalizer: the API server keeps it until the operator lets go."""
    gone_by: datetime | None = None
    """The deletionTimestamp: when a deleted pod's grace runs out and its kubelet should have stopped it."""

    pinned_node: str | None = None  # nodeSelector kubernetes.io/hostname: where it will bind
    share: PodShare | None = None
    """Ours only: the part of one GPU its DRA claim holds (`kube.claim_records.with_claims` fills it in)."""
    mig_milli: int = 0
    """GPU-equivalents (thousandths) of the MIG instances it asks of the device plugin."""
    mig_profiles: tuple[str, ...] = ()
    """The profile of each MIG instance it asks (one entry per instance), for the instances left on its node."""
    claimed: tuple[ClaimedDevice, ...] = ()
    """GPUs its other DRA claims hold on its node, as allocated and reserved for it (`with_claims` fills it in)."""
    claim_names: tuple[str, ...] = ()
    """The ResourceClaims its other claim entries name (spec, or kube-controller-manager's status for templates)."""
    share_claim: str | None = None
    """Ours only: the ResourceClaim made for the operator's share entry, once kube-controller-manager made it."""
    share_hint: PodShare | None = None
    """Ours only: the share the operator wrote on it, which stands for its claim until that is allocated."""
    queue: str | None = None
    """Ours only: the queue its job was charged to when it was made (`labels.QUEUE_ANNOTATION`)."""
    resource_version: str = field(default="", compare=False)

    @property
    def claims(self) -> int:
        """GPUs its other claims hold: each in use, whole, as far as anyone else can tell."""
        return len(self.claimed)

    @property
    def gpu_milli(self) -> int:
        """Every GPU it holds, in GPU-equivalents (thousandths): whole, share, MIG instances, other claims."""
        claimed = sum(device.milli for device in self.claimed)
        return self.gpus * 1000 + claimed + (self.share.milli if self.share else 0) + self.mig_milli

    @property
    def devices(self) -> tuple[str, ...]:
        """The device names of the GPUs its claims hold (share included), each a GPU in use on its node."""
        held = tuple(device.device for device in self.claimed)
        return (self.share.device, *held) if self.share else held

    @property
    def gpu_node(self) -> str | None:
        """The node whose GPUs this pod holds, or is about to: bound, or pinned and waiting to bind."""
        return self.node or self.pinned_node

    @property
    def holds_gpus(self) -> bool:
        return self.gpu_node is not None and self.phase not in ("Succeeded", "Failed")

    @property
    def job_key(self) -> tuple[str, str] | None:
        name = self.labels.get(labels.JOB_NAME)
        return (self.namespace, name) if name else None


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the inventory keeps of one Node object."""

    node: Node
    ready: bool
    not_ready_since: datetime | None = None
    """When its Ready condition last changed, for a node that is not Ready; None if unknown."""
    resource_version: str = field(default="", compare=False)
    gpu_memory_mib: int = 0
    """MiB of memory of each of its GPUs (GPU Feature Discovery's nvidia.com/gpu.memory); 0: unknown."""
    mig: NodeMig | None = None
    """Its MIG config label, state and advertised instances (kube/mig_nodes.py); None: no MIG there."""


def slim_object(obj: dict[str, Any]) -> dict[str, Any]:
    """One of our objects as the controllers keep it: all of it but metadata.managedFields.

    The API server's record of who set which field grows with every writer (each status
    write adds the operator's): several KiB an object, more than the rest of it, never read.
    """
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or "managedFields" not in metadata:
        return obj
    return {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


def release_template(obj: dict[str, Any]) -> None:
    """Leave a watch event's object without its template, once the controllers copied what they keep.

    kopf wraps each parsed object in a Body that refers to itself, which only the cyclic
    collector frees, and a large parse leaves the collector no reason to run for a long time:
    a restart's first list of the largest TrainingJobs (20 MiB each parsed, nearly all of it
    template) stayed in memory after it was handled, 11 MiB a job. Without its template, what
    the cycle holds is a few KiB.
    """
    spec = obj.get("spec")
    if isinstance(spec, dict) and "template" in spec:
        obj["spec"] = {k: v for k, v in spec.items() if k != "template"}  # a new dict: records may share the old


def read_node(obj: dict[str, Any], keys: NodeLabelKeys, gpu_resource: str) -> NodeRecord:
    metadata, spec, status = obj["metadata"], _mapping(obj.get("spec")), _mapping(obj.get("status"))
    name = sys.intern(metadata["name"])
    conditions = _items(status.get("conditions"))
    condition = next((c for c in conditions if c.get("type") == "Ready"), {})
    ready = condition.get("status") == "True"
    node = node_from_labels(
        name,
        labels=_string_map(metadata.get("labels")),
        taints=_taints(spec.get("taints"), name),
        allocatable_gpus=whole_gpus(_mapping(status.get("allocatable")).get(gpu_resource, 0), round_up=False),
        used_gpus=0,  # filled from the pods when a snapshot is taken
        schedulable=ready and not spec.get("unschedulable"),
        keys=keys,
    )
    since = None if ready else _timestamp(condition.get("lastTransitionTime"))
    memory = _string_map(metadata.get("labels")).get(GPU_MEMORY_LABEL, "")
    return NodeRecord(
        node,
        ready,
        since,
        _text(metadata.get("resourceVersion")) or "",
        int(memory) if memory.isascii() and memory.isdigit() and len(memory) <= 9 else 0,
        read_node_mig(
            _string_map(metadata.get("labels")),
            _mapping(status.get("allocatable")),
            _string_map(metadata.get("annotations")),
        ),
    )


def read_pod(obj: dict[str, Any], gpu_resource: str) -> PodRecord:
    metadata, spec, status = obj["metadata"], _mapping(obj.get("spec")), _mapping(obj.get("status"))
    ours = {k: v for k, v in _string_map(metadata.get("labels")).items() if k.startswith(labels.PREFIX + "/")}
    exit_code, message = _termination(status)
    conditions = {c.get("type"): c for c in _items(status.get("conditions"))}
    scheduled = _mapping(conditions.get("PodScheduled"))
    unschedulable = scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
    share_claim, claim_names = _claim_names(spec, status, ours)
    return PodRecord(
        namespace=sys.intern(metadata["namespace"]),
        name=metadata["name"],
        node=_bound_node(spec, status, scheduled),
        gpus=_requested_gpus(spec, gpu_resource),
        phase=sys.intern(_text(status.get("phase")) or "Pending"),
        labels=ours,
        terminating=metadata.get("deletionTimestamp") is not None,
        gated=bool(spec.get("schedulingGates")),
        disruption_target=_mapping(conditions.get("DisruptionTarget")).get("status") == "True",
        exit_code=exit_code,
        termination_message=message if ours else None,
        pinned_node=_pinned_node(spec, ours),
        share_hint=_share(metadata, spec, ours),
        mig_milli=_requested_mig_milli(spec),
        mig_profiles=requested_profiles(spec),
        claim_names=claim_names,
        share_claim=share_claim,
        unschedulable_since=_timestamp(scheduled.get("lastTransitionTime")) if unschedulable else None,
        unschedulable_message=_text(scheduled.get("message")) if unschedulable and ours else None,
        tracked=labels.REPORT_FINALIZER in _strings(metadata.get("finalizers")),
        gone_by=_timestamp(metadata.get("deletionTimestamp")),
        queue=_interned_text(_mapping(metadata.get("annotations")).get(labels.QUEUE_ANNOTATION))
        if labels.JOB_KIND in ours
        else None,
        resource_version=_text(metadata.get("resourceVersion")) or "",
    )


def _bound_node(spec: dict[str, Any], status: dict[str, Any], scheduled: dict[str, Any]) -> str | None:
    """The node the pod is bound to; None while it is not, whatever its spec.nodeName says.

    Anyone who may create a pod may set its nodeName, on a node whose kubelet never runs it (a
    node that is gone, or full): kube-scheduler would count it there, but it holds nothing until
    it is bound. Bound is what only the cluster writes: the binding kube-scheduler makes sets
    PodScheduled True with the nodeName; a kubelet (or KWOK, which plays one) that admits a pod
    created with a nodeName writes its status (PodScheduled True, a phase past Pending, container
    statuses). A tenant cannot write a pod's status: `edit` grants no pods/status, and the API
    server drops the status a create sends.
    """
    node = _interned_text(spec.get("nodeName"))
    if node is None:
        return None
    admitted = (
        scheduled.get("status") == "True"
        or status.get("phase") in ("Running", "Succeeded", "Failed")
        or bool(_items(status.get("containerStatuses")))
        or bool(_items(status.get("initContainerStatuses")))
    )
    return node if admitted else None


def _pinned_node(spec: dict[str, Any], ours: dict[str, str]) -> str | None:
    """The node an unbound worker of ours will bind to; None for anyone else's pod.

    Our workers are created pinned (and gated), so their GPUs are taken before kube-scheduler
    binds them. Anyone else's Pending pod holds nothing until it binds, as kube-scheduler sees it:
    pods pinned to every node and to a label no node has would otherwise freeze admissions.
    """
    if labels.JOB_KIND not in ours:
        return None
    return _interned_text(_mapping(spec.get("nodeSelector")).get(labels.HOSTNAME))


def _requested_gpus(spec: dict[str, Any], resource: str) -> int:
    """GPUs the pod holds on its node, summed as kube-scheduler sums them (PodRequests).

    App containers and restartable init containers (sidecars) run side by side and add up; an
    ordinary init container runs alone, beside only the sidecars started before it.
    """

    def requested(container: dict[str, Any]) -> int:
        resources = _mapping(container.get("resources"))
        amount = _mapping(resources.get("requests")).get(resource) or _mapping(resources.get("limits")).get(resource)
        return whole_gpus(amount or 0, round_up=True)

    sidecars = init_peak = 0
    for container in _items(spec.get("initContainers")):
        if container.get("restartPolicy") == "Always":
            sidecars += requested(container)
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + requested(container))
    return max(sum(requested(c) for c in _items(spec.get("containers"))) + sidecars, init_peak)


def _share(metadata: dict[str, Any], spec: dict[str, Any], ours: dict[str, str]) -> PodShare | None:
    """The share the operator wrote on a pod of its own that names its share claim; anyone else's means nothing.

    A hint only: what the pod holds is what its claim is allocated (`kube.claim_records.with_claims`).
    """
    if labels.JOB_KIND not in ours or not any(c.get("name") == CLAIM_NAME for c in _items(spec.get("resourceClaims"))):
        return None
    return read_share(_mapping(metadata.get("annotations")).get(SHARE_ANNOTATION))


def _requested_mig_milli(spec: dict[str, Any]) -> int:
    """GPU-equivalents of the `nvidia.com/mig-*` the pod's containers ask (init containers as if beside the others:
    never less than kube-scheduler counts)."""
    total = 0
    for container in [*_items(spec.get("containers")), *_items(spec.get("initContainers"))]:
        resources = _mapping(container.get("resources"))
        asked = {**_mapping(resources.get("limits")), **_mapping(resources.get("requests"))}
        for resource, amount in asked.items():
            if isinstance(resource, str) and resource.startswith(MIG_RESOURCE_PREFIX):
                total += mig_slices_milli(resource, whole_gpus(amount, round_up=True))
    return total


def _claim_names(
    spec: dict[str, Any], status: dict[str, Any], ours: dict[str, str]
) -> tuple[str | None, tuple[str, ...]]:
    """(the ResourceClaim of the operator's share entry, those of its other entries), by the claims' names.

    An entry names its claim, or a template whose claim kube-controller-manager makes and names
    in the pod's status; an entry with neither names nothing. Only a pod of ours has a share entry.
    """
    made = {
        entry.get("name"): claim
        for entry in _items(status.get("resourceClaimStatuses"))
        if (claim := _text(entry.get("resourceClaimName")))
    }
    share, others = None, []
    for entry in _items(spec.get("resourceClaims"))[:MAX_CLAIM_ENTRIES]:
        claim = _text(entry.get("resourceClaimName")) or made.get(entry.get("name"))
        if labels.JOB_KIND in ours and entry.get("name") == CLAIM_NAME:
            share = claim
        elif claim is not None and claim not in others:
            others.append(claim)
    return share, tuple(others)


def _termination(status: dict[str, Any]) -> tuple[int | None, str | None]:
    """The exit code (a failing container's first) and message of containers that stopped."""
    exit_code, message = None, None
    for container_status in _items(status.get("containerStatuses")):
        terminated = _mapping(_mapping(container_status.get("state")).get("terminated"))
        if terminated:
            code = _int_or_none(terminated.get("exitCode"))
            if exit_code is None or (code is not None and code != 0):
                exit_code = code
            message = _text(terminated.get("message")) or message
    return exit_code, message


def _taints(value: Any, node: str) -> list[Taint]:
    taints = []
    for taint in _items(value):
        try:
            taints.append(Taint.from_dict(taint))
        except (KeyError, ValueError):
            log.warning("node %s: ignoring taint %r, which is none the scheduler knows", node, taint)
    return taints


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _interned_text(value: Any) -> str | None:
    # Node names and the like repeat across thousands of pods: one string each.
    text = _text(value)
    return sys.intern(text) if text is not None else None


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _string_map(value: Any) -> dict[str, str]:
    return {str(k): v for k, v in _mapping(value).items() if isinstance(v, str)}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _timestamp(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None
