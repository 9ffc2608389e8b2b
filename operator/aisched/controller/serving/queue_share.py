"""An InferenceService's share of its queue: one quota per queue, whatever kind of work holds it.

The scheduling cycle charges a queue what its services' replicas hold (`held`, read once a cycle)
beside its training gangs, and leaves each queue its room (`room`, from the cycle's ledger). A
service starts no replica that room, less what replicas started since the cycle counted them,
cannot pay for; the replicas that run stay. So one tenant's InferenceService cannot take GPUs its
queue does not have, and a queue's training jobs get only what its serving left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aisched.api.inference_service import InferenceService
from aisched.kube.serving_builders import ServingPod
from aisched.policy.cluster import Node
from aisched.policy.queueing import gpus_text
from aisched.policy.scheduler import HeldGpus
from aisched.policy.sharing.charge import replica_milli


def no_limit(_queue: str) -> int | None:
    return None


@dataclass
class QueueShare:
    room: Callable[[str], int | None] = no_limit
    """GPU-equivalents (thousandths) a queue may still take, as the last scheduling cycle left it; None: no limit."""
    _started_since_cycle: dict[str, int] = field(default_factory=dict)

    def most_replicas(self, queue: str, milli_each: int, live: int, desired: int) -> int:
        """DESIRED, or fewer: the LIVE replicas plus as many more, of MILLI_EACH GPU-equivalents (thousandths)
        each, as QUEUE's room pays for."""
        room = self.room(queue)
        if room is None or milli_each <= 0:
            return desired
        left = max(room - self._started_since_cycle.get(queue, 0), 0)
        return min(desired, live + left // milli_each)

    def replicas_within_room(self, service: InferenceService, live: int, desired: int) -> tuple[int, str | None]:
        """DESIRED replicas of SERVICE, or fewer where its queue has no room for more; when fewer, why."""
        queue, each = service.spec.queue, service_replica_milli(service)
        most = self.most_replicas(queue, each, live, desired)
        if most >= desired:
            return most, None
        return most, f"queue {queue} has room for {most} replicas of {gpus_text(each)} GPUs, not the {desired} wanted"

    def replicas_started(self, service: InferenceService, count: int) -> None:
        """COUNT replicas of SERVICE were started, charged to its queue's room until the next cycle."""
        self.started(service.spec.queue, count * service_replica_milli(service))

    def started(self, queue: str, milli: int) -> None:
        """Replicas of QUEUE holding MILLI GPU-equivalents were started: its room is that much smaller until the
        next cycle."""
        self._started_since_cycle[queue] = self._started_since_cycle.get(queue, 0) + milli

    def held(self, pods_by_queue: Iterable[tuple[str, ServingPod]], nodes: dict[str, Node]) -> list[HeldGpus]:
        """What the replica PODS hold, by queue and their nodes' GPU type, for the cycle to charge;
        what was started is counted there from now on."""
        self._started_since_cycle.clear()
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


def service_replica_milli(service: InferenceService) -> int:
    """What one replica is charged before its GPU is known: a memory share counts whole until it holds a part
    (then the cycle charges what its pod holds)."""
    return replica_milli(service.spec.gpu_share, service.spec.gpus_per_replica)
