"""The snapshot the inventory keeps up to date as pods and nodes change is the one a rebuild would give."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.kube.inventory import Inventory
from aisched.policy.cluster import ClusterSnapshot
from aisched.settings import Settings
from tests.unit.kube.test_inventory import node, pod

NODES = [f"n{i}" for i in range(6)]


def rack_node(name: str, gpus: int, *, tainted: bool) -> dict[str, Any]:
    obj = node(name, gpus, taints=[{"key": "dedicated", "effect": "NoSchedule"}] if tainted else None)
    rack = "r1" if name < "n3" else "r2"
    obj["metadata"]["labels"] = {"topology.kubernetes.io/zone": "z", "aisched.io/rack": rack}
    return obj


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("pod"),
            st.sampled_from(["a", "b", "c", "d"]),
            st.sampled_from([*NODES, None]),
            st.integers(0, 8),
            st.sampled_from(["Running", "Pending", "Succeeded"]),
        ),
        st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c", "d"])),
        st.tuples(st.just("node"), st.sampled_from(NODES), st.sampled_from([0, 4, 8]), st.booleans()),
        st.tuples(st.just("snapshot"), st.sampled_from(NODES), st.integers(1, 8)),
    ),
    max_size=40,
)


def rebuilt(inventory: Inventory) -> ClusterSnapshot:
    return ClusterSnapshot(replace(n, used_gpus=inventory.used_gpus(name)) for name, n in inventory.nodes.items())


def same(kept: ClusterSnapshot, fresh: ClusterSnapshot) -> None:
    assert kept.node_names() == fresh.node_names()
    assert [kept.free_gpus(n) for n in kept.node_names()] == [fresh.free_gpus(n) for n in fresh.node_names()]
    for level in (*fresh.topology.grouping, None):
        for mine, theirs in zip(kept.domains(level), fresh.domains(level), strict=True):
            assert mine.id == theirs.id
            for pool in range(len(fresh.pools)):
                for gpus in range(1, fresh.max_gpus_per_node + 1):
                    assert mine.room([pool], gpus) == theirs.room([pool], gpus)


def apply(inventory: Inventory, operation: tuple[Any, ...]) -> None:
    match operation:
        case ("pod", name, on, gpus, phase):
            inventory.upsert_pod(pod(name, on, gpus, phase=phase))
        case ("delete", name):
            inventory.delete_pod("ns", name)
        case ("node", name, gpus, tainted):
            inventory.upsert_node(rack_node(name, gpus, tainted=tainted))
        case ("snapshot", name, gpus):
            taken = inventory.snapshot()
            if name in taken:
                taken.allocate({name: gpus})  # the caller's copy: the next snapshot never sees it


@settings(max_examples=200, deadline=None)
@given(operations=operations)
def test_the_kept_snapshot_equals_a_rebuild_after_any_changes(operations: list[tuple[Any, ...]]) -> None:
    inventory = Inventory(Settings(topology={"preset": "local"}))
    inventory.replace_nodes([rack_node(name, 8, tainted=False) for name in NODES])
    for operation in operations:
        apply(inventory, operation)
        same(inventory.snapshot(), rebuilt(inventory))


def test_reserved_gpus_count_in_the_copy_only() -> None:
    inventory = Inventory(Settings(topology={"preset": "local"}))
    inventory.replace_nodes([rack_node("n1", 8, tainted=False)])
    assert inventory.snapshot({"n1": 3, "gone": 2}).free_gpus("n1") == 5
    assert inventory.snapshot().free_gpus("n1") == 8
