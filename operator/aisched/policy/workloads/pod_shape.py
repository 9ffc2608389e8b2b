"""What one pod template asks of a node: GPUs, a MIG instance, tolerations, a nodeSelector. Pure.

A pod's whole GPUs are what kubelet admits it with: its containers' `nvidia.com/gpu` summed, or its
largest init container's when that is more (init containers run one at a time, before the others).
A MIG instance (`nvidia.com/mig-<profile>`) is placed as a share of one GPU, one instance per pod.
What aisched cannot charge is refused with a message that names the field: DRA claims (the kinds
read here do not yet have their claims placed), other NVIDIA device resources, quantities that are
not whole numbers. Each public function returns its reading or that message, and never raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aisched.api.sharing import ALL_MIG_PROFILES
from aisched.policy.cluster_description import GPU_PRODUCT_LABEL
from aisched.policy.taints import TaintEffect, Toleration, TolerationOperator
from aisched.policy.workloads.fields import FieldError, UnsupportedFieldError, mapping, sequence, shown, string_map

WHOLE_GPU: Final = "nvidia.com/gpu"
MIG_PREFIX: Final = "nvidia.com/mig-"
NVIDIA_PREFIX: Final = "nvidia.com/"
MAX_GPUS_PER_POD: Final = 1_000
"""Far beyond any node's GPUs: a bound on a tenant's number, not a capacity."""
_WHOLE_QUANTITY: Final = re.compile(r"^[0-9]{1,9}$")
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class PodShape:
    """What each pod of one template asks, as placement needs it."""

    gpus: int
    mig_profile: str | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)


def read_pod_shape(template: Any, *, where: str = "template") -> PodShape | str:
    """The shape of the pods made from TEMPLATE (at path WHERE in its object), or why it cannot be read."""
    try:
        return pod_shape(template, where)
    except FieldError as error:
        return str(error)


def pod_shape(template: Any, where: str) -> PodShape:
    """`read_pod_shape` for the adapters, which gather a whole object's errors into one `Refusal`: raises
    `FieldError` (`UnsupportedFieldError` for what reads well but aisched does not take), and nothing else."""
    gpus, mig_profile = _gpus(template, where)
    node_selector = _node_selector(template, where)
    if gpus or mig_profile:
        _placeable_anywhere_it_is_placed(template, node_selector, where)
    return PodShape(gpus, mig_profile, _tolerations(template, where), node_selector)


def _placeable_anywhere_it_is_placed(template: Any, node_selector: Mapping[str, str], where: str) -> None:
    """A GPU pod is pinned to the node the cycle chose, which reads no node selector but the GPU product's
    and no node affinity: one that rules that node out would wait there for good, its GPUs held for it.
    Refused until placement matches them (a selector a node cannot meet once froze every free GPU)."""
    # The hostname is the operator's own pin: placement sets it on every GPU pod, whatever it said before.
    others = sorted(key for key in node_selector if key not in (GPU_PRODUCT_LABEL, HOSTNAME_LABEL))
    if others:
        raise UnsupportedFieldError(
            f"{where}.spec.nodeSelector: aisched places GPU pods by {GPU_PRODUCT_LABEL} only, not by "
            f"{', '.join(shown(k) for k in others[:3])}; use a Queue's tolerations and the workload's topology instead"
        )
    affinity = mapping(_pod_spec(template, where).get("affinity"), f"{where}.spec.affinity")
    node_affinity = mapping(affinity.get("nodeAffinity"), f"{where}.spec.affinity.nodeAffinity")
    if node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") is not None:
        raise UnsupportedFieldError(
            f"{where}.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: aisched does not "
            "yet place GPU pods by node affinity; use the workload's topology annotations instead"
        )


def pod_gpus(template: Mapping[str, Any], *, where: str = "template") -> tuple[int, str | None] | str:
    """(whole GPUs, MIG profile) each pod of TEMPLATE asks, or a message saying why aisched cannot charge it."""
    try:
        return _gpus(template, where)
    except FieldError as error:
        return str(error)


def pod_tolerations(template: Mapping[str, Any], *, where: str = "template") -> tuple[Toleration, ...] | str:
    """TEMPLATE's tolerations, or a message naming the first that is not one."""
    try:
        return _tolerations(template, where)
    except FieldError as error:
        return str(error)


def pod_node_selector(template: Mapping[str, Any], *, where: str = "template") -> dict[str, str] | str:
    """TEMPLATE's nodeSelector (strings to strings), or a message saying why it is not one."""
    try:
        return _node_selector(template, where)
    except FieldError as error:
        return str(error)


def _pod_spec(template: Any, where: str) -> Mapping[str, Any]:
    return mapping(mapping(template, where).get("spec"), f"{where}.spec")


def _gpus(template: Any, where: str) -> tuple[int, str | None]:
    spec = _pod_spec(template, where)
    if sequence(spec.get("resourceClaims"), f"{where}.spec.resourceClaims"):
        raise UnsupportedFieldError(
            f"{where}.spec.resourceClaims: DRA resource claims are not yet supported for this kind; "
            f"ask whole GPUs as {WHOLE_GPU} limits, or one MIG instance as {MIG_PREFIX}<profile>"
        )
    # As kube-scheduler sums a pod's requests (PodRequests): app containers and restartable init
    # containers (sidecars) run side by side and add up; an ordinary init container runs alone, beside
    # only the sidecars started before it.
    containers: dict[str, int] = {}
    for index, container in enumerate(sequence(spec.get("containers"), f"{where}.spec.containers")):
        for resource, amount in _container_devices(container, f"{where}.spec.containers[{index}]").items():
            containers[resource] = containers.get(resource, 0) + amount
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for index, container in enumerate(sequence(spec.get("initContainers"), f"{where}.spec.initContainers")):
        devices = _container_devices(container, f"{where}.spec.initContainers[{index}]")
        sidecar = isinstance(container, Mapping) and container.get("restartPolicy") == "Always"
        for resource in devices.keys() | sidecars.keys():
            running = sidecars.get(resource, 0) + devices.get(resource, 0)
            init_peak[resource] = max(init_peak.get(resource, 0), running)
            if sidecar:
                sidecars[resource] = running
    effective = {
        resource: max(containers.get(resource, 0) + sidecars.get(resource, 0), init_peak.get(resource, 0))
        for resource in containers.keys() | init_peak.keys()
    }
    gpus = effective.pop(WHOLE_GPU, 0)
    if gpus > MAX_GPUS_PER_POD:
        raise FieldError(f"{where}: asks {gpus} {WHOLE_GPU} per pod, more than {MAX_GPUS_PER_POD}")
    instances = {resource: count for resource, count in effective.items() if count > 0}
    if not instances:
        return gpus, None
    if gpus or len(instances) > 1 or sum(instances.values()) > 1:
        every = {WHOLE_GPU: gpus} | instances
        asked = ", ".join(f"{count} {resource}" for resource, count in sorted(every.items()) if count)
        raise UnsupportedFieldError(
            f"{where}: each pod asks {asked}; aisched places either whole GPUs or one MIG instance per pod"
        )
    (resource,) = instances
    return 0, resource.removeprefix(MIG_PREFIX)


def _container_devices(container: Any, path: str) -> dict[str, int]:
    """The GPU and MIG resources one container asks: its limits, else its requests (as Kubernetes defaults them)."""
    resources = mapping(mapping(container, path).get("resources"), f"{path}.resources")
    if sequence(resources.get("claims"), f"{path}.resources.claims"):
        raise UnsupportedFieldError(f"{path}.resources.claims: DRA resource claims are not yet supported for this kind")
    asked: dict[str, int] = {}
    for amounts in ("requests", "limits"):  # limits last: they win where both are written
        for resource, quantity in mapping(resources.get(amounts), f"{path}.resources.{amounts}").items():
            if not resource.startswith(NVIDIA_PREFIX):
                continue
            where = f"{path}.resources.{amounts}[{shown(resource)}]"
            if resource != WHOLE_GPU and not resource.startswith(MIG_PREFIX):
                raise UnsupportedFieldError(
                    f"{where}: aisched charges {WHOLE_GPU} and {MIG_PREFIX}<profile>, not this device"
                )
            if resource.startswith(MIG_PREFIX) and resource.removeprefix(MIG_PREFIX) not in ALL_MIG_PROFILES:
                raise FieldError(f"{where}: not a MIG profile; profiles are {', '.join(ALL_MIG_PROFILES)}")
            asked[resource] = _whole_quantity(quantity, where)
    return asked


def _whole_quantity(quantity: Any, where: str) -> int:
    if isinstance(quantity, int) and not isinstance(quantity, bool) and 0 <= quantity <= MAX_GPUS_PER_POD:
        return quantity
    if isinstance(quantity, str) and _WHOLE_QUANTITY.match(quantity):
        return int(quantity)
    raise FieldError(f"{where} must be a whole number of devices, not {shown(quantity)}")


def _tolerations(template: Any, where: str) -> tuple[Toleration, ...]:
    path = f"{where}.spec.tolerations"
    return tuple(
        _toleration(entry, f"{path}[{index}]")
        for index, entry in enumerate(sequence(_pod_spec(template, where).get("tolerations"), path))
    )


def _toleration(entry: Any, where: str) -> Toleration:
    # `Toleration.from_dict` would turn a number into a key and raise on an unknown operator: check first.
    toleration = mapping(entry, where)
    for name in ("key", "value", "operator", "effect"):
        if toleration.get(name) is not None and not isinstance(toleration[name], str):
            raise FieldError(f"{where}.{name} must be a string, not {shown(toleration[name])}")
    operator, effect = toleration.get("operator"), toleration.get("effect")
    if operator and operator not in set(TolerationOperator):
        raise FieldError(f"{where}.operator must be Equal or Exists, not {shown(operator)}")
    if effect and effect not in set(TaintEffect):
        raise FieldError(f"{where}.effect must be one of {', '.join(TaintEffect)}, not {shown(effect)}")
    return Toleration.from_dict(toleration)


def _node_selector(template: Any, where: str) -> dict[str, str]:
    return string_map(_pod_spec(template, where).get("nodeSelector"), f"{where}.spec.nodeSelector")
