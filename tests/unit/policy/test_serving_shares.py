"""Serving replicas that ask part of a GPU: where a GPU has room for them, or a MIG instance is free."""

from __future__ import annotations

from aisched.api.common import SpotPolicy
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.serving import PlanReason, ServingReplica, ServingRequest, plan_serving
from aisched.policy.shared_room import SharedRoom, ShareShape
from tests.unit.policy.test_serving import ON_DEMAND, node

MEMORY = 80_000


def _shared(parts: dict[str, dict[str, int]], *, gpus: int = 2) -> ClusterSnapshot:
    """Nodes in zone a whose listed GPUs shares hold in part (device -> thousandths held)."""
    snapshot = ClusterSnapshot(node(name, "a", gpus=gpus, used=len(held)) for name, held in parts.items())
    free = {
        name: {device: (1000 - milli, MEMORY - milli * 80) for device, milli in held.items()}
        for name, held in parts.items()
    }
    snapshot.shared = SharedRoom(free, dict.fromkeys(parts, MEMORY))
    return snapshot


def _request(share: ShareShape) -> ServingRequest:
    return ServingRequest(gpus_per_replica=1, spot_policy=SpotPolicy.NEVER, min_on_demand_replicas=0, share=share)


def test_a_fractional_replica_fits_a_node_whose_gpus_are_all_partly_shared() -> None:
    snapshot = _shared({"full": {"gpu-0": 500, "gpu-1": 900}})
    assert snapshot.free_gpus("full") == 0
    plan = plan_serving([], 1, _request(ShareShape(400)), snapshot)
    assert [s.node for s in plan.start] == ["full"] and plan.unplaced == 0
    # As whole GPUs go, the same node is full.
    whole = plan_serving([], 1, ServingRequest(1, spot_policy=SpotPolicy.NEVER), snapshot)
    assert whole.unplaced == 1 and whole.reason == PlanReason.INSUFFICIENT_CAPACITY


def test_replicas_planned_together_never_fill_a_gpu_past_its_capacity_and_the_snapshot_is_left_as_it_was() -> None:
    snapshot = _shared({"one": {"gpu-0": 500}}, gpus=1)
    plan = plan_serving([], 2, _request(ShareShape(400)), snapshot)
    assert [s.node for s in plan.start] == ["one"] and plan.unplaced == 1
    assert snapshot.shared.parts == {"one": {"gpu-0": (500, 40_000)}}


def test_a_replica_goes_where_it_grows_fragmentation_least() -> None:
    # `fresh` has two wholly free GPUs; `partial` a GPU with 400 free: a 40% replica fills it exactly.
    snapshot = _shared({"partial": {"gpu-0": 600, "gpu-1": 1000}})
    fresh = node("fresh", "a", gpus=2)
    both = ClusterSnapshot([*snapshot.nodes(), fresh])
    both.shared = SharedRoom(snapshot.shared.parts, {"partial": MEMORY, "fresh": MEMORY})
    plan = plan_serving([], 1, _request(ShareShape(400)), both)
    assert [s.node for s in plan.start] == ["partial"]


def test_mig_replicas_go_to_nodes_with_a_free_instance_and_running_ones_there_are_not_lost() -> None:
    snapshot = ClusterSnapshot([node("whole", "a", gpus=8)])
    mig = [node("mig-1", "a", gpus=0), node("mig-2", "b", gpus=0)]
    snapshot.shared = SharedRoom(mig_nodes=mig, mig_free={"mig-1": {"1g.10gb": 1}, "mig-2": {"1g.10gb": 0}})
    request = _request(ShareShape(mig_profile="1g.10gb"))
    plan = plan_serving([], 2, request, snapshot)
    assert [s.node for s in plan.start] == ["mig-1"] and plan.unplaced == 1
    running = [ServingReplica("r-0", "mig-2", ON_DEMAND, ready=True)]
    steady = plan_serving(running, 1, request, snapshot)
    assert steady.start == () and steady.retire == () and steady.reason == PlanReason.UP_TO_DATE
