"""GPUs a pod template would take for itself, outside what its spec asks: refused by every queue's podPolicy.

The queue's ledger charges what the spec asks (gpusPerReplica, gpuShare), and the CRD rules hold a
template's `nvidia.com/gpu` to gpusPerReplica. A DRA claim, a MIG instance or another NVIDIA device
resource (the time-sliced `nvidia.com/gpu.shared`) written into the template would be a GPU charged
to no one, so it is refused at every Pod Security level, as a ServiceAccount is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

GPU_ASKED_THROUGH_SPEC: Final = "nothing (ask for GPUs through spec.gpusPerReplica or spec.gpuShare)"
NVIDIA_RESOURCE_PREFIX: Final = "nvidia.com/"
WHOLE_GPU_RESOURCE: Final = "nvidia.com/gpu"


def template_devices(spec: Mapping[str, Any], pod: str) -> Iterator[tuple[str, str]]:
    """(field, what) for each device a pod SPEC (at path POD) asks beyond whole GPUs; every value is a tenant's."""
    if _list(spec.get("resourceClaims")):
        yield f"{pod}.resourceClaims", "DRA resource claims"
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(_list(spec.get(kind))):
            resources = _object(_object(container).get("resources"))
            where = f"{pod}.{kind}[{index}].resources"
            if _list(resources.get("claims")):
                yield f"{where}.claims", "DRA resource claims"
            for amounts in ("limits", "requests"):
                for name in _object(resources.get(amounts)):
                    if str(name).startswith(NVIDIA_RESOURCE_PREFIX) and name != WHOLE_GPU_RESOURCE:
                        yield f"{where}.{amounts}", f"device resource {str(name)[:64]}"


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
