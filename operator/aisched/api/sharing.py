"""Part of one GPU for each worker or replica: a fraction (compute share and/or memory) or a MIG profile.

The MIG profiles each GPU model has are data (NVIDIA's MIG user guide, "Supported MIG
profiles"): a profile is `<compute slices>g.<memory>gb`, and its name differs between models
(the 1g instance is 1g.5gb on an A100-40GB and 1g.10gb on an H100-80GB). The CEL rules below are
written from the same tables, so the API server refuses a profile the requested GPU type does
not have, and a fraction of a multi-GPU worker, before the operator sees the object.
"""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import Field, model_validator

from aisched.api.common import GPU, ApiModel, cel, validated_by

# The model-independent instance classes, smallest first: the number is its share of 7 compute slices.
MIG_KINDS: Final = ("1g", "2g", "3g", "4g", "7g")
COMPUTE_SLICES: Final = 7

# Profile names of each MIG-capable GPU model, in MIG_KINDS order. The 1g profiles with double
# memory (1g.10gb on A100-40GB, 1g.20gb on H100) are left out: the packer places one 1g size.
MIG_PROFILES: Final[dict[str, tuple[str, ...]]] = {
    "A100-40GB": ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "A100-80GB": ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-80GB": ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "H100-94GB": ("1g.12gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    "H200-141GB": ("1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
}

# The GPU products (node label nvidia.com/gpu.product, as GPU Feature Discovery writes it) of each model.
GPU_MODELS: Final[dict[str, str]] = {
    "NVIDIA-A100-SXM4-40GB": "A100-40GB",
    "NVIDIA-A100-PCIE-40GB": "A100-40GB",
    "NVIDIA-A100-SXM4-80GB": "A100-80GB",
    "NVIDIA-A100-80GB-PCIe": "A100-80GB",
    "NVIDIA-H100-80GB-HBM3": "H100-80GB",
    "NVIDIA-H100-PCIe": "H100-80GB",
    "NVIDIA-H100-NVL": "H100-94GB",
    "NVIDIA-H200": "H200-141GB",
    "NVIDIA-H200-NVL": "H200-141GB",
}

ALL_MIG_PROFILES: Final = tuple(sorted({p for profiles in MIG_PROFILES.values() for p in profiles}))
MAX_GPU_MEMORY_MIB: Final = 1024 * 1024  # far beyond any GPU's: a bound, not a capacity


def mig_profiles_of(product: str) -> tuple[str, ...]:
    """The MIG profiles a GPU product has (none for a product that is no MIG-capable model)."""
    model = GPU_MODELS.get(product)
    return MIG_PROFILES[model] if model is not None else ()


def mig_kind(profile: str) -> str:
    """`3g.40gb` -> `3g`: the instance class, the same on every model."""
    return profile.split(".", 1)[0]


def mig_milli(profile: str) -> int:
    """The GPU-equivalents (thousandths) a MIG instance is charged: its share of the 7 compute slices, rounded up."""
    slices = int(mig_kind(profile).rstrip("g"))
    return -(-slices * 1000 // COMPUTE_SLICES)


# A map literal: product -> the profiles it has, for the spec's CEL rule.
_PROFILES_BY_PRODUCT_CEL = json.dumps({product: list(MIG_PROFILES[m]) for product, m in GPU_MODELS.items()})

SHARE_KIND_MESSAGE: Final = (
    "gpuShare asks for either a migProfile or a fraction of a GPU (computePercent and/or memoryMiB), one of the two"
)
UNKNOWN_PROFILE_MESSAGE: Final = "gpuShare.migProfile must be one of " + ", ".join(ALL_MIG_PROFILES)
SHARE_OF_ONE_MESSAGE: Final = "gpuShare is a part of one GPU: gpusPerReplica must be 1"
PROFILE_OF_TYPE_MESSAGE: Final = (
    "gpuShare.migProfile must be a profile gpuType has (MIG-capable: "
    + ", ".join(sorted(GPU_MODELS))
    + "; e.g. NVIDIA-H100-80GB-HBM3: "
    + ", ".join(MIG_PROFILES["H100-80GB"])
    + ")"
)
SHARE_TEMPLATE_MESSAGE: Final = (
    f"with gpuShare no container of the template may ask for {GPU}: the operator attaches the share itself"
)


class GpuShare(ApiModel):
    """Part of one GPU: a fraction of its compute and/or memory (shared by DRA), or one MIG instance."""

    model_config = validated_by(
        cel("has(self.migProfile) != (has(self.computePercent) || has(self.memoryMiB))", SHARE_KIND_MESSAGE),
        cel(
            f"!has(self.migProfile) || self.migProfile in {json.dumps(list(ALL_MIG_PROFILES))}",
            UNKNOWN_PROFILE_MESSAGE,
        ),
    )

    compute_percent: int | None = Field(
        default=None,
        ge=1,
        le=99,
        description="Share of the GPU's compute, in percent (a whole GPU is gpusPerReplica: 1 without gpuShare).",
    )
    memory_mib: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPU_MEMORY_MIB,
        alias="memoryMiB",
        description="GPU memory the worker needs, in MiB; the GPU it lands on has at least this much free.",
    )
    mig_profile: str | None = Field(
        default=None,
        max_length=16,
        description="A MIG instance of this profile (e.g. 1g.10gb on H100-80GB, 1g.5gb on A100-40GB).",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> GpuShare:
        if (self.mig_profile is not None) == (self.compute_percent is not None or self.memory_mib is not None):
            raise ValueError(SHARE_KIND_MESSAGE)
        if self.mig_profile is not None and self.mig_profile not in ALL_MIG_PROFILES:
            raise ValueError(UNKNOWN_PROFILE_MESSAGE)
        return self


_GPU_IN = "has(c.resources) && has(c.resources.{kind}) && '" + GPU + "' in c.resources.{kind}"

# The rules of a spec with `gpusPerReplica`, `gpuType`, `gpuShare` and a `template`.
SHARE_RULES: Final = [
    cel("!has(self.gpuShare) || self.gpusPerReplica == 1", SHARE_OF_ONE_MESSAGE),
    cel(
        "!has(self.gpuShare) || !has(self.gpuShare.migProfile) || !has(self.gpuType) || "
        f"(self.gpuType in {_PROFILES_BY_PRODUCT_CEL} && "
        f"self.gpuShare.migProfile in {_PROFILES_BY_PRODUCT_CEL}[self.gpuType])",
        PROFILE_OF_TYPE_MESSAGE,
    ),
    cel(
        "!has(self.gpuShare) || self.template.spec.containers.all(c, "
        f"!({_GPU_IN.format(kind='limits')}) && !({_GPU_IN.format(kind='requests')}))",
        SHARE_TEMPLATE_MESSAGE,
    ),
]


def check_share_rules(share: GpuShare | None, gpus_per_replica: int, gpu_type: str | None, template: Any) -> None:
    """The same rules as SHARE_RULES, with their messages, for the models."""
    if share is None:
        return
    if gpus_per_replica != 1:
        raise ValueError(SHARE_OF_ONE_MESSAGE)
    if share.mig_profile is not None and gpu_type is not None and share.mig_profile not in mig_profiles_of(gpu_type):
        raise ValueError(PROFILE_OF_TYPE_MESSAGE)
    containers = template.get("spec", {}).get("containers", []) if isinstance(template, dict) else []
    for container in containers:
        resources = container.get("resources", {}) if isinstance(container, dict) else {}
        if any(GPU in (resources.get(kind) or {}) for kind in ("limits", "requests")):
            raise ValueError(SHARE_TEMPLATE_MESSAGE)
