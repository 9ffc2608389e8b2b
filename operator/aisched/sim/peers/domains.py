"""Topology as the peers see it: nodes grouped by rack and zone, and free GPUs counted in pods."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from aisched.policy.cluster import ClusterSnapshot


def pods_fitting(snapshot: ClusterSnapshot, nodes: Iterable[str], gpus_per_pod: int) -> int:
    return sum(snapshot.free_gpus(n) // gpus_per_pod for n in nodes)


def nodes_by(snapshot: ClusterSnapshot, level: str) -> dict[str, list[str]]:
    """Node names by rack, zone or the whole cluster (`level` "rack", "zone" or "cluster")."""
    groups: dict[str, list[str]] = defaultdict(list)
    rack = snapshot.topology.find("Rack")  # the simulator's clusters have the local topology
    for node in snapshot.nodes():
        if not node.usable:
            continue
        key = (node.label(rack) if rack else None) if level == "rack" else node.zone if level == "zone" else ""
        groups[key or node.name].append(node.name)
    return dict(groups)
