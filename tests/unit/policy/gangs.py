"""Clusters, gang requests and a brute-force placement oracle for the placement and scheduler tests."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from aisched.api.common import CapacityType
from aisched.policy.cluster import (
    ClusterSnapshot,
    Node,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    level_rank,
    local_node,
)
from aisched.policy.placement import GangRequest, search_levels
from aisched.policy.topology import LOCAL_TOPOLOGY, Level
from tests.levels import LEVELS

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"
DEDICATED = Taint("dedicated", "team-b", TaintEffect.NO_SCHEDULE)
TOLERATE_DEDICATED = Toleration("dedicated", TolerationOperator.EQUAL, "team-b")


def rack_nodes(
    zone: str,
    rack: str,
    count: int,
    *,
    gpus: int = 8,
    product: str = H100,
    capacity: CapacityType = CapacityType.ON_DEMAND,
    nodes_per_nvlink: int = 0,
    used: Sequence[int] = (),
) -> list[Node]:
    """`count` nodes of one rack, named <rack>-n<i>, with `used[i]` GPUs in use."""
    return [
        local_node(
            name=f"{rack}-n{i}",
            allocatable_gpus=gpus,
            used_gpus=used[i] if i < len(used) else 0,
            gpu_product=product,
            capacity_type=capacity,
            nvlink_domain=f"{rack}.{i // nodes_per_nvlink}" if nodes_per_nvlink else None,
            rack=rack,
            zone=zone,
        )
        for i in range(count)
    ]


def grid(zones: int, racks: int, nodes: int, *, gpus: int = 8, product: str = H100) -> list[Node]:
    """zones x racks x nodes identical, empty nodes: zone z<i>, rack z<i>-r<j>."""
    return [
        node
        for z in range(zones)
        for r in range(racks)
        for node in rack_nodes(f"z{z}", f"z{z}-r{r}", nodes, gpus=gpus, product=product)
    ]


# -- hypothesis strategies ---------------------------------------------------------------------


@st.composite
def nodes_strategy(draw: st.DrawFn, *, max_nodes: int = 14, usable_only: bool = False) -> list[Node]:
    count = draw(st.integers(1, max_nodes))
    nodes = []
    for i in range(count):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        zone = draw(st.sampled_from(["za", "zb", None]))
        rack = draw(st.sampled_from(["r1", "r2", "r3", None]))
        nodes.append(
            local_node(
                name=f"node-{i:02d}",
                allocatable_gpus=gpus,
                used_gpus=draw(st.integers(0, gpus)),
                gpu_product=draw(st.sampled_from([H100, H100, A100])),
                capacity_type=draw(st.sampled_from(list(CapacityType))),
                nvlink_domain=draw(st.sampled_from(["nv1", "nv2", None])),
                rack=rack,
                zone=zone,
                taints=draw(st.sampled_from([(), (), (DEDICATED,)])),
                schedulable=usable_only or draw(st.booleans() | st.just(True)),
                interrupted=False if usable_only else draw(st.sampled_from([False, False, False, True])),
            )
        )
    return nodes


@st.composite
def requests_strategy(draw: st.DrawFn, names: Sequence[str]) -> GangRequest:
    capacity = draw(
        st.sampled_from(
            [
                (CapacityType.ON_DEMAND,),
                (CapacityType.SPOT,),
                (CapacityType.SPOT, CapacityType.ON_DEMAND),
                (CapacityType.ON_DEMAND, CapacityType.SPOT),
            ]
        )
    )
    return GangRequest(
        replicas=draw(st.integers(1, 6)),
        gpus_per_replica=draw(st.sampled_from([1, 2, 4, 8])),
        gpu_types=draw(st.sampled_from([None, frozenset({H100}), frozenset({A100}), frozenset({H100, A100})])),
        required_level=draw(st.sampled_from([None, *LEVELS])),
        tolerations=draw(st.sampled_from([(), (TOLERATE_DEDICATED,)])),
        capacity_types=capacity,
        excluded_nodes=frozenset(draw(st.lists(st.sampled_from(list(names)), max_size=3))) if names else frozenset(),
    )


# -- the oracle: what the smallest-domain, best-fit rule means, by scanning every node ---------------


@dataclass(frozen=True)
class Fit:
    level: Level | None
    leftover: int
    """Free GPUs of the chosen pools left in the domain afterwards (best fit minimises it)."""


def eligible(node: Node, request: GangRequest, capacity_types: Iterable[CapacityType]) -> bool:
    return (
        node.usable
        and node.name not in request.excluded_nodes
        and (request.gpu_types is None or node.gpu_product in request.gpu_types)
        and node.capacity_type in set(capacity_types)
        and all(any(t.tolerates(taint) for t in request.tolerations) for taint in node.taints if taint.repels)
    )


def free_of(node: Node) -> int:
    return max(0, node.allocatable_gpus - node.used_gpus)


def oracle(nodes: Sequence[Node], request: GangRequest, *, empty: bool = False) -> Fit | None:
    """The level and best-fit leftover the rule asks for, or None when no allowed domain has room."""
    preferred, *others = request.capacity_types
    passes = [(preferred,), request.capacity_types] if others else [request.capacity_types]
    g, r = request.gpus_per_replica, request.replicas
    for capacity_types in passes:
        candidates = [n for n in nodes if eligible(n, request, capacity_types)]
        for level in search_levels(request, LOCAL_TOPOLOGY):
            groups: dict[tuple[object, ...], list[Node]] = defaultdict(list)
            for node in candidates:
                path = () if level is None else node.path(level)
                if path is not None:
                    groups[(path, node.gpu_product)].append(node)
            fits = []
            for members in groups.values():
                frees = [n.allocatable_gpus if empty else free_of(n) for n in members]
                if sum(f // g for f in frees) >= r:
                    fits.append(sum(frees) - r * g)
            if fits:
                return Fit(level, min(fits))
    return None


def snapshot_of(nodes: Iterable[Node]) -> ClusterSnapshot:
    return ClusterSnapshot(nodes)


def within_required(level: Level | None, required: Level | None) -> bool:
    return level_rank(level) <= level_rank(required)
