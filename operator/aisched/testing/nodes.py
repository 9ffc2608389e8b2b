"""Render a cluster description (hack/clusters/*.yaml) into fake GPU Node manifests.

The nodes carry the annotation KWOK manages (`kwok.x-k8s.io/node: fake`), the
labels that GPU Feature Discovery, the cloud providers and Karpenter put on real
GPU nodes, and `nvidia.com/gpu` capacity, so the scheduler and the operator see
them as they would see a real cluster. No taint: ordinary pods schedule onto them.

Description format::

    region: us-east-1
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

Usage: python -m aisched.testing.nodes DESCRIPTION [--count] [--shard I/N]
(a YAML stream of Nodes, or their number, on stdout; --shard splits the nodes
so that several clients can create them in parallel)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
CAPACITY_TYPES = ("on-demand", "spot")
LABEL_RACK = "aisched.io/rack"
LABEL_CLIQUE = "nvidia.com/gpu.clique"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
# Node InternalIPs come from 10.16.0.0/16, apart from the pod (10.244/16) and
# service (10.96/16) ranges hack/cluster.sh uses, so every address is unique.
NODE_NETWORK = "10.16"
MAX_NODES = 254 * 256


class DescriptionError(ValueError):
    """The cluster description is malformed; the message says where."""


def load_description(path: Path) -> dict[str, Any]:
    with path.open() as f:
        description = yaml.safe_load(f)
    if not isinstance(description, dict):
        raise DescriptionError(f"{path}: expected a mapping with region, nodeTypes and zones")
    return description


def render_nodes(description: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Node the description stands for, in a stable order."""
    node_types = _require(description, "nodeTypes", dict, "the description")
    region = _require(description, "region", str, "the description")
    nodes: list[dict[str, Any]] = []
    for zone in _require(description, "zones", list, "the description"):
        zone_name = _require(zone, "name", str, "a zone")
        for rack_index, groups in enumerate(_expand_racks(zone, zone_name), start=1):
            rack = f"{zone_name}-r{rack_index:02d}"
            nodes.extend(_rack_nodes(rack, groups, node_types, region, zone_name))
    if len(nodes) > MAX_NODES:
        raise DescriptionError(f"{len(nodes)} nodes: at most {MAX_NODES} get an address in {NODE_NETWORK}")
    for index, node in enumerate(nodes):
        node["status"]["addresses"] = [
            {"type": "InternalIP", "address": f"{NODE_NETWORK}.{index // 254}.{index % 254 + 1}"},
            {"type": "Hostname", "address": node["metadata"]["name"]},
        ]
    return nodes


def _expand_racks(zone: dict[str, Any], zone_name: str) -> Iterator[list[dict[str, Any]]]:
    for rack in _require(zone, "racks", list, f"zone {zone_name}"):
        groups = _require(rack, "nodes", list, f"a rack of zone {zone_name}")
        for _ in range(int(rack.get("count", 1))):
            yield groups


def _rack_nodes(
    rack: str, groups: list[dict[str, Any]], node_types: dict[str, Any], region: str, zone: str
) -> Iterator[dict[str, Any]]:
    node_index = 0
    clique_index = 0
    for group in groups:
        type_name = _require(group, "type", str, f"a node group of rack {rack}")
        if type_name not in node_types:
            raise DescriptionError(f"rack {rack}: unknown node type {type_name!r}")
        node_type = node_types[type_name]
        capacity_type = group.get("capacityType", "on-demand")
        if capacity_type not in CAPACITY_TYPES:
            raise DescriptionError(f"rack {rack}: capacityType must be one of {CAPACITY_TYPES}")
        domain_size = int(node_type.get("nodesPerNvlinkDomain", 1))
        count = _require(group, "count", int, f"a node group of rack {rack}")
        if domain_size and count % domain_size:
            raise DescriptionError(
                f"rack {rack}: {count} {type_name} nodes do not fill NVLink domains of {domain_size}"
            )
        for i in range(count):
            node_index += 1
            labels = {
                "topology.kubernetes.io/region": region,
                "topology.kubernetes.io/zone": zone,
                LABEL_RACK: rack,
                LABEL_CAPACITY_TYPE: capacity_type,
                "aisched.io/node-type": type_name,
            }
            if domain_size:
                if i % domain_size == 0:
                    clique_index += 1
                labels[LABEL_CLIQUE] = f"{rack}.{clique_index}"
            yield _node(name=f"{rack}-n{node_index:02d}", node_type=node_type, labels=labels)


def _node(name: str, node_type: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    gpu = _require(node_type, "gpu", dict, f"node type of {name}")
    gpu_count = str(_require(gpu, "count", int, f"the gpu of {name}"))
    architecture = node_type.get("architecture", "amd64")
    resources = {
        "cpu": str(_require(node_type, "cpu", object, f"node type of {name}")),
        "memory": str(_require(node_type, "memory", object, f"node type of {name}")),
        "pods": str(node_type.get("pods", "110")),
        "ephemeral-storage": "1Ti",
        "nvidia.com/gpu": gpu_count,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(KWOK_ANNOTATION),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": architecture,
                "node.kubernetes.io/instance-type": str(node_type.get("instanceType", "unknown")),
                **labels,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": str(_require(gpu, "product", str, f"the gpu of {name}")),
                "nvidia.com/gpu.count": gpu_count,
                "nvidia.com/gpu.memory": str(gpu.get("memoryMiB", 0)),
            },
        },
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": dict(resources),
            "nodeInfo": {"architecture": architecture, "operatingSystem": "linux"},
        },
    }


def _require(mapping: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise DescriptionError(f"{where}: missing {key!r}")
    value = mapping[key]
    if not isinstance(value, kind):
        raise DescriptionError(f"{where}: {key!r} must be a {kind.__name__}, not {value!r}")
    return value


def _shard(text: str) -> tuple[int, int]:
    index, _, shards = text.partition("/")
    if not (index.isdigit() and shards.isdigit() and int(index) < int(shards)):
        raise argparse.ArgumentTypeError(f"expected I/N with 0 <= I < N, not {text!r}")
    return int(index), int(shards)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render a cluster description into fake GPU Nodes.")
    parser.add_argument("description", type=Path, help="cluster description YAML (hack/clusters/*.yaml)")
    parser.add_argument("--count", action="store_true", help="print the number of nodes instead")
    parser.add_argument(
        "--shard", type=_shard, default=(0, 1), metavar="I/N", help="only every Nth node from the Ith (from 0)"
    )
    args = parser.parse_args(argv)
    try:
        nodes = render_nodes(load_description(args.description))
    except (OSError, DescriptionError, yaml.YAMLError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    index, shards = args.shard
    nodes = nodes[index::shards]
    if args.count:
        print(len(nodes))
    else:
        yaml.safe_dump_all(nodes, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
