"""Where a GPU-sharing task goes: aisched's packer, FGD, the FGD paper's baselines, KAI's and Volcano's binpack.

| policy | node (and GPU) choice | differs from its authors' code in |
|---|---|---|
| aisched | least growth of fragmentation, memory counted; every class, weighted by GPU share asked, | (ours) |
|  | over the last 2,000 arrivals; exact scores, seeded uniform ties | |
| fgd | least growth of popularity-weighted fragmentation, per GPU (Weng et al. 2023) | see below |
| fgd_all_classes | fgd with every task class, not only the 95% most popular | see below |
| best_fit | least free CPU + GPU after placing (0.5 each, over the artifact's largest node) | see below |
| dot_product | smallest dot product of free (CPU, GPU summed) and request, max-normalised | see below |
| gpu_packing | bands: used GPUs that fit > nodes with used GPUs > idle nodes | - |
| gpu_clustering | bands: only same-request tasks > mixed > idle > others | - |
| random_fit | seeded uniform node, seeded uniform GPU | - |
| kai_binpack | KAI "binpack" placement strategy: most GPU share allocated on the node first | memory fractions, MPS |
| volcano_binpack | Volcano vGPU binpack: highest mean GPU usage of the node first | HAMi memory/core limits |

Faithful to its authors' code: fgd, fgd_all_classes, best_fit, dot_product, gpu_packing and
gpu_clustering are scored as the FGD artifact (hkust-adsl/kubernetes-scheduler-simulator) scores
them, and break ties as it does, because the ties decide its figures. Its plugins return integer
scores (0-100, higher is better): FGD `int64(sigmoid((before - after) / 1000) * 100)`, BestFit
`int64((1 - score) * 100)` then min-max normalised in integers, DotProduct `int64(100 * (1 -
dot / 2))`, GpuPacking and GpuClustering integer bands. Its kube-scheduler's `selectHost` gives
equal scores to the smallest node name, and names carry a `%04d-` prefix from a random
permutation drawn once per run, so ties go to one fixed, seeded node order (`SeededNodeOrder`,
drawn from the run's seed), which packs nodes; a task on a share of one GPU takes the first GPU
index with the best score. Its run script's options are modelled too: DotProduct
`-dimext merge -norm max` (the node's GPUs summed into one dimension, both dimensions over the
largest node) and, for every plugin but FGD, `-gpusel best` (the fullest GPU that fits, lowest
index first), which is `gpus_for` here. What still differs: FGD's typical pods come from our
reading of the trace (`target_distribution`), not its own file; the seeded permutation is numpy's,
not Go's `rand`, so a seed here is not the artifact's seed and no single run is the same run;
which whole GPUs a multi-GPU task takes is our `whole_gpus`, not checked against the artifact's.

Unless said otherwise the GPU is the fullest one that fits (best fit on the GPU). KAI and Volcano
are modelled by their documented binpack rule for GPU share alone, their ties (and aisched's) to
a seeded uniform choice, as stock kube-scheduler picks among equal scores.

All: memory and CPU must fit; a multi-GPU task takes whole, fully free GPUs. Pure: no clock, no I/O.
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
# The FGD artifact's scale: kube-scheduler's top node score, and the largest node its plugins
# normalise by (MaxSpecCpu, MaxSpecGpu in its open-gpu-share const.go), in thousandths.
MAX_NODE_SCORE = 100
ARTIFACT_MAX_CPU_MILLI = 128_000
ARTIFACT_MAX_GPU_MILLI = 8_000


@dataclass(frozen=True)
class Placement:
    node: int
    gpus: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class SeededNodeOrder:
    """The FGD artifact's tie rule: among equal best scores, the node earliest in a per-run permutation.

    Its kube-scheduler keeps the smallest node name among equal scores, and its simulator names
    nodes with a `%04d-` prefix from a random permutation drawn once per run; so every tie of a
    run goes the same, seeded way, which packs the nodes that come first. `rank[node]` is that
    node's prefix.
    """

    rank: IntArray

    @classmethod
    def draw(cls, nodes: int, rng: np.random.Generator) -> SeededNodeOrder:
        """A permutation of NODES node positions drawn from RNG (the run's seeded generator)."""
        rank: IntArray = rng.permutation(nodes).astype(np.int64)
        return cls(rank)

    def best(self, nodes: IntArray, scores: IntArray) -> int:
        """Position in NODES (node ids, repeats allowed) of the highest SCORES, ties to the earliest node.

        Among the positions of that node, the first wins: a task on a share of one GPU lists its
        node's GPUs in index order, so it takes the lowest index with the best score, as the artifact.
        """
        best = np.flatnonzero(scores == scores.max())
        return int(best[int(np.argmin(self.rank[nodes[best]]))])


def artifact_fgd_score(before: FloatArray, after: FloatArray) -> IntArray:
    """FGD's node score as its artifact computes it: `int64(sigmoid((before - after) / 1000) * 100)`.

    The integer plateaus (a score moves by one only when fragmentation changes by tens of
    thousandths near zero) make many candidates tie, and the tie rule then decides.
    """
    growth = (after - before) / MILLI
    score: IntArray = (MAX_NODE_SCORE / (1.0 + np.exp(growth))).astype(np.int64)
    return score


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
    """Node by lowest SCORE(task, nodes), ties seeded uniform, then the fullest GPU that fits."""

    def __init__(
        self, cluster: GpuCluster, rng: np.random.Generator, score: Callable[[GpuCluster, Task, IntArray], FloatArray]
    ) -> None:
        super().__init__(cluster, rng)
        self.score = score

    def choose(self, task: Task, nodes: IntArray) -> Placement:
        node = self.pick(nodes, self.score(self.cluster, task, nodes))
        return Placement(node, self.gpus_for(task, node))


class ArtifactScoredPolicy(Policy):
    """Node by highest integer SCORE(task, nodes), as the FGD artifact scores it, ties to the seeded node order."""

    def __init__(
        self, cluster: GpuCluster, rng: np.random.Generator, score: Callable[[GpuCluster, Task, IntArray], IntArray]
    ) -> None:
        super().__init__(cluster, rng)
        self.score = score
        self.order = SeededNodeOrder.draw(len(cluster.nodes), rng)

    def choose(self, task: Task, nodes: IntArray) -> Placement:
        node = int(nodes[self.order.best(nodes, self.score(self.cluster, task, nodes))])
        return Placement(node, self.gpus_for(task, node))


def normalise_scores(scores: IntArray) -> IntArray:
    """The artifact's NormalizeScore: integer min-max scaling to 0-100 (all 0 when every score is equal)."""
    lowest, highest = int(scores.min()), int(scores.max())
    if highest == lowest:
        return np.zeros_like(scores)
    scaled: IntArray = (scores - lowest) * MAX_NODE_SCORE // (highest - lowest)
    return scaled


def best_fit_score(cluster: GpuCluster, task: Task, nodes: IntArray) -> IntArray:
    """The artifact's BestFit: `int64((1 - (0.5 cpu left + 0.5 GPU left, over its largest node)) * 100)`, normalised."""
    cpu_left = (cluster.cpu_free[nodes] - task.cpu_milli) / ARTIFACT_MAX_CPU_MILLI
    gpu_left = (cluster.free_total()[nodes] - task.demand_milli) / ARTIFACT_MAX_GPU_MILLI
    raw: IntArray = ((1.0 - (0.5 * cpu_left + 0.5 * gpu_left)) * MAX_NODE_SCORE).astype(np.int64)
    return normalise_scores(raw)


def dot_product_score(cluster: GpuCluster, task: Task, nodes: IntArray) -> IntArray:
    """The artifact's DotProduct on the node's free (CPU, GPU): `int64(100 * (1 - dot / 2))`, max-normalised."""
    cpu = cluster.cpu_free[nodes] / ARTIFACT_MAX_CPU_MILLI * (task.cpu_milli / ARTIFACT_MAX_CPU_MILLI)
    gpu = cluster.free_total()[nodes] / ARTIFACT_MAX_GPU_MILLI * (task.demand_milli / ARTIFACT_MAX_GPU_MILLI)
    score: IntArray = (MAX_NODE_SCORE * (1.0 - (cpu + gpu) / 2)).astype(np.int64)
    return score


def gpu_packing_score(cluster: GpuCluster, task: Task, nodes: IntArray) -> IntArray:
    """The FGD simulator's GpuPacking bands (higher is better): used GPUs > used nodes > idle nodes."""
    if task.gpus == 0:
        return np.zeros(nodes.size, dtype=np.int64)
    free = cluster.free[nodes]
    fully_free = (free == MILLI).sum(axis=1)
    idle = fully_free == cluster.gpu_count[nodes]
    if task.gpu_milli < MILLI:
        best = np.where(free >= task.gpu_milli, free, MILLI + 1).min(axis=1)
        on_used = np.maximum(100 - (best * 100 // MILLI) // 10, 50)
        uses_free = np.where(best == MILLI, np.maximum(50 - 1, 33), on_used)
    else:
        uses_free = np.full(nodes.size, max(50 - task.gpus, 33))
    score: IntArray = np.where(idle, np.maximum(33 - fully_free, fully_free), uses_free).astype(np.int64)
    return score


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
    """Tasks with the same GPU request together: the FGD simulator's four affinity bands, its integer fill."""

    def __init__(self, cluster: GpuCluster, rng: np.random.Generator) -> None:
        super().__init__(cluster, rng)
        self.order = SeededNodeOrder.draw(len(cluster.nodes), rng)
        self.labels: list[Counter[tuple[int, int]]] = [Counter() for _ in cluster.nodes]

    def placed(self, placement: Placement, task: Task) -> None:
        if task.gpus:
            self.labels[placement.node][(task.gpus, task.gpu_milli)] += 1

    def choose(self, task: Task, nodes: IntArray) -> Placement:
        if task.gpus == 0:
            score = np.zeros(nodes.size, dtype=np.int64)
        else:
            # Go's integer arithmetic, left to right: 100/4 * (max - left) / max.
            fill = (MAX_NODE_SCORE // 4) * (ARTIFACT_MAX_GPU_MILLI - self.cluster.free_total()[nodes])
            fill //= ARTIFACT_MAX_GPU_MILLI
            label = (task.gpus, task.gpu_milli)
            band = np.array(
                [
                    (75 if len(held) == 1 else 50) if held[label] else (25 if not held else 0)
                    for held in (self.labels[int(node)] for node in nodes)
                ],
                dtype=np.int64,
            )
            score = band + fill
        node = int(nodes[self.order.best(nodes, score)])
        return Placement(node, self.gpus_for(task, node))


class FragmentationPolicy(Policy):
    """Least growth of fragmentation over every (node, GPU) that fits: FGD, or aisched with its own weights.

    AS_ARTIFACT scores and breaks ties as FGD's artifact does (`artifact_fgd_score`,
    `SeededNodeOrder`), for the peer; aisched keeps the exact growth and seeded uniform ties.
    """

    def __init__(
        self,
        cluster: GpuCluster,
        rng: np.random.Generator,
        classes: Sequence[TaskClass],
        weigh: str,
        window: int,
        *,
        as_artifact: bool = False,
    ) -> None:
        super().__init__(cluster, rng)
        self.order = SeededNodeOrder.draw(len(cluster.nodes), rng) if as_artifact else None
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
            node = self.best(nodes, before[nodes], after)
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
        if self.order is not None:
            # Pairs are listed node by node, GPUs in index order: the first best GPU of the node wins.
            best = self.order.best(candidates, artifact_fgd_score(before[candidates], after))
        else:
            best = self.pick(np.arange(rows.size), after - before[candidates])
        return Placement(int(candidates[best]), (int(gpus[best]),))

    def best(self, nodes: IntArray, before: FloatArray, after: FloatArray) -> int:
        """The node of NODES whose fragmentation grows least from BEFORE to AFTER, by this policy's rule."""
        if self.order is None:
            return self.pick(nodes, after - before)
        return int(nodes[self.order.best(nodes, artifact_fgd_score(before, after))])


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
    as_artifact = {"best_fit": best_fit_score, "dot_product": dot_product_score, "gpu_packing": gpu_packing_score}
    if name in as_artifact:
        return ArtifactScoredPolicy(cluster, rng, as_artifact[name])
    binpack = {"kai_binpack": kai_binpack_score, "volcano_binpack": volcano_binpack_score}
    if name in binpack:
        return ScoredPolicy(cluster, rng, binpack[name])
    if name in ("fgd", "fgd_all_classes"):
        coverage = 0.95 if name == "fgd" else 1.0
        return FragmentationPolicy(
            cluster, rng, target_distribution(history, coverage), "popularity", window, as_artifact=True
        )
    if name == "aisched":
        return FragmentationPolicy(
            cluster, rng, target_distribution(history, 1.0, with_memory=True), "recent_demand", window
        )
    if name == "random_fit":
        return RandomFit(cluster, rng)
    if name == "gpu_clustering":
        return GpuClustering(cluster, rng)
    raise ValueError(f"no policy {name!r} (there are {', '.join(POLICY_NAMES)})")
