"""An InferenceService's share of its queue: replicas start within the room the cycle left."""

from __future__ import annotations

from aisched.api.common import CapacityType
from aisched.api.inference_service import InferenceService
from aisched.controller.serving.queue_share import QueueShare
from aisched.kube.serving_builders import ServingPod
from aisched.policy.scheduler import HeldGpus
from tests.builders import an_inference_service


def replica(name: str, node: str | None, gpus: int = 2, phase: str = "Running") -> ServingPod:
    return ServingPod("ns", name, "chat", "h", CapacityType.ON_DEMAND, node, node, phase, True, False, gpus)


def test_a_queue_without_a_known_room_is_not_held_back() -> None:
    assert QueueShare().most_replicas("q", 2, live=1, desired=9) == 9


def test_replicas_start_within_the_room_less_what_started_since_the_cycle() -> None:
    share = QueueShare(room={"q": 5}.get)
    assert share.most_replicas("q", 2, live=1, desired=9) == 3  # 1 running, room for 2 more of 2 GPUs
    share.started("q", 4)
    assert share.most_replicas("q", 2, live=3, desired=9) == 3  # the cycle has not counted them yet
    assert share.most_replicas("q", 2, live=3, desired=2) == 2  # scaling down is never held back
    assert share.most_replicas("other", 2, live=0, desired=4) == 4


def test_the_cycle_counts_what_replicas_hold_and_what_started_is_counted_there_from_then_on() -> None:
    share = QueueShare(room={"q": 4}.get)
    share.started("q", 4)
    pods = [("q", replica("a", "n1")), ("q", replica("b", None)), ("q", replica("c", "n1", phase="Failed"))]
    assert share.held(pods, {}) == [HeldGpus("q", 2000, None)]
    assert share.most_replicas("q", 2, live=1, desired=9) == 3


def test_parts_of_gpus_are_charged_in_gpu_equivalents_per_queue_and_type() -> None:
    def shared(name: str, milli: int) -> ServingPod:
        return ServingPod(
            "ns", name, "chat", "h", CapacityType.ON_DEMAND, "n1", "n1", "Running", True, False, 0, gpu_milli=milli
        )

    pods = [("q", shared("a", 300)), ("q", shared("b", 300)), ("q", shared("c", 300)), ("r", shared("d", 1))]
    pods.append(("q", replica("whole", "n1", gpus=1)))
    held = sorted(QueueShare().held(pods, {}), key=lambda h: h.queue)
    assert held == [HeldGpus("q", 1900, None), HeldGpus("r", 1, None)]  # what they hold, to the thousandth


def test_a_service_gets_the_replicas_its_queues_room_pays_for_and_is_told_why_not_more() -> None:
    obj = an_inference_service("chat").set("queue", "q").set("gpusPerReplica", 2).obj()
    service = InferenceService.model_validate(obj)
    share = QueueShare(room={"q": 5000}.get)
    most, short = share.replicas_within_room(service, live=1, desired=9)
    assert most == 3  # 1 running, room for 2 more of 2 GPUs
    assert short == "queue q has room for 3 replicas of 2 GPUs, not the 9 wanted"
    share.replicas_started(service, 2)
    assert share.replicas_within_room(service, live=3, desired=9) == (3, short)
    assert share.replicas_within_room(service, live=3, desired=2) == (2, None)  # scaling down: nothing to say
