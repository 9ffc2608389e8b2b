"""Copies of a cluster snapshot are independent: the inventory's base and each cycle's copy change apart.

A copy shares its buckets with the original until either side changes one (`Bucket.shared`); whatever
order the two change in, each must read as a snapshot built afresh from its own allocations.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.cluster import ClusterSnapshot, Node
from aisched.policy.nodes import NodeLabelKeys, node_from_labels
from aisched.policy.topology import LOCAL_RACK_LABEL, LOCAL_TOPOLOGY, ZONE_LABEL

NODES = 12
KEYS = NodeLabelKeys(LOCAL_TOPOLOGY, "nvidia.com/gpu.product", {}, frozenset())


def nodes(used: list[int]) -> list[Node]:
    return [
        node_from_labels(
            f"n{i:02}",
            labels={ZONE_LABEL: f"z{i % 2}", LOCAL_RACK_LABEL: f"r{i % 4}", "nvidia.com/gpu.product": "H100"},
            taints=(),
            allocatable_gpus=8,
            used_gpus=used[i],
            schedulable=True,
            keys=KEYS,
        )
        for i in range(NODES)
    ]


def index_of(snapshot: ClusterSnapshot) -> dict[object, object]:
    """Everything placement reads of a snapshot: each domain's room and its nodes by free GPUs."""
    read: dict[object, object] = {"free": tuple(snapshot.free_gpus(n) for n in snapshot.node_names())}
    for level in (*snapshot.topology.grouping, None):
        for domain in snapshot.domains(level):
            for pool, bucket in domain.buckets.items():
                read[(domain.id, pool)] = (tuple(bucket.room), tuple(tuple(sorted(s)) for s in bucket.by_free))
    return read


changes = st.lists(st.tuples(st.booleans(), st.integers(0, NODES - 1), st.integers(1, 4), st.booleans()), max_size=40)


@settings(max_examples=60, deadline=None)
@given(changes=changes, copy_at=st.integers(0, 40))
def test_a_copy_and_its_original_change_apart_and_each_reads_as_built_afresh(
    changes: list[tuple[bool, int, int, bool]], copy_at: int
) -> None:
    used = {True: [0] * NODES, False: [0] * NODES}  # True: the original's; False: the copy's
    original = ClusterSnapshot(nodes(used[True]), LOCAL_TOPOLOGY)
    copy: ClusterSnapshot | None = None
    for step, (on_original, ordinal, gpus, release) in enumerate(changes):
        if step == copy_at:
            copy, used[False] = original.copy(), list(used[True])
        target, own = (original, used[True]) if on_original or copy is None else (copy, used[False])
        name = f"n{ordinal:02}"
        delta = -min(gpus, own[ordinal]) if release else min(gpus, 8 - own[ordinal])
        if delta:
            (target.allocate if delta > 0 else target.release)({name: abs(delta)})
            own[ordinal] += delta
    assert index_of(original) == index_of(ClusterSnapshot(nodes(used[True]), LOCAL_TOPOLOGY))
    if copy is not None:
        assert index_of(copy) == index_of(ClusterSnapshot(nodes(used[False]), LOCAL_TOPOLOGY))
    # A trial on a copy leaves both as they were.
    if copy is not None:
        before = index_of(copy), index_of(original)
        with copy.trial():
            copy.allocate({"n00": 8 - used[False][0]} if used[False][0] < 8 else {})
        assert (index_of(copy), index_of(original)) == before
