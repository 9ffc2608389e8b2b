"""Which node each pod of an admitted workload goes to. Pure.

The cycle places a workload's GPU pods as a count of pods on nodes (`AdmittedRecord.nodes`, one
entry per pod); the pods themselves are made afterwards by the kind's own controller (the Job
controller, training-operator, KubeRay), each gated until the operator sets its node and lifts its
gate. A pod that already has a node (placed earlier: this operator before a restart, or a pod that
restarted on its node) keeps it while the record has room for it there; the others take the nodes
left over, an Indexed Job's pods in index order, the rest by name, so that every operator replica
that reads the same pods comes to the same answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PodSlot:
    """One live pod of a workload's GPU pod sets, as the assignment reads it."""

    name: str
    node: str | None
    """The node it is pinned or bound to (None: gated and not placed yet)."""
    index: int | None = None
    """Its index within its set (an Indexed Job's completion index, a replica index), when it has one."""
    pod_set: str = "main"


def assign_nodes(nodes: Sequence[str], pods: Sequence[PodSlot], set_order: Sequence[str] = ()) -> dict[str, str]:
    """The node of every pod in PODS that has none yet, from NODES (one entry per pod the workload was
    admitted with) less those its placed pods take. Pods beyond the record's count get none: they wait
    (a controller that made more pods than it was admitted with, or a replacement while its predecessor
    still terminates). SET_ORDER: the pod sets in the workload's order (pods of earlier sets first)."""
    free = Counter(nodes)
    for pod in pods:
        if pod.node is not None and free[pod.node] > 0:
            free[pod.node] -= 1
    order = {name: i for i, name in enumerate(set_order)}
    unplaced = sorted(
        (pod for pod in pods if pod.node is None),
        key=lambda p: (order.get(p.pod_set, len(order)), p.index if p.index is not None else 1 << 62, p.name),
    )
    left: list[str] = []  # the record's entries no placed pod takes, in the record's order
    for node in nodes:
        if free[node] > 0:
            free[node] -= 1
            left.append(node)
    return {pod.name: node for pod, node in zip(unplaced, left, strict=False)}


def shrunk_record(nodes: Sequence[str], placed: Sequence[tuple[str, str]], wanted: int) -> tuple[str, ...] | None:
    """The record a gang scaled down in place keeps: NODES less the places it no longer wants, or None when it
    wants them all. PLACED: (pod name, node) of its live pods that have a node (bound, or pinned on the way);
    WANTED: the GPU pods its spec asks now.

    Every place a placed pod takes stays (the pod holds it until it goes, and its charge with it), then the
    free places in the record's order up to WANTED, and at least one: a record of none would read as a gang
    that asks no GPU. What goes is released to the queue and the cluster; scaling back up later is growth,
    placed within quota as any growth is."""
    free = Counter(nodes)
    taken: Counter[str] = Counter()
    for _, node in sorted(placed):
        if free[node] > 0:
            free[node] -= 1
            taken[node] += 1
    keep = max(wanted, taken.total(), 1)
    if keep >= len(nodes):
        return None
    spare = keep - taken.total()
    kept: list[str] = []
    for node in nodes:
        if taken[node] > 0:
            taken[node] -= 1
            kept.append(node)
        elif spare > 0:
            spare -= 1
            kept.append(node)
    return tuple(kept)
