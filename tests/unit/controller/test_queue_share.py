"""An InferenceService's share of its queue: what its replicas hold is charged to it in every cycle."""

from __future__ import annotations

from aisched.api.common import CapacityType
from aisched.controller.serving.queue_share import replicas_held
from aisched.kube.serving_builders import ServingPod
from aisched.policy.scheduler import HeldGpus


def replica(name: str, node: str | None, gpus: int = 2, phase: str = "Running") -> ServingPod:
    return ServingPod("ns", name, "chat", "h", CapacityType.ON_DEMAND, node, node, phase, True, False, gpus)


def test_the_cycle_charges_what_live_replicas_hold_bound_or_pinned() -> None:
    pods = [("q", replica("a", "n1")), ("q", replica("b", None)), ("q", replica("c", "n1", phase="Failed"))]
    assert replicas_held(pods, {}) == [HeldGpus("q", 2000, None)]


def test_parts_of_gpus_are_charged_in_gpu_equivalents_per_queue_and_type() -> None:
    def shared(name: str, milli: int) -> ServingPod:
        return ServingPod(
            "ns", name, "chat", "h", CapacityType.ON_DEMAND, "n1", "n1", "Running", True, False, 0, gpu_milli=milli
        )

    pods = [("q", shared("a", 300)), ("q", shared("b", 300)), ("q", shared("c", 300)), ("r", shared("d", 1))]
    pods.append(("q", replica("whole", "n1", gpus=1)))
    held = sorted(replicas_held(pods, {}), key=lambda h: h.queue)
    assert held == [HeldGpus("q", 1900, None), HeldGpus("r", 1, None)]  # what they hold, to the thousandth
