"""GPU-level model of a cluster whose GPUs can be shared: each GPU's free thousandths, each node's free CPU.

A task asks for whole GPUs (`gpus` of them at 1000 milli each), for a fraction of one GPU
(`gpus == 1`, `gpu_milli` below 1000), or for no GPU at all. The cluster keeps its free
resources in numpy arrays so that a policy scores every node of a 6,000-GPU cluster at once;
absent GPU slots (a 2-GPU node in an 8-wide array) hold -1 so that no task ever fits there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median

import numpy as np
import numpy.typing as npt

MILLI = 1000
ABSENT = -1

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Task:
    """What one pod asks for; `models` names the GPU models it accepts (empty: any)."""

    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_milli: int
    models: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.gpus < 0:
            raise ValueError(f"negative request: {self}")
        if not 0 <= self.gpu_milli <= MILLI:
            raise ValueError(f"gpu_milli {self.gpu_milli} outside 0..{MILLI}")
        if (self.gpus == 0) != (self.gpu_milli == 0):
            raise ValueError(f"gpus {self.gpus} and gpu_milli {self.gpu_milli}: both zero or neither")
        if self.gpus > 1 and self.gpu_milli != MILLI:
            raise ValueError("a fraction of a GPU is for one GPU only")

    @property
    def demand_milli(self) -> int:
        """Thousandths of a GPU asked for in all."""
        return self.gpus * self.gpu_milli

    @property
    def shape(self) -> tuple[int, int, int, frozenset[str]]:
        """What the fragmentation measure tells task classes apart by (memory is not part of it)."""
        return (self.cpu_milli, self.gpus, self.gpu_milli, self.models)


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class TaskClass:
    """One shape of task in a target workload, with its weight (popularity, summing to 1)."""

    cpu_milli: int
    gpus: int
    gpu_milli: int
    models: frozenset[str]
    weight: float
    # The memory a task of the class needs (median of the class); 0: memory not considered, as in FGD.
    memory_mib: int = 0


def target_distribution(
    tasks: Iterable[Task], coverage: float = 0.95, *, with_memory: bool = False
) -> tuple[TaskClass, ...]:
    """The most popular task shapes that together make up COVERAGE of TASKS, weights normalised over all.

    FGD's simulator keeps the classes covering 95% of pods (its `podPopularityThreshold`),
    CPU-only tasks included; the weights stay each class's share of all tasks. WITH_MEMORY
    gives each class the median memory of its tasks, so that the measure sees memory too.
    """
    tasks = list(tasks)
    counts = Counter(task.shape for task in tasks)
    memory: dict[tuple[int, int, int, frozenset[str]], list[int]] = {}
    for task in tasks:
        memory.setdefault(task.shape, []).append(task.memory_mib)
    total = sum(counts.values())
    classes: list[TaskClass] = []
    covered = 0
    for (cpu, gpus, milli, models), count in sorted(counts.items(), key=lambda item: (-item[1], repr(item[0]))):
        if covered >= coverage * total:
            break
        needs = int(median(memory[cpu, gpus, milli, models])) if with_memory else 0
        classes.append(TaskClass(cpu, gpus, milli, models, count / total, needs))
        covered += count
    return tuple(classes)


class GpuCluster:
    """Free resources of every node and GPU; `allocate` is the only way they change."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        if not nodes:
            raise ValueError("a cluster needs nodes")
        self.nodes = tuple(nodes)
        width = max(1, *(node.gpus for node in nodes))
        self.models = tuple(sorted({node.model for node in nodes}))
        self.model_index = np.array([self.models.index(node.model) for node in nodes], dtype=np.int64)
        self.gpu_count = np.array([node.gpus for node in nodes], dtype=np.int64)
        self.exists: BoolArray = np.arange(width)[None, :] < self.gpu_count[:, None]
        self.free: IntArray = np.where(self.exists, MILLI, ABSENT).astype(np.int64)
        self.cpu_capacity = np.array([node.cpu_milli for node in nodes], dtype=np.int64)
        self.cpu_free = self.cpu_capacity.copy()
        self.memory_free = np.array([node.memory_mib for node in nodes], dtype=np.int64)
        self.capacity_milli = int(self.gpu_count.sum()) * MILLI
        self.allocated_milli = 0
        # Bumped on every allocation, so that a policy's caches know which nodes changed.
        self.version = np.zeros(len(nodes), dtype=np.int64)

    def model_accepts(self, models: frozenset[str]) -> BoolArray:
        """Nodes whose GPU model one of MODELS names (all nodes when MODELS is empty)."""
        if not models:
            return np.ones(len(self.nodes), dtype=np.bool_)
        accepted = np.array([model in models for model in self.models], dtype=np.bool_)
        return accepted[self.model_index]

    def feasible(self, task: Task) -> BoolArray:
        """Nodes where TASK fits now: CPU, memory, GPU model, and enough GPUs with its share free."""
        mask = (self.cpu_free >= task.cpu_milli) & (self.memory_free >= task.memory_mib)
        if task.gpus:
            mask &= self.model_accepts(task.models)
            mask &= (self.free >= task.gpu_milli).sum(axis=1) >= task.gpus
        return mask

    def free_total(self) -> IntArray:
        """Free thousandths of GPU on each node."""
        total: IntArray = np.where(self.exists, self.free, 0).sum(axis=1)
        return total

    def allocate(self, node: int, gpus: Sequence[int], task: Task) -> None:
        """Give TASK its share of GPUS on NODE; ValueError (and nothing changed) if it does not fit."""
        if len(gpus) != task.gpus or len(set(gpus)) != len(gpus):
            raise ValueError(f"{task.gpus} distinct GPUs needed, got {list(gpus)}")
        if self.cpu_free[node] < task.cpu_milli or self.memory_free[node] < task.memory_mib:
            raise ValueError(f"node {node} lacks CPU or memory for {task}")
        if task.gpus and not self.model_accepts(task.models)[node]:
            raise ValueError(f"node {node}'s GPU model is not one {task} accepts")
        for gpu in gpus:
            if not 0 <= gpu < self.free.shape[1] or self.free[node, gpu] < task.gpu_milli:
                raise ValueError(f"GPU {gpu} of node {node} lacks {task.gpu_milli} milli")
        for gpu in gpus:
            self.free[node, gpu] -= task.gpu_milli
        self.cpu_free[node] -= task.cpu_milli
        self.memory_free[node] -= task.memory_mib
        self.allocated_milli += task.demand_milli
        self.version[node] += 1


def whole_gpus(free: IntArray, count: int) -> tuple[int, ...]:
    """The first COUNT fully free GPUs of one node's FREE row."""
    return tuple(int(gpu) for gpu in np.flatnonzero(free == MILLI)[:count])


def fitting_gpu(free: IntArray, milli: int, prefer: str) -> int:
    """Of one node's GPUs with MILLI free, the one with the least free (prefer 'least') or the most ('most')."""
    candidates = np.flatnonzero(free >= milli)
    order = free[candidates] if prefer == "least" else -free[candidates]
    return int(candidates[int(np.argmin(order))])
