"""The FGD artifact's tie rule and integer scores, which the peer policies follow and aisched does not."""

from __future__ import annotations

import numpy as np
import pytest

from aisched.policy.sharing.model import MILLI, GpuCluster, NodeSpec, Task
from aisched.policy.sharing.policies import (
    ArtifactScoredPolicy,
    FragmentationPolicy,
    GpuClustering,
    SeededNodeOrder,
    artifact_fgd_score,
    best_fit_score,
    make_policy,
    normalise_scores,
)


def identical_nodes(count: int, gpus: int = 4) -> list[NodeSpec]:
    return [NodeSpec(f"n{i}", 64_000, 512, gpus, "A") for i in range(count)]


def test_equal_best_scores_go_to_the_node_earliest_in_the_order() -> None:
    order = SeededNodeOrder(np.array([3, 0, 2, 1], dtype=np.int64))
    nodes = np.array([0, 2, 3], dtype=np.int64)
    # Nodes 0 and 3 tie at 7; node 3 has rank 1, node 0 rank 3.
    assert order.best(nodes, np.array([7, 5, 7], dtype=np.int64)) == 2
    # A strictly higher score wins whatever its rank.
    assert order.best(nodes, np.array([8, 5, 7], dtype=np.int64)) == 0


def test_among_one_nodes_gpus_the_first_best_wins() -> None:
    order = SeededNodeOrder(np.array([1, 0], dtype=np.int64))
    # (node, GPU) pairs listed node by node: node 1's pairs at positions 2 and 3 tie with node 0's.
    candidates = np.array([0, 0, 1, 1], dtype=np.int64)
    assert order.best(candidates, np.array([4, 4, 4, 4], dtype=np.int64)) == 2


def test_the_same_seed_draws_the_same_order_and_others_differ() -> None:
    first = SeededNodeOrder.draw(50, np.random.default_rng(42)).rank
    again = SeededNodeOrder.draw(50, np.random.default_rng(42)).rank
    other = SeededNodeOrder.draw(50, np.random.default_rng(43)).rank
    assert (first == again).all() and sorted(first) == list(range(50))
    assert not (first == other).all()


def test_fgd_score_is_the_artifacts_truncated_sigmoid() -> None:
    before = np.array([1_000.0, 1_000.0, 1_000.0, 1_000.0])
    after = np.array([1_000.0, 1_100.0, 900.0, 1_015.0])
    # int64(sigmoid(x) * 100) for x = 0, -0.1, 0.1, -0.015: 50, 47 (47.50), 52 (52.50), 49 (49.63).
    assert artifact_fgd_score(before, after).tolist() == [50, 47, 52, 49]


def test_fgd_score_has_plateaus_where_exact_growth_differs() -> None:
    # Growing by 5 or by 15 thousandths: different exact costs, one integer score.
    scores = artifact_fgd_score(np.zeros(2), np.array([5.0, 15.0]))
    assert scores[0] == scores[1] == 49


@pytest.mark.parametrize("seed", [0, 1, 2, 42])
def test_fgd_on_identical_nodes_takes_the_earliest_node_and_its_first_gpu(seed: int) -> None:
    cluster = GpuCluster(identical_nodes(5))
    history = [Task(0, 0, 1, 500)] * 4 + [Task(0, 0, 1, MILLI)] * 4
    policy = make_policy("fgd", cluster, history, seed)
    assert isinstance(policy, FragmentationPolicy) and policy.order is not None
    placement = policy.place(Task(1_000, 8, 1, 500))
    assert placement is not None
    assert placement.node == int(np.argmin(policy.order.rank)) and placement.gpus == (0,)


def test_fgd_packs_the_ordered_node_where_random_ties_would_spread() -> None:
    # Each task leaves its GPU half free for the next one of its class: no fragmentation
    # growth anywhere, so every choice is a tie, and the seeded order puts all on one node.
    cluster = GpuCluster(identical_nodes(6, gpus=1))
    history = [Task(0, 0, 1, 500)] * 8
    policy = make_policy("fgd", cluster, history, 3)
    chosen = set()
    for _ in range(2):
        task = Task(0, 0, 1, 500)
        placement = policy.place(task)
        assert placement is not None
        cluster.allocate(placement.node, placement.gpus, task)
        policy.placed(placement, task)
        chosen.add(placement.node)
    assert len(chosen) == 1


def test_aisched_keeps_exact_scores_and_uniform_ties() -> None:
    policy = make_policy("aisched", GpuCluster(identical_nodes(3)), [Task(0, 0, 1, 500)], 0)
    assert isinstance(policy, FragmentationPolicy) and policy.order is None


def test_normalise_scores_is_the_artifacts_integer_min_max() -> None:
    assert normalise_scores(np.array([3, 5, 4], dtype=np.int64)).tolist() == [0, 100, 50]
    assert normalise_scores(np.array([60, 61, 62], dtype=np.int64)).tolist() == [0, 50, 100]
    assert normalise_scores(np.array([9, 9], dtype=np.int64)).tolist() == [0, 0]


def test_best_fit_rounds_to_integers_so_near_equal_nodes_tie() -> None:
    # 64 cores and 4 GPUs free against 64.1 cores: (1 - (0.5 x 63/128 + 0.5 x 3.5/8)) x 100 =
    # 53.5 and 53.4, both 53 once truncated; so both normalise to 0 and tie.
    nodes = [NodeSpec("a", 64_000, 512, 4, "A"), NodeSpec("b", 64_100, 512, 4, "A")]
    cluster = GpuCluster(nodes)
    scores = best_fit_score(cluster, Task(1_000, 8, 1, 500), np.arange(2))
    assert scores.tolist() == [0, 0]


@pytest.mark.parametrize("name", ["best_fit", "dot_product", "gpu_packing"])
def test_scored_peers_break_ties_by_the_seeded_order(name: str) -> None:
    for seed in (0, 5, 9):
        cluster = GpuCluster(identical_nodes(4))
        policy = make_policy(name, cluster, [], seed)
        assert isinstance(policy, ArtifactScoredPolicy)
        placement = policy.place(Task(2_000, 8, 1, 300))
        assert placement is not None and placement.node == int(np.argmin(policy.order.rank))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_gpu_clustering_fill_is_integer_so_near_equal_nodes_tie_by_the_order(seed: int) -> None:
    cluster = GpuCluster(identical_nodes(3, gpus=8))
    # 3,000 thousandths used on node 0, 3,100 on node 1: 25 x 3000 // 8000 = 9 = 25 x 3100 // 8000,
    # where an exact fill would always prefer node 1. Node 2 is idle (fill 0) and loses.
    cluster.allocate(0, (0, 1, 2), Task(0, 0, 3, MILLI))
    cluster.allocate(1, (0, 1, 2), Task(0, 0, 3, MILLI))
    cluster.allocate(1, (3,), Task(0, 0, 1, 100))
    policy = make_policy("gpu_clustering", cluster, [], seed)
    assert isinstance(policy, GpuClustering)
    placement = policy.place(Task(0, 0, 1, 500))
    assert placement is not None and placement.node == min((0, 1), key=lambda node: int(policy.order.rank[node]))
