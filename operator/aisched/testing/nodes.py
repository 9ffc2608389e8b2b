"""Render a cluster description (hack/clusters/*.yaml) into fake GPU Node manifests.

The nodes carry the annotation KWOK manages (`kwok.x-k8s.io/node: fake`), the
labels that GPU Feature Discovery, the cloud providers and Karpenter put on real
GPU nodes, and `nvidia.com/gpu` capacity, so the scheduler and the operator see
them as they would see a real cluster. No taint: ordinary pods schedule onto them.

The description format and the node and label names are aisched.policy.cluster_description's,
which the simulator reads too.

Usage: python -m aisched.testing.nodes DESCRIPTION [--count] [--shard I/N]
(a YAML stream of Nodes, or their number, on stdout; --shard splits the nodes
so that several clients can create them in parallel)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from aisched.policy.cluster_description import DescribedNode, DescriptionError, describe_cluster

__all__ = ["DescriptionError", "load_description", "render_nodes"]

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
# Node InternalIPs come from 10.16.0.0/16, apart from the pod (10.244/16) and
# service (10.96/16) ranges hack/cluster.sh uses, so every address is unique.
NODE_NETWORK = "10.16"
MAX_NODES = 254 * 256


def load_description(path: Path) -> dict[str, Any]:
    with path.open() as f:
        description = yaml.safe_load(f)
    if not isinstance(description, dict):
        raise DescriptionError(f"{path}: expected a mapping with region, nodeTypes and zones")
    return description


def render_nodes(description: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Node the description stands for, in a stable order."""
    described = describe_cluster(description)
    if len(described) > MAX_NODES:
        raise DescriptionError(f"{len(described)} nodes: at most {MAX_NODES} get an address in {NODE_NETWORK}")
    nodes = [_node(node) for node in described]
    for index, node in enumerate(nodes):
        node["status"]["addresses"] = [
            {"type": "InternalIP", "address": f"{NODE_NETWORK}.{index // 254}.{index % 254 + 1}"},
            {"type": "Hostname", "address": node["metadata"]["name"]},
        ]
    return nodes


def _node(node: DescribedNode) -> dict[str, Any]:
    kind = node.node_type
    resources = {
        "cpu": kind.cpu,
        "memory": kind.memory,
        "pods": kind.pods,
        "ephemeral-storage": "1Ti",
        "nvidia.com/gpu": str(kind.gpu_count),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "annotations": dict(KWOK_ANNOTATION), "labels": dict(node.labels)},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": dict(resources),
            "nodeInfo": {"architecture": kind.architecture, "operatingSystem": "linux"},
        },
    }


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
