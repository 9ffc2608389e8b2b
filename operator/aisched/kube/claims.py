"""How a worker's or replica's part of one GPU reaches its node: a DRA claim for the GPU the operator chose.

The operator picks the GPU (policy/sharing/assign.py) and the node; the pod is pinned to the node
as every pod of ours is, and names a ResourceClaimTemplate of its own whose one request selects
that GPU by its `index` attribute (unique on a node; NVIDIA's DRA driver publishes it, as our
fake driver does) and asks the share as consumable capacity (`compute` in thousandths, `memory`).
kube-controller-manager makes the claim from the template, owned by the pod (so it goes with the
pod), and kube-scheduler's own DRA allocation binds the pod with exactly that device, or leaves
it Unschedulable when the device has no room left: nothing is shared that the operator did not
plan, and nothing is overcommitted that a race slipped past the operator.

A MIG profile goes through NVIDIA's device plugin instead ("mixed" strategy): the pod asks one
`nvidia.com/mig-<profile>` on the node chosen.

What a pod holds is read from its claim as kube-scheduler allocated it (`kube/claim_records.py`):
the device and the compute and memory consumed. The annotation the operator writes on the pod
(device, thousandths, MiB) is a hint only, for the moment before the allocation, and only where it
is what the claim made from the operator's template asks (a tenant may edit a pod's annotations).
Pure builders: no I/O.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Final

from aisched.api.sharing import GpuShare, mig_milli
from aisched.kube import labels
from aisched.kube.quantities import parse_quantity

DRIVER: Final = "gpu.nvidia.com"
DEVICE_CLASS: Final = "gpu.nvidia.com"
CLAIM_NAME: Final = "aisched-gpu"
"""The pod's resourceClaims entry and the container's claim; a template may not use it (pod_policy)."""
SHARE_ANNOTATION: Final = f"{labels.PREFIX}/gpu-share"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
MILLI: Final = 1000
_DEVICE = re.compile(r"^gpu-([0-9]{1,4})$")
_SHARE = re.compile(r"^(gpu-[0-9]{1,4}),([0-9]{1,4}),([0-9]{1,7})$")


@dataclass(frozen=True, slots=True)
class PodShare:
    """The part of one GPU a pod holds: the GPU's device name on its node, thousandths of compute, MiB of memory."""

    device: str
    milli: int
    memory_mib: int

    def annotation(self) -> str:
        return f"{self.device},{self.milli},{self.memory_mib}"


def read_share(value: Any) -> PodShare | None:
    """The share an annotation value names; None for anything malformed (a pod's annotations are editable)."""
    match = _SHARE.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    milli, memory = int(match[2]), int(match[3])
    if not 0 < milli <= MILLI:
        return None
    return PodShare(match[1], milli, memory)


def device_index(device: str) -> int:
    match = _DEVICE.match(device)
    if match is None:
        raise ValueError(f"{device!r} is no GPU device name (gpu-<index>)")
    return int(match[1])


def share_memory_mib(share: GpuShare, milli: int, gpu_memory_mib: int) -> int:
    """Memory a fraction reserves: what it asked, else the same share of the GPU's memory as of its compute."""
    if share.memory_mib is not None:
        return share.memory_mib
    return milli * gpu_memory_mib // MILLI


def build_share_claim_template(
    namespace: str, name: str, share: PodShare, owner: dict[str, Any], pod_labels: dict[str, str]
) -> dict[str, Any]:
    """The ResourceClaimTemplate of one pod: SHARE of the GPU `share.device` on the node the pod is pinned to.

    OWNER (an ownerReference: the TrainingJob or InferenceService) takes the template with it; the
    claim made from it belongs to the pod.
    """
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(pod_labels),
            "annotations": {SHARE_ANNOTATION: share.annotation()},
            "ownerReferences": [owner],
        },
        "spec": {"spec": share_claim_spec(share)},
    }


def share_claim_spec(share: PodShare) -> dict[str, Any]:
    """The ResourceClaim spec that asks SHARE of its GPU: what the operator's template makes, and nothing else."""
    selector = f"device.attributes['{DRIVER}'].index == {device_index(share.device)}"
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": DEVICE_CLASS,
                        "selectors": [{"cel": {"expression": selector}}],
                        "capacity": {"requests": {"compute": str(share.milli), "memory": f"{share.memory_mib}Mi"}},
                    },
                }
            ]
        }
    }


def same_claim_spec(stored: Any, built: dict[str, Any]) -> bool:
    """STORED (a claim's or template's spec as the API server keeps it) asks what BUILT asks.

    The API server fills in the defaults of a request (`allocationMode: ExactCount`, `count: 1`)
    and writes quantities in canonical form ("1000" as "1k", "1024Mi" as "1Gi"): both sides are
    compared as they mean, anything else must be equal. A template a tenant made first with
    `allocationMode: All` or another selector is not the operator's, whatever its name.
    """
    return isinstance(stored, dict) and _claim_meaning(stored) == _claim_meaning(built)


def _claim_meaning(spec: dict[str, Any]) -> Any:
    devices = spec.get("devices")
    if not isinstance(devices, dict):
        return spec
    requests = devices.get("requests")
    if not isinstance(requests, list):
        return spec
    meant = []
    for request in requests:
        exactly = request.get("exactly") if isinstance(request, dict) else None
        if not isinstance(exactly, dict):
            meant.append(request)
            continue
        exactly = {"allocationMode": "ExactCount", **exactly}
        if exactly["allocationMode"] == "ExactCount":
            exactly.setdefault("count", 1)
        capacity = exactly.get("capacity")
        if isinstance(capacity, dict) and isinstance(asked := capacity.get("requests"), dict):
            exactly["capacity"] = {**capacity, "requests": {k: parse_quantity(v) for k, v in asked.items()}}
        meant.append({**request, "exactly": exactly})
    return {**spec, "devices": {**devices, "requests": meant}}


def with_share_claim(pod: dict[str, Any], template_name: str, share: PodShare) -> dict[str, Any]:
    """POD holding SHARE through the claim made from TEMPLATE_NAME: its first container gets the device."""
    pod = copy.deepcopy(pod)
    pod["metadata"].setdefault("annotations", {})[SHARE_ANNOTATION] = share.annotation()
    spec = pod["spec"]
    spec["resourceClaims"] = [
        *spec.get("resourceClaims", []),
        {"name": CLAIM_NAME, "resourceClaimTemplateName": template_name},
    ]
    resources = spec["containers"][0].setdefault("resources", {})
    resources["claims"] = [*resources.get("claims", []), {"name": CLAIM_NAME}]
    return pod


def with_mig_slice(pod: dict[str, Any], profile: str) -> dict[str, Any]:
    """POD asking one MIG instance of PROFILE from the device plugin, in its first container."""
    pod = copy.deepcopy(pod)
    resources = pod["spec"]["containers"][0].setdefault("resources", {})
    for kind in ("limits", "requests"):
        resources.setdefault(kind, {})[MIG_RESOURCE_PREFIX + profile] = "1"
    return pod


def mig_slices_milli(resource: str, amount: int) -> int:
    """GPU-equivalents of AMOUNT `nvidia.com/mig-<profile>`; a profile of no known shape counts as whole GPUs."""
    profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
    if re.fullmatch(r"[1-7]g\.[0-9]{1,4}gb(\.me)?", profile) is None:
        return amount * MILLI
    return amount * mig_milli(profile)
