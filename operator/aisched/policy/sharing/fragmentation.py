"""FGD's fragmentation measure (Weng et al., ATC 2023), per node, for a target workload of task classes.

For one task class m and one node n, F_n(m) is the free GPU share of n that m cannot use:
- m asks for no GPU, or cannot run on n at all (CPU short, GPU model not accepted, fewer
  GPUs with m's share free than m asks for): every free thousandth of n's GPUs;
- m can run on n: the free share of each GPU whose free share is below m's per-GPU request.
The node's fragmentation is the sum over classes of popularity x F_n(m). FGD places a task where
this grows least. `node_fragmentation` is that definition for one node, plainly; the
`FragmentationIndex` keeps per-node, per-class sums so that a policy scores every candidate
(node, GPU) of a large cluster in one vectorised step, and the tests hold the two to agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aisched.policy.sharing.model import BoolArray, FloatArray, GpuCluster, IntArray, TaskClass


def class_fragmentation(
    free_gpus: Sequence[int], cpu_free: int, model: str, task: TaskClass, memory_free: int = 1 << 62
) -> int:
    """F_n(m): the free thousandths of a node's GPUs (FREE_GPUS, one entry per GPU) that TASK cannot use."""
    total = sum(max(free, 0) for free in free_gpus)
    if task.gpus == 0 or cpu_free < task.cpu_milli or memory_free < task.memory_mib:
        return total
    if task.models and model not in task.models:
        return total
    if sum(1 for free in free_gpus if free >= task.gpu_milli) < task.gpus:
        return total
    return sum(free for free in free_gpus if 0 < free < task.gpu_milli)


def node_fragmentation(
    free_gpus: Sequence[int], cpu_free: int, model: str, classes: Sequence[TaskClass], memory_free: int = 1 << 62
) -> float:
    """The node's fragmentation for the target workload CLASSES: popularity-weighted F_n(m)."""
    return sum(task.weight * class_fragmentation(free_gpus, cpu_free, model, task, memory_free) for task in classes)


class FragmentationIndex:
    """Per node and class: GPUs with the class's share free, and free share on the GPUs below it.

    Built once for a cluster and a set of classes; `refresh` re-reads the nodes whose version
    changed. Weights are not part of the index: several policies can weigh the same classes
    differently (FGD by popularity, aisched by demand).
    """

    def __init__(self, cluster: GpuCluster, classes: Sequence[TaskClass]) -> None:
        self.cluster = cluster
        self.classes = tuple(classes)
        self.cpu = np.array([task.cpu_milli for task in classes], dtype=np.int64)
        self.memory = np.array([task.memory_mib for task in classes], dtype=np.int64)
        self.gpus = np.array([task.gpus for task in classes], dtype=np.int64)
        self.milli = np.array([task.gpu_milli for task in classes], dtype=np.int64)
        self.weights = np.array([task.weight for task in classes], dtype=np.float64)
        # Class x node: the GPU model is one the class accepts (GPU-free classes never fit: see above).
        accepts = np.array([cluster.model_accepts(task.models) for task in classes], dtype=np.bool_)
        self.accepts: BoolArray = (accepts & (self.gpus > 0)[:, None]).T.copy()
        nodes = len(cluster.nodes)
        self.count_ge: IntArray = np.zeros((nodes, len(classes)), dtype=np.int64)
        self.sum_below: IntArray = np.zeros((nodes, len(classes)), dtype=np.int64)
        self.total: IntArray = np.zeros(nodes, dtype=np.int64)
        self.seen = np.full(nodes, -1, dtype=np.int64)
        self.refresh()

    def refresh(self) -> None:
        """Recompute the rows of nodes that changed since the last call."""
        stale = np.flatnonzero(self.seen != self.cluster.version)
        if stale.size == 0:
            return
        free = self.cluster.free[stale][:, :, None]
        self.count_ge[stale] = (free >= self.milli[None, None, :]).sum(axis=1)
        below = (free > 0) & (free < self.milli[None, None, :])
        self.sum_below[stale] = np.where(below, free, 0).sum(axis=1)
        self.total[stale] = self.cluster.free_total()[stale]
        self.seen[stale] = self.cluster.version[stale]

    def fragmentation(self, weights: FloatArray | None = None) -> FloatArray:
        """Every node's fragmentation now, for WEIGHTS over the classes (default: the classes' own)."""
        self.refresh()
        return self._weighted(
            self.count_ge,
            self.sum_below,
            self.total,
            self.cluster.cpu_free,
            self.cluster.memory_free,
            nodes=np.arange(len(self.total)),
            weights=weights,
        )

    def after(
        self,
        nodes: IntArray,
        old_free: IntArray,
        new_free: IntArray,
        changed: IntArray,
        *,
        cpu_taken: int,
        memory_taken: int = 0,
        weights: FloatArray | None = None,
    ) -> FloatArray:
        """Fragmentation of each of NODES if CHANGED of its GPUs went from OLD_FREE to NEW_FREE each.

        One candidate per row: a fraction changes one GPU (changed = 1), a whole-GPU task
        empties `gpus` fully free GPUs (old 1000, new 0, changed = gpus), a GPU-free task
        changes none. CPU_TAKEN comes off the node's free CPU.
        """
        self.refresh()
        milli = self.milli[None, :]
        old, new, times = old_free[:, None], new_free[:, None], changed[:, None]
        count_ge = self.count_ge[nodes] + times * ((new >= milli).astype(np.int64) - (old >= milli))
        below_new = np.where((new > 0) & (new < milli), new, 0)
        below_old = np.where((old > 0) & (old < milli), old, 0)
        sum_below = self.sum_below[nodes] + times * (below_new - below_old)
        total = self.total[nodes] - changed * (old_free - new_free)
        cpu = self.cluster.cpu_free[nodes] - cpu_taken
        memory = self.cluster.memory_free[nodes] - memory_taken
        return self._weighted(count_ge, sum_below, total, cpu, memory, nodes=nodes, weights=weights)

    def _weighted(
        self,
        count_ge: IntArray,
        sum_below: IntArray,
        total: IntArray,
        cpu: IntArray,
        memory: IntArray,
        *,
        nodes: IntArray,
        weights: FloatArray | None,
    ) -> FloatArray:
        fits = self.accepts[nodes] & (cpu[:, None] >= self.cpu[None, :]) & (count_ge >= self.gpus[None, :])
        fits &= memory[:, None] >= self.memory[None, :]
        per_class = np.where(fits, sum_below, total[:, None]).astype(np.float64)
        result: FloatArray = per_class @ (self.weights if weights is None else weights)
        return result

    def stranded_milli(self) -> int:
        """Free share on partly used GPUs that no GPU class could take on its node now."""
        self.refresh()
        cluster = self.cluster
        partial = (cluster.free > 0) & (cluster.free < 1000)
        nodes, gpus = np.nonzero(partial)
        if nodes.size == 0:
            return 0
        free = cluster.free[nodes, gpus]
        usable = (
            self.accepts[nodes]
            & (self.gpus[None, :] == 1)
            & (cluster.cpu_free[nodes][:, None] >= self.cpu[None, :])
            & (cluster.memory_free[nodes][:, None] >= self.memory[None, :])
            & (free[:, None] >= self.milli[None, :])
        ).any(axis=1)
        return int(free[~usable].sum())
