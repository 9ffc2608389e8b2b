"""Where a GPU-sharing task goes: aisched's packer, FGD, the FGD paper's baselines, KAI's and Volcano's binpack.

| policy | node (and GPU) choice | not modelled |
|---|---|---|
| aisched | least growth of fragmentation, memory counted; every class, weighted by GPU share asked, | reordering |
|  | over the last 2,000 arrivals | |
| fgd | least growth of popularity-weighted fragmentation, per GPU (Weng et al. 2023) | score rounding |
| fgd_all_classes | fgd with every task class, not only the 95% most popular (its simulator's default) | rounding |
| best_fit | least free CPU + GPU after placing (0.5 each, over the largest node's) | memory in score |
| dot_product | smallest dot product of free (CPU, GPU) and request, max-normalised | per-GPU vectors |
| gpu_packing | bands: used GPUs that fit > nodes with used GPUs > idle nodes (the simulator's) | - |
| gpu_clustering | bands: only same-request tasks > mixed > idle > others (the simulator's) | - |
| random_fit | seeded uniform node, seeded uniform GPU | - |
| kai_binpack | KAI "binpack" placement strategy: most GPU share allocated on the node first | memory fractions, MPS |
| volcano_binpack | Volcano vGPU binpack: highest mean GPU usage of the node first | HAMi memory/core limits |

Unless said otherwise the GPU is the fullest one that fits (best fit on the GPU). FGD's
simulator rounds each score to an integer through a sigmoid; this takes the exact minimum.
KAI and Volcano are modelled by their documented binpack rule for GPU share alone.

All: memory and CPU must fit; a multi-GPU task takes whole, fully free GPUs; ties go to a seeded
uniform choice, as kube-scheduler picks among equal scores. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from aisched.policy.sharing.fragmentation import FragmentationIndex
from aisched.policy.sharing.model import (
    MILLI,
    FloatArray,
    GpuCluster,
    IntArray,
    Task,
    TaskClass,
    fitting_gpu,
    target_distribution,
    whole_gpus,
)

POLICY_NAMES = (
    "aisched",
    "fgd",
    "fgd_all_classes",
    "best_fit",
    "dot_product",
    "gpu_packing",
    "gpu_clustering",
    "random_fit",
    "kai_binpack",
    "volcano_binpack",
)
# aisched's window over recent arrivals, in tasks: long enough to see rare multi-GPU shapes.
DEFAULT_WINDOW = 2000


@dataclass(frozen=True)
class Placement:
    node: int
    gpus: tuple[int, ...]


class Policy:
    """Chooses a node and GPUs for each task; `observe` sees every arrival, `placed` every placement."""

    def __init__(self, cluster: GpuCluster, rng: np.random.Generator) -> None:
        self.cluster = cluster
        self.rng = rng

    def observe(self, task: Task) -> None:
        """A task arrived (before `place` is asked about it)."""

    def placed(self, placement: Placement, task: Task) -> None:
        """The cluster gave TASK PLACEMENT."""

    def place(self, task: Task) -> Placement | None:
        nodes = np.flatnonzero(self.cluster.feasible(task))
        if nodes.size == 0:
            return None
        return self.choose(task, nodes)

    def choose(self, task: Task, nodes: IntArray) -> Placement:
        raise NotImplementedError

    def pick(self, candidates: IntArray, scores: FloatArray) -> int:
        """Index into CANDIDATES of a lowest score, ties broken by the seeded generator."""
        best = np.flatnonzero(scores <= scores.min() + 1e-9)
        return int(candidates[best[int(self.rng.integers(best.size))]]) if best.size > 1 else int(candidates[best[0]])

    def gpus_for(self, task: Task, node: int, prefer: str = "least") -> tuple[int, ...]:
        free = self.cluster.free[node]
        if task.gpus == 0:
            return ()
        if task.gpu_milli < MILLI:
            if prefer == "random":
                return (int(self.rng.choice(np.flatnonzero(free >= task.gpu_milli))),)
            return (fitting_gpu(free, task.gpu_milli, prefer),)
        if prefer == "random":
            chosen = self.rng.choice(np.flatnonzero(free == MILLI), size=task.gpus, replace=False)
            return tuple(int(gpu) for gpu in sorted(chosen))
        return whole_gpus(free, task.gpus)


class ScoredPolicy(Policy):
    """Node by lowest SCORE(task, nodes), then the fullest GPU that fits."""

    def __init__(
        self, cluster: GpuCluster, rng: np.random.Generator, score: Callable[[GpuCluster, Task, IntArray], FloatArray]
    ) -> None:
        super().__init__(cluster, rng)
        self.score = score

    def choose(self, task: Task, nodes: IntArray) -> Placement:
        node = self.pick(nodes, self.score(self.cluster, task, nodes))
        return Placement(node, self.gpus_for(task, node))


def _scales(cluster: GpuCluster) -> tuple[float, float]:
    return float(cluster.cpu_capacity.max()), float(cluster.gpu_count.max() * MILLI or MILLI)


def best_fit_score(cluster: GpuCluster, task: Task, nodes: IntArray) -> FloatArray:
    max_cpu, max_gpu = _scales(cluster)
    cpu_left = (cluster.cpu_free[nodes] - task.cpu_milli) / max_cpu
    gpu_left = (cluster.free_total()[nodes] - task.demand_milli) / max_gpu
    score: FloatArray = 0.5 * cpu_left + 0.5 * gpu_left
    return score


def dot_product_score(cluster: GpuCluster, task: Task, nodes: IntArray) -> FloatArray:
    max_cpu, max_gpu = _scales(cluster)
    cpu = cluster.cpu_free[nodes] / max_cpu * (task.cpu_milli / max_cpu)
    gpu = cluster.free_total()[nodes] / max_gpu * (task.demand_milli / max_gpu)
    score: FloatArray = cpu + gpu
    return score


def gpu_packing_score(cluster: GpuCluster, task: Task, nodes: IntArray) -> FloatArray:
    """The FGD simulator's bands, negated (lower is better here): used GPUs > used nodes > idle nodes."""
    if task.gpus == 0:
        return np.zeros(nodes.size)
    free = cluster.free[nodes]
    fully_free = (free == MILLI).sum(axis=1)
    idle = fully_free == cluster.gpu_count[nodes]
    if task.gpu_milli < MILLI:
        best = np.where(free >= task.gpu_milli, free, MILLI + 1).min(axis=1)
        on_used = np.maximum(100 - (best * 100 // MILLI) // 10, 50)
        uses_free = np.where(best == MILLI, np.maximum(50 - 1, 33), on_used)
    else:
        uses_free = np.full(nodes.size, max(50 - task.gpus, 33))
    score = np.where(idle, np.maximum(33 - fully_free, fully_free), uses_free)
    negated: FloatArray = -score.astype(np.float64)
    return negated


def kai_binpack_score(cluster: GpuCluster, task: Task, nodes: IntArray) -> FloatArray:
    """KAI's binpack: the node with the most GPU share allocated first."""
    allocated: FloatArray = (cluster.gpu_count[nodes] * MILLI - cluster.free_total()[nodes]).astype(np.float64)
    return -allocated


def volcano_binpack_score(cluster: GpuCluster, task: Task, nodes: IntArray) -> FloatArray:
    """Volcano's vGPU binpack: the node whose GPUs are most used on average first."""
    count = np.maximum(cluster.gpu_count[nodes], 1)
    used: FloatArray = 1.0 - cluster.free_total()[nodes] / (count * MILLI)
    return -used


class RandomFit(Policy):
    def choose(self, task: Task, nodes: IntArray) -> Placement:
        node = int(nodes[int(self.rng.integers(nodes.size))])
        return Placement(node, self.gpus_for(task, node, prefer="random"))


class GpuClustering(Policy):
    """Tasks with the same GPU request together: the FGD simulator's four affinity bands."""

    def __init__(self, cluster: GpuCluster, rng: np.random.Generator) -> None:
        super().__init__(cluster, rng)
        self.labels: list[Counter[tuple[int, int]]] = [Counter() for _ in cluster.nodes]

    def placed(self, placement: Placement, task: Task) -> None:
        if task.gpus:
            self.labels[placement.node][(task.gpus, task.gpu_milli)] += 1

    def choose(self, task: Task, nodes: IntArray) -> Placement:
        _, max_gpu = _scales(self.cluster)
        fill = 25 * (max_gpu - self.cluster.free_total()[nodes]) / max_gpu
        if task.gpus == 0:
            band = np.zeros(nodes.size)
            fill = np.zeros(nodes.size)
        else:
            label = (task.gpus, task.gpu_milli)
            band = np.array(
                [
                    (75 if len(held) == 1 else 50) if held[label] else (25 if not held else 0)
                    for held in (self.labels[int(node)] for node in nodes)
                ],
                dtype=np.float64,
            )
        node = self.pick(nodes, -(band + fill))
        return Placement(node, self.gpus_for(task, node))


class FragmentationPolicy(Policy):
    """Least growth of fragmentation over every (node, GPU) that fits: FGD, or aisched with its own weights."""

    def __init__(
        self, cluster: GpuCluster, rng: np.random.Generator, classes: Sequence[TaskClass], weigh: str, window: int
    ) -> None:
        super().__init__(cluster, rng)
        self.index = FragmentationIndex(cluster, classes)
        self.weigh = weigh
        self.recent: deque[int] = deque(maxlen=window)
        self.class_of = {(c.cpu_milli, c.gpus, c.gpu_milli, c.models): i for i, c in enumerate(classes)}
        self.demand = np.array([max(c.gpus * c.gpu_milli, 1) for c in classes], dtype=np.float64) / MILLI

    def observe(self, task: Task) -> None:
        position = self.class_of.get(task.shape)
        if position is not None:
            self.recent.append(position)

    def weights(self) -> FloatArray | None:
        if self.weigh == "popularity":
            return None
        popularity = self.index.weights
        if self.weigh == "recent_demand" and len(self.recent) == self.recent.maxlen:
            counts = np.bincount(np.fromiter(self.recent, dtype=np.int64), minlength=len(popularity))
            popularity = counts / counts.sum()
        weighted: FloatArray = popularity * self.demand
        normalised: FloatArray = weighted / weighted.sum()
        return normalised

    def choose(self, task: Task, nodes: IntArray) -> Placement:
        weights = self.weights()
        before = self.index.fragmentation(weights)
        if task.gpus == 0 or task.gpu_milli == MILLI:
            filled = np.full(nodes.size, MILLI if task.gpus else 0, dtype=np.int64)
            emptied = np.zeros(nodes.size, dtype=np.int64)
            changed = np.full(nodes.size, task.gpus, dtype=np.int64)
            after = self.index.after(
                nodes, filled, emptied, changed, cpu_taken=task.cpu_milli, memory_taken=task.memory_mib, weights=weights
            )
            node = self.pick(nodes, after - before[nodes])
            return Placement(node, self.gpus_for(task, node))
        free = self.cluster.free[nodes]
        width = free.shape[1]
        # GPUs of one node with the same free share are interchangeable: score the first of each.
        earlier = np.tril(np.ones((width, width), dtype=np.bool_), k=-1)
        repeated = ((free[:, :, None] == free[:, None, :]) & earlier[None, :, :]).any(axis=2)
        rows, gpus = np.nonzero((free >= task.gpu_milli) & ~repeated)
        old = free[rows, gpus]
        candidates = nodes[rows]
        after = self.index.after(
            candidates,
            old,
            old - task.gpu_milli,
            np.ones(rows.size, dtype=np.int64),
            cpu_taken=task.cpu_milli,
            memory_taken=task.memory_mib,
            weights=weights,
        )
        best = self.pick(np.arange(rows.size), after - before[candidates])
        return Placement(int(candidates[best]), (int(gpus[best]),))


def make_policy(
    name: str,
    cluster: GpuCluster,
    history: Sequence[Task],
    seed: int,
    window: int = DEFAULT_WINDOW,
) -> Policy:
    """The policy called NAME (one of POLICY_NAMES) on CLUSTER, its ties and draws seeded by SEED.

    HISTORY is the workload the fragmentation policies learn their task classes from: FGD the
    classes covering 95% of it (as its simulator), aisched all of them, so that rare
    multi-GPU shapes, which cost the most GPUs when refused, are not left out, each with its
    median memory, so that a node short of memory counts as one the class cannot use.
    """
    rng = np.random.default_rng(seed)
    scored = {
        "best_fit": best_fit_score,
        "dot_product": dot_product_score,
        "gpu_packing": gpu_packing_score,
        "kai_binpack": kai_binpack_score,
        "volcano_binpack": volcano_binpack_score,
    }
    if name in scored:
        return ScoredPolicy(cluster, rng, scored[name])
    if name == "fgd":
        return FragmentationPolicy(cluster, rng, target_distribution(history, 0.95), "popularity", window)
    if name == "fgd_all_classes":
        return FragmentationPolicy(cluster, rng, target_distribution(history, 1.0), "popularity", window)
    if name == "aisched":
        return FragmentationPolicy(
            cluster, rng, target_distribution(history, 1.0, with_memory=True), "recent_demand", window
        )
    if name == "random_fit":
        return RandomFit(cluster, rng)
    if name == "gpu_clustering":
        return GpuClustering(cluster, rng)
    raise ValueError(f"no policy {name!r} (there are {', '.join(POLICY_NAMES)})")
