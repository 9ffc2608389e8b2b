"""Arrival-driven GPU-sharing simulation, the FGD paper's main experiment: tasks arrive, nothing leaves.

Tasks arrive one by one; each is placed by the policy or refused (it does not wait: the
experiment measures how much of the cluster a packer can fill, not queueing). The workload is
the trace in a seeded random order, then seeded draws from it (with replacement) until the
GPU share asked for reaches `max_load` of the cluster's capacity, as the paper inflates it.
At each step of arrived load (GPU share asked for so far / capacity) the run records the share
of GPU capacity allocated and the stranded share: free share of partly used GPUs that no task
class of the workload could take where it is.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aisched.policy.sharing.fragmentation import FragmentationIndex
from aisched.policy.sharing.model import GpuCluster, NodeSpec, Task, target_distribution
from aisched.policy.sharing.policies import make_policy


@dataclass(frozen=True)
class SharingRun:
    policy: str
    seed: int
    # (arrived load, allocated share of GPU capacity, stranded share of GPU capacity), one per step.
    curve: tuple[tuple[float, float, float], ...]
    unallocated_at_full_load: float
    stranded_at_full_load: float
    refused_tasks: int
    arrived_tasks: int


def read_nodes(path: Path) -> list[NodeSpec]:
    """Nodes of an Alibaba `openb_node_list` CSV (sn, cpu_milli, memory_mib, gpu, model)."""
    with path.open(newline="") as handle:
        return [
            NodeSpec(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"]), row["model"])
            for row in csv.DictReader(handle)
        ]


def read_tasks(path: Path) -> list[Task]:
    """Tasks of an Alibaba `openb_pod_list` CSV; `gpu_spec` (if any) lists accepted models, '|'-separated."""
    tasks = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            gpus = int(row["num_gpu"])
            milli = int(row["gpu_milli"]) if gpus else 0
            models = frozenset(model for model in (row.get("gpu_spec") or "").split("|") if model)
            tasks.append(Task(int(row["cpu_milli"]), int(row["memory_mib"]), gpus, milli, models))
    return tasks


def arrivals(tasks: Sequence[Task], capacity_milli: int, max_load: float, seed: int) -> list[Task]:
    """TASKS in a seeded order, then seeded draws from them until their GPU ask reaches MAX_LOAD x capacity."""
    if not any(task.demand_milli for task in tasks):
        raise ValueError("no task asks for a GPU")
    rng = np.random.default_rng(seed)
    order = [tasks[int(i)] for i in rng.permutation(len(tasks))]
    asked = sum(task.demand_milli for task in order)
    while asked < max_load * capacity_milli:
        task = tasks[int(rng.integers(len(tasks)))]
        order.append(task)
        asked += task.demand_milli
    return order


def simulate(
    nodes: Sequence[NodeSpec],
    tasks: Sequence[Task],
    policy: str,
    seed: int,
    *,
    max_load: float = 1.3,
    step: float = 0.02,
) -> SharingRun:
    """Run POLICY on the arrivals drawn from TASKS with SEED (the same for every policy given the same seed)."""
    cluster = GpuCluster(nodes)
    order = arrivals(tasks, cluster.capacity_milli, max_load, seed)
    packer = make_policy(policy, cluster, tasks, seed)
    # Stranded share is judged against the whole workload's GPU classes, the same for every policy.
    stranding = FragmentationIndex(cluster, [c for c in target_distribution(tasks, 1.0, with_memory=True) if c.gpus])
    capacity = cluster.capacity_milli
    curve: list[tuple[float, float, float]] = []
    marks = [round(i * step, 6) for i in range(int(max_load / step + 1e-9) + 1)]
    asked = refused = 0
    unallocated_full = stranded_full = -1.0

    def record_until(load: float) -> None:
        # Every mark below LOAD sees the cluster as it is now: after all tasks whose arrival kept
        # the load at or under that mark, so that the share allocated never exceeds the mark.
        nonlocal unallocated_full, stranded_full
        while len(curve) < len(marks) and marks[len(curve)] < load - 1e-12:
            stranded = stranding.stranded_milli() / capacity
            curve.append((marks[len(curve)], cluster.allocated_milli / capacity, stranded))
        if unallocated_full < 0 and load > 1.0 + 1e-12:
            unallocated_full = 1.0 - cluster.allocated_milli / capacity
            stranded_full = stranding.stranded_milli() / capacity

    for task in order:
        record_until((asked + task.demand_milli) / capacity)
        packer.observe(task)
        placement = packer.place(task)
        if placement is None:
            refused += 1
        else:
            cluster.allocate(placement.node, placement.gpus, task)
            packer.placed(placement, task)
        asked += task.demand_milli
    record_until(float("inf"))
    return SharingRun(policy, seed, tuple(curve), unallocated_full, stranded_full, refused, len(order))
