"""Cluster descriptions (hack/clusters/*.yaml): parsed once, here, for the simulator, the local cluster and hack/.

Pure: it takes the loaded mapping and gives each node's name and the labels a real
node of that kind would carry (GPU Feature Discovery's, the cloud's, Karpenter's,
and `aisched.io/rack`, the local topology's rack). The local cluster renders those
labels onto fake Node objects (aisched.testing.nodes, which hack/cluster.sh runs);
the simulator reads them with the local topology's keys, as the operator reads a
Node, so a simulated placement names the nodes and domains a real one would.

Format::

    region: us-east-1               # optional
    nodeTypes:                      # what one node is
      h100:
        instanceType: p5.48xlarge
        gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8, memoryMiB: 81559}
        cpu: "192"
        memory: 2048Gi
        pods: "110"                 # optional, default 110
        architecture: amd64         # optional, default amd64
        nodesPerNvlinkDomain: 1     # optional, default 1: nodes sharing one NVLink
                                    # domain (18 in a GB200 NVL72 rack; 0: no NVLink,
                                    # e.g. PCIe L4 cards, and no clique label)
    zones:
      - name: us-east-1a
        racks:                      # each entry is `count` identical racks (default 1)
          - count: 2
            nodes: [{type: h100, count: 4, capacityType: on-demand}]   # or spot

Node names are `<zone>-r<rack>-n<node>`, racks `<zone>-r<rack>`, NVLink domains
(`nvidia.com/gpu.clique`, which GPU Feature Discovery spells `<cluster>.<clique>`)
`<zone>-r<rack>.<clique>`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from aisched.policy.nodes import Node, NodeLabelKeys, node_from_labels
from aisched.policy.topology import CLIQUE_LABEL, LOCAL_RACK_LABEL, LOCAL_TOPOLOGY, ZONE_LABEL

CAPACITY_TYPES = ("on-demand", "spot")
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

LOCAL_LABEL_KEYS = NodeLabelKeys(
    topology=LOCAL_TOPOLOGY,
    gpu_product=GPU_PRODUCT_LABEL,
    spot_labels={CAPACITY_TYPE_LABEL: "spot"},
    interruption_taints=frozenset(),
)
"""How the simulator reads a described node: as the operator reads the local cluster's with the local preset."""


class DescriptionError(ValueError):
    """The cluster description is malformed; the message says where."""


@dataclass(frozen=True, slots=True)
class NodeType:
    name: str
    gpu_product: str
    gpu_count: int
    gpu_memory_mib: int
    cpu: str
    memory: str
    pods: str
    architecture: str
    instance_type: str
    nodes_per_nvlink_domain: int


@dataclass(frozen=True, slots=True)
class DescribedNode:
    name: str
    node_type: NodeType
    labels: Mapping[str, str]
    """Every label the node carries, in the order a Node object lists them."""

    def as_policy_node(self) -> Node:
        """The node as placement sees it, read with the local topology's label keys."""
        return node_from_labels(
            self.name,
            labels=self.labels,
            taints=(),
            allocatable_gpus=self.node_type.gpu_count,
            used_gpus=0,
            schedulable=True,
            keys=LOCAL_LABEL_KEYS,
        )


def describe_cluster(description: Any) -> list[DescribedNode]:
    """Every node the description stands for, in a stable order."""
    if not isinstance(description, dict):
        raise DescriptionError("expected a mapping with nodeTypes and zones")
    types = {
        name: _node_type(name, spec)
        for name, spec in _require(description, "nodeTypes", dict, "the description").items()
    }
    region = description.get("region")
    if region is not None and not isinstance(region, str):
        raise DescriptionError(f"the description: 'region' must be a str, not {region!r}")
    nodes: list[DescribedNode] = []
    for zone in _require(description, "zones", list, "the description"):
        zone_name = _require(zone, "name", str, "a zone")
        for rack_index, groups in enumerate(_expand_racks(zone, zone_name), start=1):
            nodes.extend(_rack_nodes(f"{zone_name}-r{rack_index:02d}", groups, types, region, zone_name))
    return nodes


def _node_type(name: str, spec: Any) -> NodeType:
    where = f"node type {name}"
    gpu = _require(spec, "gpu", dict, where)
    return NodeType(
        name=name,
        gpu_product=_require(gpu, "product", str, f"the gpu of {name}"),
        gpu_count=_require(gpu, "count", int, f"the gpu of {name}"),
        gpu_memory_mib=int(gpu.get("memoryMiB", 0)),
        cpu=str(_require(spec, "cpu", object, where)),
        memory=str(_require(spec, "memory", object, where)),
        pods=str(spec.get("pods", "110")),
        architecture=str(spec.get("architecture", "amd64")),
        instance_type=str(spec.get("instanceType", "unknown")),
        nodes_per_nvlink_domain=int(spec.get("nodesPerNvlinkDomain", 1)),
    )


def _expand_racks(zone: dict[str, Any], zone_name: str) -> Iterator[list[dict[str, Any]]]:
    for rack in _require(zone, "racks", list, f"zone {zone_name}"):
        groups = _require(rack, "nodes", list, f"a rack of zone {zone_name}")
        for _ in range(int(rack.get("count", 1))):
            yield groups


def _rack_nodes(
    rack: str, groups: list[dict[str, Any]], types: dict[str, NodeType], region: str | None, zone: str
) -> Iterator[DescribedNode]:
    node_index = clique_index = 0
    for group in groups:
        type_name = _require(group, "type", str, f"a node group of rack {rack}")
        if type_name not in types:
            raise DescriptionError(f"rack {rack}: unknown node type {type_name!r}")
        node_type = types[type_name]
        capacity_type = group.get("capacityType", "on-demand")
        if capacity_type not in CAPACITY_TYPES:
            raise DescriptionError(f"rack {rack}: capacityType must be one of {CAPACITY_TYPES}")
        domain_size = node_type.nodes_per_nvlink_domain
        count = _require(group, "count", int, f"a node group of rack {rack}")
        if domain_size and count % domain_size:
            raise DescriptionError(
                f"rack {rack}: {count} {type_name} nodes do not fill NVLink domains of {domain_size}"
            )
        for i in range(count):
            node_index += 1
            name = f"{rack}-n{node_index:02d}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": node_type.architecture,
                "node.kubernetes.io/instance-type": node_type.instance_type,
                **({"topology.kubernetes.io/region": region} if region is not None else {}),
                ZONE_LABEL: zone,
                LOCAL_RACK_LABEL: rack,
                CAPACITY_TYPE_LABEL: capacity_type,
                "aisched.io/node-type": type_name,
            }
            if domain_size:
                if i % domain_size == 0:
                    clique_index += 1
                labels[CLIQUE_LABEL] = f"{rack}.{clique_index}"
            labels |= {
                "nvidia.com/gpu.present": "true",
                GPU_PRODUCT_LABEL: node_type.gpu_product,
                "nvidia.com/gpu.count": str(node_type.gpu_count),
                "nvidia.com/gpu.memory": str(node_type.gpu_memory_mib),
            }
            yield DescribedNode(name, node_type, labels)


def _require(mapping: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise DescriptionError(f"{where}: missing {key!r}")
    value = mapping[key]
    if not isinstance(value, kind):
        raise DescriptionError(f"{where}: {key!r} must be a {kind.__name__}, not {value!r}")
    return value
