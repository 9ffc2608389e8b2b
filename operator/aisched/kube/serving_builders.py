"""Pure builders and readers of the Kubernetes objects an InferenceService runs as.

Each replica is a pod pinned to the node placement chose; a ClusterIP Service
on ``spec.port`` selects every replica, and the endpoints controller puts only
Ready pods behind it, so readiness gates traffic. Pods carry a hash of what
shapes them (template, GPUs), so a template change is told apart from a scale
change and rolled out.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from aisched.api.common import CapacityType
from aisched.api.inference_service import InferenceService
from aisched.api.reserved_keys import without_reserved
from aisched.kube import labels
from aisched.kube.builders import owner_reference, request_gpus, set_priority
from aisched.kube.records import read_pod
from aisched.policy.shared_room import SharePart

KIND: Final = "InferenceService"
# A label of its own, not the TrainingJob's job-name: a TrainingJob and an
# InferenceService may share a name in one namespace.
SERVICE_NAME: Final = f"{labels.PREFIX}/inference-service"
TEMPLATE_HASH: Final = f"{labels.PREFIX}/template-hash"
CAPACITY_TYPE: Final = f"{labels.PREFIX}/capacity-type"
AUTOSCALER_STATE: Final = f"{labels.PREFIX}/autoscaler-state"
LLM_SCALING_MEMORY: Final = f"{labels.PREFIX}/llm-scaling-memory"
"""What an LLM-mode service's scaling remembers, for a restarted operator (`policy/llm_scaling/persisted.py`)."""
LLM_LOAD_HISTORY: Final = f"{labels.PREFIX}/llm-load-history"
"""Its load history as five-minute means, written only when one completes (`persisted.py`)."""
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
TEMPLATE_HASH_LENGTH = 10


@dataclass(frozen=True)
class ReplicaSlot:
    """One replica to start: its pod's name, the node it is pinned to, and that node's capacity type."""

    name: str
    node: str
    capacity_type: CapacityType
    template_hash: str


@dataclass(frozen=True, slots=True)
class ServingPod:
    """What the controller needs to know of one replica's pod."""

    namespace: str
    name: str
    service: str
    template_hash: str
    capacity_type: CapacityType
    pinned_node: str | None
    node: str | None
    """Where it is bound; None until kube-scheduler binds it."""
    phase: str
    ready: bool
    terminating: bool
    gpus: int
    unschedulable_since: datetime | None = None
    resource_version: str = ""
    """Compared only to keep the newer of a relist and a watch event (`kube.versions`); empty for a pod we built."""
    gpu_milli: int | None = None
    """Every GPU it holds in GPU-equivalents (thousandths: whole, share, MIG, claims); None: `gpus` whole."""
    part: SharePart | None = None
    """The part of a GPU its claim is allocated on its node (a fraction), as the inventory reads it."""
    mig_profile: str | None = None
    """The one MIG instance it asks of the device plugin (a MIG replica)."""
    boot_seconds: float | None = None
    """From its binding to its first readiness, once ready (`status.conditions`, the scheduler's and the kubelet's
    writes): how long the replica took to load its model and serve. None while it is not ready."""

    @property
    def held_milli(self) -> int:
        return self.gpus * 1000 if self.gpu_milli is None else self.gpu_milli

    @property
    def finished(self) -> bool:
        """Its containers stopped for good: a model server is meant to run until told otherwise."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def serving_candidate(self) -> bool:
        """Counts as a replica: neither on its way out nor finished."""
        return not (self.terminating or self.finished)


def service_labels(name: str) -> dict[str, str]:
    return {labels.MANAGED_BY: "aisched", labels.JOB_KIND: KIND, SERVICE_NAME: name}


def service_selector(name: str) -> str:
    """The label selector of a service's replicas, as `status.selector` (the scale subresource) wants it."""
    return f"{labels.JOB_KIND}={KIND},{SERVICE_NAME}={name}"


def template_hash(service: InferenceService) -> str:
    """Changes whenever a replica's pod would differ, and only then."""
    spec = service.spec
    shaping = {"template": spec.template, "gpusPerReplica": spec.gpus_per_replica, "gpuType": spec.gpu_type}
    digest = hashlib.sha256(json.dumps(shaping, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return digest[:TEMPLATE_HASH_LENGTH]


def replica_pod_name(service_name: str, template: str, index: int) -> str:
    # Deterministic names make creation idempotent: a retry after a lost reply gets AlreadyExists.
    return f"{service_name}-{template}-{index}"


def free_pod_names(service_name: str, template: str, taken: set[str], count: int) -> list[str]:
    """The `count` lowest-numbered replica names not in `taken`."""
    names: list[str] = []
    index = 0
    while len(names) < count:
        name = replica_pod_name(service_name, template, index)
        if name not in taken:
            names.append(name)
        index += 1
    return names


def build_service(service: InferenceService) -> dict[str, Any]:
    name = str(service.metadata["name"])
    port = service.spec.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": service.metadata["namespace"],
            "labels": service_labels(name),
            "ownerReferences": [owner_reference(service)],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": service_labels(name),
            # Only Ready replicas get traffic: a model still loading must not be sent requests.
            "publishNotReadyAddresses": False,
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def build_replica_pod(
    service: InferenceService,
    slot: ReplicaSlot,
    *,
    gpu_resource: str = "nvidia.com/gpu",
    spot_grace_seconds: int | None = None,
    priority_class_name: str = "",
) -> dict[str, Any]:
    """One replica's pod, pinned to `slot.node`; on spot, its grace period fits within the notice; its
    priority the operator's (PRIORITY_CLASS_NAME, empty for none), never the template's."""
    name = str(service.metadata["name"])
    template = copy.deepcopy(service.spec.template)
    spec: dict[str, Any] = template.get("spec", {})
    metadata: dict[str, Any] = template.get("metadata", {})
    if service.spec.gpu_share is None:  # a share is the claim's or the MIG instance's (controller/sharing.py)
        request_gpus(spec["containers"], gpu_resource, service.spec.gpus_per_replica)
    set_priority(spec, priority_class_name)
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), HOSTNAME_LABEL: slot.node}
    if slot.capacity_type == CapacityType.SPOT and spot_grace_seconds is not None:
        spec["terminationGracePeriodSeconds"] = min(spec.get("terminationGracePeriodSeconds", 30), spot_grace_seconds)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": slot.name,
            "namespace": service.metadata["namespace"],
            "labels": {
                **without_reserved(metadata.get("labels")),
                **service_labels(name),
                TEMPLATE_HASH: slot.template_hash,
                CAPACITY_TYPE: CapacityType(slot.capacity_type).value,
            },
            "annotations": without_reserved(metadata.get("annotations")),
            "ownerReferences": [owner_reference(service)],
        },
        "spec": spec,
    }


def requested_gpus(pod_spec: dict[str, Any], resource: str) -> int:
    total = 0
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(resource) or (resources.get("requests") or {}).get(resource)
        try:
            total += int(str(amount or 0))
        except ValueError:
            continue
    return total


def serving_pod_from_object(obj: dict[str, Any], gpu_resource: str = "nvidia.com/gpu") -> ServingPod | None:
    """The replica a Pod object is, or None when it is not an InferenceService's."""
    metadata, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    pod_labels = metadata.get("labels") or {}
    service = pod_labels.get(SERVICE_NAME)
    if pod_labels.get(labels.JOB_KIND) != KIND or not service:
        return None
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    scheduled = conditions.get("PodScheduled", {})
    unschedulable = scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
    since = scheduled.get("lastTransitionTime")
    capacity = pod_labels.get(CAPACITY_TYPE)
    return ServingPod(
        namespace=metadata["namespace"],
        name=metadata["name"],
        service=service,
        template_hash=pod_labels.get(TEMPLATE_HASH, ""),
        capacity_type=CapacityType(capacity) if capacity in set(CapacityType) else CapacityType.ON_DEMAND,
        pinned_node=(spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL),
        node=spec.get("nodeName"),
        phase=status.get("phase", "Pending"),
        ready=conditions.get("Ready", {}).get("status") == "True",
        terminating=metadata.get("deletionTimestamp") is not None,
        gpus=requested_gpus(spec, gpu_resource),
        unschedulable_since=datetime.fromisoformat(since) if unschedulable and since else None,
        resource_version=metadata.get("resourceVersion") or "",
        gpu_milli=read_pod(obj, gpu_resource).gpu_milli,
        boot_seconds=_boot_seconds(scheduled, conditions.get("Ready", {})),
    )


MAX_BOOT_SECONDS: Final = 3_600.0
"""A boot read as longer (a pod that went unready and back: its Ready condition's time is its last) is taken as this."""


def _boot_seconds(scheduled: Mapping[str, Any], ready: Mapping[str, Any]) -> float | None:
    """Seconds from SCHEDULED's transition to READY's, both True; None when either is not, or unreadable."""
    if scheduled.get("status") != "True" or ready.get("status") != "True":
        return None
    try:
        start = datetime.fromisoformat(str(scheduled.get("lastTransitionTime")))
        end = datetime.fromisoformat(str(ready.get("lastTransitionTime")))
        seconds = (end - start).total_seconds()
    except (TypeError, ValueError):  # a time with no zone against one with, or no time
        return None
    return min(seconds, MAX_BOOT_SECONDS) if seconds >= 0 else None
