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

The pod carries what it holds in an annotation the operator writes (device, thousandths, MiB),
so the inventory counts it without watching claims. Pure builders: no I/O.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Final

from aisched.api.sharing import GpuShare, mig_milli
from aisched.kube import labels

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
    selector = f"device.attributes['{DRIVER}'].index == {device_index(share.device)}"
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
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": DEVICE_CLASS,
                                "selectors": [{"cel": {"expression": selector}}],
                                "capacity": {
                                    "requests": {"compute": str(share.milli), "memory": f"{share.memory_mib}Mi"}
                                },
                            },
                        }
                    ]
                }
            }
        },
    }


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
