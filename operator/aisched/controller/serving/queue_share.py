"""An InferenceService's share of its queue: one quota per queue, whatever kind of work holds it.

The scheduling cycle charges a queue what its services' replicas hold (`replicas_held`, read once
a cycle) beside its training gangs, and decides new replicas within what is left, in the same
ledger as its gangs (`policy.decision`). So one tenant's InferenceService cannot take GPUs its
queue does not have, and a queue's training jobs get only what its serving left. A running
replica bound to its node (whole GPUs, an allocated part of a GPU, or a MIG instance) is handed to
the cycle on its own (`HeldReplica`): what its queue borrows, a lending queue may take back
(`policy.scheduler.preemption`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from aisched.kube.serving_builders import ServingPod
from aisched.policy.cluster import Node
from aisched.policy.scheduler import HeldGpus, HeldReplica


class ReplicaOwner(NamedTuple):
    """What a replica's service says of it: its queue, its priority, and its pods already reclaimed."""

    queue: str
    priority: int = 0
    reclaiming: frozenset[str] = frozenset()


def replicas_held(pods_by_owner: Iterable[tuple[ReplicaOwner, ServingPod]], nodes: dict[str, Node]) -> list[HeldGpus]:
    """What the replica PODS hold, by queue and their nodes' GPU type, for the cycle to charge; each
    serving replica bound to a node with whole GPUs on its own, which a lending queue may reclaim."""
    # In GPU-equivalents (thousandths), summed per queue and GPU type: three replicas with 30% of a
    # GPU each are charged 900, what they hold, and a part of one never goes uncharged.
    milli: dict[tuple[str, str | None], int] = {}
    each: list[HeldGpus] = []
    for owner, pod in pods_by_owner:
        node = pod.node or pod.pinned_node
        if pod.finished or not pod.held_milli or node is None:
            continue
        record = nodes.get(node)
        product = record.gpu_product if record is not None else None
        # Only a replica kube-scheduler bound, and not on its way out, whose going frees what is known: its
        # whole GPUs, its allocated part of one GPU, or its one MIG instance.
        whole = pod.gpus > 0 and (pod.gpu_milli is None or pod.gpu_milli == pod.gpus * 1000)
        shared = pod.part is not None or pod.mig_profile is not None
        if pod.node is not None and (whole or shared) and pod.serving_candidate and pod.name not in owner.reclaiming:
            replica = HeldReplica(
                f"{pod.namespace}/{pod.service}",
                pod.name,
                pod.node,
                pod.gpus if whole and not shared else 0,
                owner.priority,
                part=pod.part,
                mig_profile=pod.mig_profile,
            )
            each.append(HeldGpus(owner.queue, pod.held_milli, product, replica))
            continue
        key = (owner.queue, product)
        milli[key] = milli.get(key, 0) + pod.held_milli
    return [*(HeldGpus(queue, total, product) for (queue, product), total in milli.items()), *each]
