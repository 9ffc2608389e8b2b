"""GPU nodes as placement sees them, read from their labels with the configured keys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aisched.api.common import CapacityType
from aisched.policy.taints import Taint, Toleration
from aisched.policy.topology import ZONE_LABEL, Level, Topology


@dataclass(frozen=True, slots=True)
class Node:
    """One GPU node: what it has, where it sits, and who may use it.

    `used_gpus` counts the GPU requests of *every* pod bound to the node, ours and
    others', so placement never counts on GPUs something else holds.
    """

    name: str
    allocatable_gpus: int
    used_gpus: int = 0
    gpu_product: str | None = None
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    domains: tuple[str | None, ...] = ()
    """Its domain at each grouping level of the cluster's topology, widest first (None: not labelled);
    a snapshot pads a shorter tuple with None."""
    zone: str | None = None
    """topology.kubernetes.io/zone, whatever the topology: serving spreads replicas over zones."""
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True
    """Ready and not cordoned."""
    interrupted: bool = False
    """Carries an interruption taint: the node is about to go away, so nothing new goes there."""

    @property
    def usable(self) -> bool:
        return self.schedulable and not self.interrupted and self.allocatable_gpus > 0

    def label(self, level: Level) -> str | None:
        """The node's domain label at `level` (its own name at the Node level)."""
        if level.is_node:
            return self.name
        return self.domains[level.depth - 1] if level.depth <= len(self.domains) else None

    def path(self, level: Level) -> tuple[str | None, ...] | None:
        """The domain's identity at `level`: labels from the widest level down; None when it has no label there."""
        if self.label(level) is None:
            return None
        return (*self.domains, self.name)[: level.depth]


def local_node(
    name: str,
    allocatable_gpus: int,
    *,
    zone: str | None = None,
    rack: str | None = None,
    nvlink_domain: str | None = None,
    **fields: Any,
) -> Node:
    """A node of the local topology (Zone, Rack, NVLinkDomain), as the simulator's grids and tests make them."""
    return Node(name, allocatable_gpus, domains=(zone, rack, nvlink_domain), zone=zone, **fields)


@dataclass(frozen=True, slots=True)
class NodeLabelKeys:
    """Which node labels and taints mean what; the operator fills it from its settings."""

    topology: Topology
    gpu_product: str
    spot_labels: Mapping[str, str]
    interruption_taints: frozenset[str]


def node_from_labels(
    name: str,
    *,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    allocatable_gpus: int,
    used_gpus: int,
    schedulable: bool,
    keys: NodeLabelKeys,
) -> Node:
    """A `Node` from what a Node object and its pods say, read with the configured label keys."""
    spot = any(labels.get(key) == value for key, value in keys.spot_labels.items())
    return Node(
        name=name,
        allocatable_gpus=allocatable_gpus,
        used_gpus=used_gpus,
        gpu_product=labels.get(keys.gpu_product),
        capacity_type=CapacityType.SPOT if spot else CapacityType.ON_DEMAND,
        domains=keys.topology.domain_labels(labels),
        zone=labels.get(ZONE_LABEL),
        taints=tuple(taints),
        schedulable=schedulable,
        interrupted=any(taint.key in keys.interruption_taints for taint in taints),
    )


@dataclass(frozen=True, slots=True)
class Pool:
    """Nodes that any request either may or may not use: same product, capacity type and repelling taints."""

    gpu_product: str | None
    capacity_type: CapacityType
    taints: tuple[Taint, ...]

    def admits(self, tolerations: Sequence[Toleration]) -> bool:
        return all(any(t.tolerates(taint) for t in tolerations) for taint in self.taints)
