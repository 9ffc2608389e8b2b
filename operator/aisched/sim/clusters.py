"""Simulated clusters: the description files of hack/clusters/*.yaml, or a generated grid.

The description format is the one aisched.testing.nodes turns into fake Node
objects for the local cluster; node, rack and NVLink domain names here are the
same as there, so a simulated placement names the nodes a real one would.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from aisched.api.common import CapacityType
from aisched.policy.nodes import Node, local_node

_CAPACITY = {"on-demand": CapacityType.ON_DEMAND, "spot": CapacityType.SPOT}


class ClusterDescriptionError(ValueError):
    """The cluster description is malformed; the message says where."""


def load_cluster(path: Path) -> list[Node]:
    with path.open() as f:
        description = yaml.safe_load(f)
    if not isinstance(description, dict):
        raise ClusterDescriptionError(f"{path}: expected a mapping with nodeTypes and zones")
    return list(describe_nodes(description))


def describe_nodes(description: dict[str, Any]) -> Iterator[Node]:
    node_types = _get(description, "nodeTypes", dict, "the description")
    for zone in _get(description, "zones", list, "the description"):
        zone_name = _get(zone, "name", str, "a zone")
        rack_index = 0
        for rack_spec in _get(zone, "racks", list, f"zone {zone_name}"):
            for _ in range(int(rack_spec.get("count", 1))):
                rack_index += 1
                rack = f"{zone_name}-r{rack_index:02d}"
                yield from _rack(zone_name, rack, _get(rack_spec, "nodes", list, f"rack {rack}"), node_types)


def _rack(zone: str, rack: str, groups: list[dict[str, Any]], node_types: dict[str, Any]) -> Iterator[Node]:
    node_index = clique = 0
    for group in groups:
        type_name = _get(group, "type", str, f"a node group of rack {rack}")
        if type_name not in node_types:
            raise ClusterDescriptionError(f"rack {rack}: unknown node type {type_name!r}")
        node_type = node_types[type_name]
        gpu = _get(node_type, "gpu", dict, f"node type {type_name}")
        capacity = group.get("capacityType", "on-demand")
        if capacity not in _CAPACITY:
            raise ClusterDescriptionError(f"rack {rack}: capacityType must be one of {sorted(_CAPACITY)}")
        per_domain = int(node_type.get("nodesPerNvlinkDomain", 1))
        for i in range(_get(group, "count", int, f"a node group of rack {rack}")):
            node_index += 1
            if per_domain and i % per_domain == 0:
                clique += 1
            yield local_node(
                name=f"{rack}-n{node_index:02d}",
                allocatable_gpus=_get(gpu, "count", int, f"the gpu of {type_name}"),
                gpu_product=str(gpu.get("product")),
                capacity_type=_CAPACITY[capacity],
                nvlink_domain=f"{rack}.{clique}" if per_domain else None,
                rack=rack,
                zone=zone,
            )


def _get(mapping: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise ClusterDescriptionError(f"{where}: missing {key!r}")
    value = mapping[key]
    if not isinstance(value, kind):
        raise ClusterDescriptionError(f"{where}: {key!r} must be a {kind.__name__}, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class GridSpec:
    """A homogeneous cluster: zones of racks of identical nodes."""

    nodes: int
    gpus_per_node: int = 8
    nodes_per_rack: int = 32
    racks_per_zone: int = 8
    nodes_per_nvlink: int = 0
    """0: NVLink inside each node only (HGX boxes); n: n nodes share a domain (GB200 NVL)."""
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"


def generated_cluster(spec: GridSpec) -> list[Node]:
    nodes = []
    for i in range(spec.nodes):
        rack_number = i // spec.nodes_per_rack
        zone = f"zone-{rack_number // spec.racks_per_zone}"
        rack = f"{zone}-r{rack_number % spec.racks_per_zone + 1:02d}"
        index = i % spec.nodes_per_rack
        nvlink = f"{rack}.{index // spec.nodes_per_nvlink + 1}" if spec.nodes_per_nvlink else None
        nodes.append(
            local_node(
                name=f"{rack}-n{index + 1:02d}",
                allocatable_gpus=spec.gpus_per_node,
                gpu_product=spec.gpu_product,
                nvlink_domain=nvlink,
                rack=rack,
                zone=zone,
            )
        )
    return nodes


def sized_to_load(offered_gpus: float, largest_job_gpus: int, target_load: float, template: GridSpec) -> GridSpec:
    """`template` with as many nodes as make `offered_gpus` (GPU-time per second of the trace) the
    `target_load` share of the cluster, and at least enough for its largest job."""
    if target_load <= 0:
        raise ValueError("the target load must be positive")
    gpus = max(offered_gpus / target_load, largest_job_gpus, 1)
    return replace(template, nodes=math.ceil(gpus / template.gpus_per_node))
