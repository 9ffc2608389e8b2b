"""MIG on the live cluster: the configs NVIDIA's MIG manager applies, where a MIG pod goes, which node to repartition.

A node's MIG layout is chosen by the label `nvidia.com/mig.config`: NVIDIA's MIG manager (GPU
Operator) reads it, applies the named config of its mig-parted ConfigMap to every GPU of the node
and reports `nvidia.com/mig.config.state` (`pending`, `success`, `failed`); the device plugin
("mixed" strategy) then advertises one `nvidia.com/mig-<profile>` per instance. We name only the
configs of the GPU Operator's stock ConfigMap (default-mig-parted-config), so a cluster needs no
ConfigMap of ours:

- `all-disabled`: MIG off; each GPU is one `nvidia.com/gpu`;
- `all-<profile>` (e.g. `all-1g.10gb`, `all-3g.40gb` on H100-80GB): as many instances of the one
  profile as fit on each GPU (7 x 1g, 3 x 2g, 2 x 3g, 1 x 4g, 1 x 7g);
- `all-balanced`: 2 x 1g, 1 x 2g, 1 x 3g on each GPU.

The config applies to all the GPUs of a node, so a node is repartitioned as a whole, and only
when no pod holds any of its GPUs (whole, MIG or share): nothing runs under a repartition. Only
nodes that carry the label already are ours to relabel (the GPU Operator sets `all-disabled` on
every node its MIG manager runs on); the others are left alone. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from aisched.api.sharing import GPU_MODELS, mig_kind
from aisched.policy.sharing.mig import COMPUTE_SLICES, KINDS, MIG_MODELS, STATIC_LAYOUTS, Layout, is_valid

CONFIG_LABEL: Final = "nvidia.com/mig.config"
STATE_LABEL: Final = "nvidia.com/mig.config.state"
STATE_SUCCESS: Final = "success"
STATE_FAILED: Final = "failed"
DISABLED: Final = "all-disabled"
BALANCED: Final = "all-balanced"


def _all_of(kind: str) -> Layout:
    """As many KIND instances as fit on one GPU, each at its first free allowed start."""
    profile = MIG_MODELS["H100-80GB"][kind]  # the shapes are the same on every model
    layout: Layout = ()
    for start in profile.starts:
        if is_valid((*layout, (kind, start)), {kind: profile}):
            layout = (*layout, (kind, start))
    return layout


_ALL: Final[dict[str, Layout]] = {kind: _all_of(kind) for kind in KINDS}


def model_of(product: str | None) -> str | None:
    """The MIG model of a GPU product (nvidia.com/gpu.product), or None if it has no MIG."""
    return GPU_MODELS.get(product or "")


def config_names(model: str) -> tuple[str, ...]:
    """The stock configs aisched may set on a node of MODEL, MIG ones first."""
    return (*(f"all-{MIG_MODELS[model][kind].name}" for kind in KINDS), BALANCED, DISABLED)


def config_layout(model: str, config: str) -> Layout | None:
    """The layout of each GPU under CONFIG on MODEL: () for all-disabled, None for a config we do not know."""
    if config == DISABLED:
        return ()
    if config == BALANCED:
        return STATIC_LAYOUTS["all_balanced"]
    for kind in KINDS:
        if config == f"all-{MIG_MODELS[model][kind].name}":
            return _ALL[kind]
    return None


def instances(model: str, config: str, gpus: int) -> dict[str, int]:
    """The `nvidia.com/mig-<profile>` counts a node of GPUS x MODEL advertises under CONFIG (mixed strategy)."""
    counts: dict[str, int] = {}
    for kind, _ in config_layout(model, config) or ():
        name = MIG_MODELS[model][kind].name
        counts[name] = counts.get(name, 0) + gpus
    return counts


def choose_config(model: str, profile: str, demand: Mapping[str, int]) -> str:
    """The stock config holding PROFILE whose instances best serve DEMAND (waiting instances by profile).

    Score: the waiting compute (of 7 slices per GPU) one GPU's instances could serve, then fewer,
    larger instances; a config without PROFILE is never chosen.
    """
    wanted = {mig_kind(p): n * MIG_MODELS[model][mig_kind(p)].compute for p, n in demand.items()}

    def served(config: str) -> tuple[int, int]:
        held: dict[str, int] = {}
        for kind, _ in config_layout(model, config) or ():
            held[kind] = held.get(kind, 0) + MIG_MODELS[model][kind].compute
        return sum(min(held.get(k, 0), wanted.get(k, 0)) for k in KINDS), -len(config_layout(model, config) or ())

    holding = [c for c in config_names(model) if profile in instances(model, c, 1)]
    return max(holding, key=served)


@dataclass(frozen=True)
class MigNode:
    """One node as MIG placement sees it."""

    name: str
    model: str
    gpus: int
    config: str | None
    """Its `nvidia.com/mig.config` label; None: no MIG manager runs there, never relabelled."""
    applied: bool
    """The MIG manager reports the config applied (state `success`): its instances are those advertised."""
    allocatable: Mapping[str, int] = field(default_factory=dict)
    """`nvidia.com/mig-<profile>` the device plugin advertises, by profile."""
    used: Mapping[str, int] = field(default_factory=dict)
    """Instances pods hold (or were handed and not seen yet), by profile."""
    gpu_holders: int = 0
    """Pods holding any GPU of the node (whole, MIG or share): a repartition waits for none."""
    schedulable: bool = True
    capacity_type: str = ""
    product: str = ""
    """Its GPU product (nvidia.com/gpu.product): a job's gpuType names one."""

    def free(self, profile: str) -> int:
        if not self.applied or not self.schedulable:
            return 0
        return max(self.allocatable.get(profile, 0) - self.used.get(profile, 0), 0)

    @property
    def idle(self) -> bool:
        return self.gpu_holders == 0


def place_instances(nodes: Sequence[MigNode], profile: str, count: int, prefer: str | None = None) -> list[str] | None:
    """A node with a free PROFILE instance for each of COUNT pods, or None if they do not all fit now.

    Packs: the node with the fewest free instances first (PREFER, the scheduler's node, breaks
    ties), so that whole idle nodes stay idle for a repartition or a whole-GPU gang.
    """
    free = {node.name: node.free(profile) for node in nodes}
    placed: list[str] = []
    for _ in range(count):
        holders = [name for name, n in free.items() if n > 0]
        if not holders:
            return None
        name = min(holders, key=lambda n: (free[n], n != prefer, n))
        free[name] -= 1
        placed.append(name)
    return placed


@dataclass(frozen=True)
class Repartition:
    node: str
    config: str


def plan_repartition(
    nodes: Sequence[MigNode], profile: str, missing: int, demand: Mapping[str, int]
) -> Repartition | None:
    """The idle node to set to the config that gives MISSING more PROFILE instances, or None.

    Only a node that has a MIG manager (a config label), whose last config is applied, of a model
    that has PROFILE, and on which no pod holds a GPU, is ever chosen; among them the one whose
    chosen config yields enough instances with the fewest GPUs (so the smallest fitting node goes).
    """
    candidates: list[tuple[int, str, str]] = []
    for node in nodes:
        if node.config is None or not node.applied or not node.idle or not node.schedulable:
            continue
        if not any(profile in instances(node.model, c, 1) for c in config_names(node.model)):
            continue  # another model's profile (1g.10gb is H100-80GB's and A100-80GB's, not A100-40GB's)
        config = choose_config(node.model, profile, demand)
        if config == node.config:
            continue  # already so: nothing a repartition would add
        gained = instances(node.model, config, node.gpus).get(profile, 0)
        short = max(missing - gained, 0)
        candidates.append((short * COMPUTE_SLICES + node.gpus, node.name, config))
    if not candidates:
        return None
    _, name, config = min(candidates)
    return Repartition(name, config)
