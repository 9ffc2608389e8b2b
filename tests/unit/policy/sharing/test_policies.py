"""Every sharing policy: never over-allocates, refuses a task only when no node can take it, reproducible by seed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.sharing.model import MILLI, GpuCluster, NodeSpec, Task
from aisched.policy.sharing.policies import POLICY_NAMES, make_policy

tasks_st = st.lists(
    st.one_of(
        st.builds(Task, st.integers(0, 16_000), st.integers(0, 64), st.just(1), st.integers(1, MILLI)),
        st.builds(Task, st.integers(0, 16_000), st.integers(0, 64), st.sampled_from([1, 2, 4, 8]), st.just(MILLI)),
        st.builds(Task, st.integers(0, 16_000), st.integers(0, 64), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)
nodes_st = st.lists(
    st.builds(
        NodeSpec,
        st.just("n"),
        st.integers(8_000, 64_000),
        st.integers(64, 512),
        st.sampled_from([1, 2, 4, 8]),
        st.sampled_from(["A", "B"]),
    ),
    min_size=1,
    max_size=6,
)


def run(name: str, nodes: list[NodeSpec], tasks: list[Task], seed: int) -> tuple[GpuCluster, list[object]]:
    cluster = GpuCluster(nodes)
    policy = make_policy(name, cluster, tasks, seed, window=8)
    placements: list[object] = []
    for task in tasks:
        policy.observe(task)
        placement = policy.place(task)
        placements.append(placement)
        if placement is None:
            assert not cluster.feasible(task).any(), f"{name} refused {task} that fits somewhere"
            continue
        assert cluster.feasible(task)[placement.node]
        cluster.allocate(placement.node, placement.gpus, task)  # raises if it over-allocates
        policy.placed(placement, task)
    return cluster, placements


@pytest.mark.parametrize("name", POLICY_NAMES)
@settings(max_examples=12, deadline=None)
@given(nodes=nodes_st, tasks=tasks_st, seed=st.integers(0, 2**16))
def test_a_policy_never_over_allocates_and_refuses_only_what_fits_nowhere(
    name: str, nodes: list[NodeSpec], tasks: list[Task], seed: int
) -> None:
    cluster, _ = run(name, nodes, tasks, seed)
    assert ((cluster.free >= 0) | ~cluster.exists).all() and (cluster.free <= MILLI).all()
    assert (cluster.cpu_free >= 0).all() and (cluster.memory_free >= 0).all()
    assert cluster.allocated_milli == cluster.capacity_milli - int(np.where(cluster.exists, cluster.free, 0).sum())


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_the_same_seed_gives_the_same_placements(name: str) -> None:
    nodes = [NodeSpec(f"n{i}", 32_000, 256, gpus, "A") for i, gpus in enumerate([2, 4, 8, 8])]
    tasks = [Task(1_000, 8, 1, milli) for milli in (300, 500, 700, 250, 1000)] * 4 + [Task(2_000, 8, 4, MILLI)]
    assert run(name, nodes, tasks, 7)[1] == run(name, nodes, tasks, 7)[1]


def test_allocate_refuses_more_than_a_gpu_has_and_changes_nothing() -> None:
    cluster = GpuCluster([NodeSpec("n", 8_000, 64, 1, "A")])
    cluster.allocate(0, (0,), Task(0, 0, 1, 600))
    with pytest.raises(ValueError, match="lacks 500 milli"):
        cluster.allocate(0, (0,), Task(0, 0, 1, 500))
    assert int(cluster.free[0, 0]) == 400 and cluster.allocated_milli == 600


def test_fgd_puts_a_fraction_where_it_strands_least() -> None:
    # The 600 task on the GPU with 700 free leaves 100 that neither class can use (0.5 x 100 +
    # 0.5 x 100); on the GPU with 900 free it leaves 300, which the 600-class cannot use (0.5 x 300).
    nodes = [NodeSpec("n", 64_000, 512, 2, "A")]
    history = [Task(0, 0, 1, 300)] * 5 + [Task(0, 0, 1, 600)] * 5
    cluster = GpuCluster(nodes)
    cluster.allocate(0, (0,), Task(0, 0, 1, 300))
    cluster.allocate(0, (1,), Task(0, 0, 1, 100))
    placement = make_policy("fgd", cluster, history, 0).place(Task(0, 0, 1, 600))
    assert placement is not None and placement.gpus == (0,)


def test_a_task_that_asks_for_an_impossible_mix_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="one GPU only"):
        Task(0, 0, 2, 500)
    with pytest.raises(ValueError, match="both zero or neither"):
        Task(0, 0, 0, 500)
