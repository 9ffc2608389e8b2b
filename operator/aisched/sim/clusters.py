"""Simulated clusters: the description files of hack/clusters/*.yaml, or a generated grid.

Descriptions are parsed by aisched.policy.cluster_description, as the local cluster's
are (aisched.testing.nodes), and read through the labels a real node would carry:
a simulated placement names the nodes and domains a real one would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from aisched.policy.cluster_description import DescriptionError, describe_cluster
from aisched.policy.nodes import Node, local_node

ClusterDescriptionError = DescriptionError


def load_cluster(path: Path) -> list[Node]:
    with path.open() as f:
        description = yaml.safe_load(f)
    if not isinstance(description, dict):
        raise ClusterDescriptionError(f"{path}: expected a mapping with nodeTypes and zones")
    return describe_nodes(description)


def describe_nodes(description: dict[str, Any]) -> list[Node]:
    """The described nodes as placement sees them, read as the operator reads the local cluster's."""
    return [node.as_policy_node() for node in describe_cluster(description)]


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
