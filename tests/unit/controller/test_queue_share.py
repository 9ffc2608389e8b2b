"""An InferenceService's share of its queue: what its replicas hold is charged to it in every cycle,
and each bound replica whose going frees what is known is handed on its own, for a lending queue to reclaim."""

from __future__ import annotations

from dataclasses import replace

from aisched.api.common import CapacityType
from aisched.controller.serving.queue_share import ReplicaOwner, replicas_held
from aisched.kube.serving_builders import ServingPod
from aisched.policy.scheduler import HeldGpus, HeldReplica
from aisched.policy.shared_room import SharePart

Q = ReplicaOwner("q", priority=3)


def replica(name: str, node: str | None, gpus: int = 2, phase: str = "Running", bound: bool = True) -> ServingPod:
    return ServingPod(
        "ns", name, "chat", "h", CapacityType.ON_DEMAND, node, node if bound else None, phase, True, False, gpus
    )


def test_the_cycle_charges_what_live_replicas_hold_bound_or_pinned() -> None:
    pods = [(Q, replica("a", "n1")), (Q, replica("b", None)), (Q, replica("c", "n1", phase="Failed"))]
    assert replicas_held(pods, {}) == [HeldGpus("q", 2000, None, HeldReplica("ns/chat", "a", "n1", 2, 3))]
    pinned = [(Q, replica("d", "n1", bound=False))]  # charged, but not bound: not the cycle's to reclaim
    assert replicas_held(pinned, {}) == [HeldGpus("q", 2000, None)]


def test_replicas_reclaimed_already_or_going_are_charged_and_not_offered_again() -> None:
    going = ServingPod("ns", "b", "chat", "h", CapacityType.ON_DEMAND, "n1", "n1", "Running", True, True, 2)
    owner = ReplicaOwner("q", 3, frozenset({"a"}))
    assert replicas_held([(owner, replica("a", "n1")), (owner, going)], {}) == [HeldGpus("q", 4000, None)]


def test_parts_of_gpus_are_charged_in_gpu_equivalents_per_queue_and_type() -> None:
    def shared(name: str, milli: int) -> ServingPod:
        return ServingPod(
            "ns", name, "chat", "h", CapacityType.ON_DEMAND, "n1", "n1", "Running", True, False, 0, gpu_milli=milli
        )

    r = ReplicaOwner("r")
    pods = [(Q, shared("a", 300)), (Q, shared("b", 300)), (Q, shared("c", 300)), (r, shared("d", 1))]
    pods.append((Q, replica("whole", "n1", gpus=1)))
    held = sorted(replicas_held(pods, {}), key=lambda h: (h.queue, h.replica is not None))
    assert [(h.queue, h.milli, h.replica is not None) for h in held] == [
        ("q", 900, False),
        ("q", 1000, True),
        ("r", 1, False),
    ]  # what they hold, to the thousandth
    assert sum(h.milli for h in held if h.queue == "q") == 1900


def test_bound_replicas_holding_an_allocated_part_or_a_mig_instance_are_handed_on_their_own_to_reclaim() -> None:
    part = SharePart("n1", "gpu-0", 300, 24_000, splits=False)
    fraction = ServingPod(
        "ns", "a", "chat", "h", CapacityType.ON_DEMAND, "n1", "n1", "Running", True, False, 0, gpu_milli=300, part=part
    )
    mig = replace(fraction, name="b", node="m1", pinned_node="m1", gpu_milli=143, part=None, mig_profile="1g.10gb")
    unallocated = ServingPod(  # its claim is not allocated yet: what going frees is not known, so it is not offered
        "ns", "c", "chat", "h", CapacityType.ON_DEMAND, "n1", "n1", "Running", True, False, 0, gpu_milli=300
    )
    held = replicas_held([(Q, fraction), (Q, mig), (Q, unallocated)], {})
    assert HeldGpus("q", 300, None, HeldReplica("ns/chat", "a", "n1", 0, 3, part=part)) in held
    assert HeldGpus("q", 143, None, HeldReplica("ns/chat", "b", "m1", 0, 3, mig_profile="1g.10gb")) in held
    assert HeldGpus("q", 300, None) in held  # the unallocated one: charged all the same
    assert sum(h.milli for h in held) == 743
