"""FGD's fragmentation measure: its definition's properties, and the vectorised index against the plain one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.sharing.fragmentation import FragmentationIndex, class_fragmentation, node_fragmentation
from aisched.policy.sharing.model import MILLI, GpuCluster, NodeSpec, Task, TaskClass, target_distribution

MODELS = ("A", "B")

classes_st = st.lists(
    st.one_of(
        st.builds(
            TaskClass,
            cpu_milli=st.integers(0, 16_000),
            gpus=st.just(1),
            gpu_milli=st.integers(1, MILLI),
            models=st.sampled_from([frozenset(), frozenset({"A"}), frozenset({"B"})]),
            weight=st.floats(0.01, 1.0),
            memory_mib=st.integers(0, 256),
        ),
        st.builds(
            TaskClass,
            cpu_milli=st.integers(0, 16_000),
            gpus=st.integers(0, 8),
            gpu_milli=st.just(MILLI),
            models=st.just(frozenset()),
            weight=st.floats(0.01, 1.0),
            memory_mib=st.integers(0, 256),
        ).map(lambda c: c if c.gpus else TaskClass(c.cpu_milli, 0, 0, c.models, c.weight, c.memory_mib)),
    ),
    min_size=1,
    max_size=6,
)
node_st = st.tuples(
    st.lists(st.integers(0, MILLI), min_size=1, max_size=8),
    st.integers(0, 64_000),
    st.sampled_from(MODELS),
)


@settings(max_examples=40)
@given(node_st, classes_st)
def test_fragmentation_is_never_negative_nor_more_than_what_is_free(
    node: tuple[list[int], int, str], classes: list[TaskClass]
) -> None:
    free, cpu, model = node
    for task in classes:
        assert 0 <= class_fragmentation(free, cpu, model, task) <= sum(free)


@settings(max_examples=40)
@given(st.integers(1, 8), st.sampled_from(MODELS), classes_st)
def test_an_empty_node_has_no_fragmentation_for_gpu_tasks_that_fit_it(
    gpus: int, model: str, classes: list[TaskClass]
) -> None:
    free = [MILLI] * gpus
    for task in classes:
        fits = (
            task.gpus and task.gpus <= gpus and task.cpu_milli <= 64_000 and (not task.models or model in task.models)
        )
        if fits:
            assert class_fragmentation(free, 64_000, model, task) == 0


@settings(max_examples=40)
@given(node_st, classes_st)
def test_a_task_that_cannot_run_sees_every_free_share_as_fragment(
    node: tuple[list[int], int, str], classes: list[TaskClass]
) -> None:
    free, cpu, model = node
    for task in classes:
        starved = TaskClass(cpu + 1, task.gpus, task.gpu_milli, task.models, task.weight)
        assert class_fragmentation(free, cpu, model, starved) == sum(free)


def test_a_partly_used_gpu_is_fragment_only_for_tasks_larger_than_its_free_share() -> None:
    small = TaskClass(0, 1, 300, frozenset(), 0.5)
    large = TaskClass(0, 1, 600, frozenset(), 0.5)
    free = [MILLI, 500]
    assert class_fragmentation(free, 0, "A", small) == 0
    assert class_fragmentation(free, 0, "A", large) == 500
    assert node_fragmentation(free, 0, "A", [small, large]) == 250


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 8), st.sampled_from(MODELS), st.integers(4_000, 64_000)), min_size=1, max_size=6),
    st.lists(
        st.tuples(st.integers(0, 8_000), st.integers(0, 2), st.integers(1, MILLI), st.integers(0, 128)),
        min_size=1,
        max_size=30,
    ),
    classes_st,
)
def test_the_index_agrees_with_the_definition_before_and_after_any_placement(
    specs: list[tuple[int, str, int]],
    asks: list[tuple[int, int, int, int]],
    classes: list[TaskClass],
) -> None:
    nodes = [NodeSpec(f"n{i}", cpu, 512, gpus, model) for i, (gpus, model, cpu) in enumerate(specs)]
    cluster = GpuCluster(nodes)
    index = FragmentationIndex(cluster, classes)
    for cpu, gpus, milli, memory in asks:
        task = Task(cpu, memory, gpus, 0 if gpus == 0 else (milli if gpus == 1 else MILLI))
        feasible = np.flatnonzero(cluster.feasible(task))
        if feasible.size == 0:
            continue
        node = int(feasible[0])
        free = cluster.free[node]
        chosen: tuple[int, ...]
        if task.gpus == 1 and task.gpu_milli < MILLI:
            gpu = int(np.flatnonzero(free >= task.gpu_milli)[-1])
            old, new, changed, chosen = int(free[gpu]), int(free[gpu]) - task.gpu_milli, 1, (gpu,)
        else:
            chosen = tuple(int(g) for g in np.flatnonzero(free == MILLI)[: task.gpus])
            old, new, changed = (MILLI, 0, task.gpus) if task.gpus else (0, 0, 0)
        predicted = index.after(
            np.array([node]),
            np.array([old]),
            np.array([new]),
            np.array([changed]),
            cpu_taken=task.cpu_milli,
            memory_taken=task.memory_mib,
        )
        cluster.allocate(node, chosen, task)
        row = [int(f) for f in cluster.free[node][: nodes[node].gpus]]
        left = int(cluster.memory_free[node])
        expected = node_fragmentation(row, int(cluster.cpu_free[node]), nodes[node].model, classes, left)
        assert abs(float(predicted[0]) - expected) < 1e-6
        everywhere = index.fragmentation()
        for n, spec in enumerate(nodes):
            row = [int(f) for f in cluster.free[n][: spec.gpus]]
            left = int(cluster.memory_free[n])
            plain = node_fragmentation(row, int(cluster.cpu_free[n]), spec.model, classes, left)
            assert abs(everywhere[n] - plain) < 1e-6


def test_the_target_distribution_keeps_the_most_popular_classes_up_to_its_coverage() -> None:
    tasks = (
        [Task(1, 0, 1, 500)] * 4
        + [Task(1, 10, 1, 500)] * 2
        + [Task(1, mib, 1, MILLI) for mib in (10, 20, 30)]
        + [Task(1, 0, 8, MILLI)]
    )
    assert [c.gpu_milli for c in target_distribution(tasks, 0.6)] == [500]
    everything = target_distribution(tasks, 1.0)
    assert [(c.gpus, c.weight) for c in everything] == [(1, 0.6), (1, 0.3), (8, 0.1)]
    assert all(c.memory_mib == 0 for c in everything)  # FGD's classes: memory not considered
    assert [c.memory_mib for c in target_distribution(tasks, 1.0, with_memory=True)] == [0, 20, 0]  # medians
