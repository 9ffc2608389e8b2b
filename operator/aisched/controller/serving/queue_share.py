"""An InferenceService's share of its queue: one quota per queue, whatever kind of work holds it.

The scheduling cycle charges a queue what its services' replicas hold (`replicas_held`, read once
a cycle) beside its training gangs, and decides new replicas within what is left, in the same
ledger as its gangs (`policy.decision`). So one tenant's InferenceService cannot take GPUs its
queue does not have, and a queue's training jobs get only what its serving left.
"""

from __future__ import annotations

from collections.abc import Iterable

from aisched.kube.serving_builders import ServingPod
from aisched.policy.cluster import Node
from aisched.policy.scheduler import HeldGpus


def replicas_held(pods_by_queue: Iterable[tuple[str, ServingPod]], nodes: dict[str, Node]) -> list[HeldGpus]:
    """What the replica PODS hold, by queue and their nodes' GPU type, for the cycle to charge."""
    # In GPU-equivalents (thousandths), summed per queue and GPU type: three replicas with 30% of a
    # GPU each are charged 900, what they hold, and a part of one never goes uncharged.
    milli: dict[tuple[str, str | None], int] = {}
    for queue, pod in pods_by_queue:
        node = pod.node or pod.pinned_node
        if pod.finished or not pod.held_milli or node is None:
            continue
        record = nodes.get(node)
        key = (queue, record.gpu_product if record is not None else None)
        milli[key] = milli.get(key, 0) + pod.held_milli
    return [HeldGpus(queue, total, product) for (queue, product), total in milli.items()]
