"""A queue's quota is one, whatever kind of work holds it: the GPUs its InferenceServices' replicas
hold are charged to it in every cycle, and its training jobs get only the rest."""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import HeldGpus, schedule
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import T0, keys, pending

SOLO = [QueueQuota("solo", 8, borrowing_limit=0)]


def test_replicas_a_queue_serves_take_its_quota_from_its_training_jobs() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    job = pending("ns/train", 8, queue="solo")
    assert keys(schedule(snapshot, [job], SOLO, T0))[0] == ["ns/train"]
    serving = [HeldGpus("solo", 4000), HeldGpus("solo", 2000)]
    result = schedule(snapshot, [job], SOLO, T0, held_elsewhere=serving)
    assert keys(result)[1] == ["ns/train"]
    assert result.queues["solo"].used_gpus == 6
    assert keys(schedule(snapshot, [pending("ns/small", 2, queue="solo")], SOLO, T0, held_elsewhere=serving))[0] == [
        "ns/small"
    ]


def test_what_another_queue_serves_is_not_charged_to_this_one() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    job = pending("ns/train", 8, queue="solo")
    assert keys(schedule(snapshot, [job], SOLO, T0, held_elsewhere=[HeldGpus("other", 8000)]))[0] == ["ns/train"]
