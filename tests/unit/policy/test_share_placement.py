"""Gangs of GPU parts: fractions where a GPU has room (never past 1000 thousandths), MIG where an instance is free."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.api.common import CapacityType
from aisched.policy.cluster import ClusterSnapshot, Node, local_node
from aisched.policy.placement import INSUFFICIENT_GPUS, GangRequest, Placement, Unplaceable, gang_fits, hold, place_gang
from aisched.policy.share_placement import gpus_of, share_room
from aisched.policy.shared_room import MILLI, SharedRoom, ShareShape
from aisched.policy.sharing.assign import ShareRequest, assign_shares
from aisched.policy.topology import LOCAL_TOPOLOGY

H100 = "NVIDIA-H100-80GB-HBM3"
MEMORY = 80_000
FORTY = ShareShape(400)
ONE_G = ShareShape(mig_profile="1g.10gb")


def _snapshot(
    parts: dict[str, dict[str, int]], gpus: int = 2, spare: tuple[str, ...] = (), rack: str = "r1"
) -> ClusterSnapshot:
    """Nodes named in PARTS, each GPU listed held in part (device -> thousandths held); SPARE nodes have no share."""
    nodes = [
        local_node(name, gpus, zone="z", rack=rack, nvlink_domain=name, used_gpus=len(held), gpu_product=H100)
        for name, held in parts.items()
    ]
    nodes += [local_node(name, gpus, zone="z", rack=rack, nvlink_domain=name, gpu_product=H100) for name in spare]
    snapshot = ClusterSnapshot(nodes, LOCAL_TOPOLOGY)
    free = {
        name: {device: (MILLI - milli, MEMORY - milli * MEMORY // MILLI) for device, milli in held.items()}
        for name, held in parts.items()
    }
    snapshot.shared = SharedRoom(free, dict.fromkeys([*parts, *spare], MEMORY))
    return snapshot


def _gang(replicas: int = 1, share: ShareShape = FORTY, **fields: object) -> GangRequest:
    return GangRequest(replicas, 1, share=share, **fields)  # type: ignore[arg-type]


def test_a_node_whose_gpus_are_all_partly_shared_still_takes_a_share_that_fits() -> None:
    snapshot = _snapshot({"n1": {"gpu-0": 500, "gpu-1": 700}})
    assert snapshot.free_gpus("n1") == 0  # as whole GPUs go, the node is full
    placement = place_gang(_gang(), snapshot)
    assert isinstance(placement, Placement)
    assert placement.nodes == ("n1",)
    assert [(p.device, p.milli, p.splits) for p in placement.parts] == [("gpu-0", 400, False)]
    assert placement.gpus_by_node() == {}  # it splits no free GPU
    # The whole-GPU view of the same node is unchanged: a whole GPU fits nowhere.
    assert isinstance(place_gang(GangRequest(1, 1), snapshot), Unplaceable)


def test_a_share_too_large_for_what_is_left_waits_for_gpus_and_says_how_much_room_there_is() -> None:
    snapshot = _snapshot({"n1": {"gpu-0": 700, "gpu-1": 700}})
    outcome = place_gang(_gang(), snapshot)
    assert isinstance(outcome, Unplaceable) and outcome.reason == INSUFFICIENT_GPUS and outcome.transient
    assert "1 x 40% of a GPU" in outcome.message and "room any matching node has is for 0" in outcome.message
    assert not gang_fits(_gang(), snapshot)


def test_a_share_takes_a_partly_used_gpu_before_it_splits_a_whole_one() -> None:
    snapshot = _snapshot({"n1": {"gpu-0": 500}}, spare=("n0",))
    placement = place_gang(_gang(), snapshot)
    assert isinstance(placement, Placement)
    assert (placement.parts[0].node, placement.parts[0].device) == ("n1", "gpu-0")


def test_the_planned_gpu_is_the_one_the_claims_measure_picks_on_that_node() -> None:
    """The operator's assign (controller/sharing.py) runs assign_shares over the node's GPUs alone."""
    snapshot = _snapshot({"n1": {"gpu-0": 300, "gpu-1": 700}, "n2": {"gpu-0": 500}}, gpus=4)
    placement = place_gang(_gang(2, required_level=LOCAL_TOPOLOGY.find("Rack")), snapshot)
    assert isinstance(placement, Placement)
    for node in set(placement.nodes):
        gpus, held = gpus_of(snapshot, node)
        mine = [p for p in placement.parts if p.node == node]
        alone = assign_shares(gpus, held, [ShareRequest(f"{i}", p.milli, p.memory_mib) for i, p in enumerate(mine)])
        assert sorted(d for _, d in alone.placed.values()) == sorted(p.device for p in mine)


def test_a_gang_of_shares_on_one_node_fills_a_partly_used_gpu_on_the_fullest_node_that_holds_it() -> None:
    snapshot = _snapshot({"n1": {"gpu-0": 200, "gpu-1": 700}, "n2": {"gpu-0": 200}}, spare=("n0",))
    # Two 40% workers: n1 has room for 2 (on gpu-0), n2 for 2 + 2 on its free GPU, n0 for 4.
    placement = place_gang(_gang(2, required_level=LOCAL_TOPOLOGY.node), snapshot)
    assert isinstance(placement, Placement)
    assert placement.nodes == ("n1", "n1") and [p.device for p in placement.parts] == ["gpu-0", "gpu-0"]
    assert snapshot.shared.parts["n1"]["gpu-0"] == (800, 64_000)  # placing changes nothing; `hold` does


def test_what_a_cycle_holds_is_seen_by_the_next_gang_and_a_trial_gives_it_back() -> None:
    snapshot = _snapshot({"n1": {"gpu-0": 500}}, gpus=1)
    with snapshot.trial():
        first = place_gang(_gang(), snapshot)
        assert isinstance(first, Placement)
        hold(snapshot, first)
        assert snapshot.shared.parts["n1"]["gpu-0"][0] == 100
        assert isinstance(place_gang(_gang(), snapshot), Unplaceable)
    assert snapshot.shared.parts["n1"]["gpu-0"][0] == 500


@st.composite
def _clusters(draw: st.DrawFn) -> ClusterSnapshot:
    parts: dict[str, dict[str, int]] = {}
    spare = []
    for index in range(draw(st.integers(1, 4))):
        name = f"n{index}"
        held = draw(st.lists(st.integers(1, MILLI), min_size=0, max_size=2))
        if held:
            parts[name] = {f"gpu-{i}": milli for i, milli in enumerate(held)}
        else:
            spare.append(name)
    return _snapshot(parts, gpus=2, spare=tuple(spare))


@given(_clusters(), st.lists(st.tuples(st.integers(1, 3), st.integers(5, 99)), min_size=1, max_size=8))
@settings(max_examples=60, deadline=None)
def test_shares_placed_one_after_another_never_take_a_gpu_past_its_capacity(
    snapshot: ClusterSnapshot, gangs: list[tuple[int, int]]
) -> None:
    # An independent ledger of what each GPU holds: what shares held before, and every part placed since.
    held = {(n, d): MILLI - free for n, devices in snapshot.shared.parts.items() for d, (free, _) in devices.items()}
    for replicas, percent in gangs:
        shape = ShareShape(percent * 10)
        before = {n: share_room(snapshot, n, shape) for n in snapshot.node_names()}
        outcome = place_gang(_gang(replicas, shape), snapshot)
        if replicas == 1:  # a single share is refused only when no GPU anywhere has room for it
            assert isinstance(outcome, Placement) == any(before.values())
        if isinstance(outcome, Placement):
            assert len(outcome.parts) == replicas
            for part in outcome.parts:
                held[part.node, part.device] = held.get((part.node, part.device), 0) + part.milli
            assert all(milli <= MILLI for milli in held.values()), held
            hold(snapshot, outcome)
        for node, devices in snapshot.shared.parts.items():
            assert all(0 <= milli <= MILLI and memory >= 0 for milli, memory in devices.values()), node
            # A GPU a share holds is one GPU in use: never more than the node has.
            assert len(devices) <= snapshot.used_gpus(node) <= snapshot.node(node).allocatable_gpus


# -- MIG ---------------------------------------------------------------------------------------


def _mig_snapshot(free: dict[str, int], *, whole: int = 0) -> ClusterSnapshot:
    """MIG nodes with FREE 1g.10gb instances each, in one rack; WHOLE spare 8-GPU nodes beside them."""
    mig = [
        local_node(
            name, 0, zone="z", rack="r1", nvlink_domain=name, gpu_product=H100, capacity_type=CapacityType.ON_DEMAND
        )
        for name in free
    ]
    spare = [local_node(f"w{i}", 8, zone="z", rack="r2", nvlink_domain=f"w{i}", gpu_product=H100) for i in range(whole)]
    snapshot = ClusterSnapshot(spare, LOCAL_TOPOLOGY)
    snapshot.shared = SharedRoom(mig_nodes=mig, mig_free={n: {"1g.10gb": f} for n, f in free.items()})
    return snapshot


def test_a_mig_worker_goes_to_a_node_with_a_free_instance_not_to_a_free_whole_gpu() -> None:
    placement = place_gang(_gang(share=ONE_G), _mig_snapshot({"m1": 0, "m2": 3}, whole=2))
    assert isinstance(placement, Placement)
    assert placement.nodes == ("m2",) and placement.mig_profile == "1g.10gb" and placement.gpus_by_node() == {}


def test_a_mig_gang_packs_the_node_with_the_fewest_free_instances_and_waits_when_none_is_free() -> None:
    placement = place_gang(_gang(2, share=ONE_G), _mig_snapshot({"m1": 5, "m2": 2}))
    assert isinstance(placement, Placement) and placement.nodes == ("m2", "m2")
    outcome = place_gang(_gang(share=ONE_G), _mig_snapshot({"m1": 0}, whole=3))
    assert isinstance(outcome, Unplaceable) and outcome.transient
    assert "0 free on the nodes with MIG" in outcome.message


def test_mig_instances_taken_in_a_cycle_are_gone_for_the_next_gang() -> None:
    snapshot = _mig_snapshot({"m1": 1})
    with snapshot.trial():
        first = place_gang(_gang(share=ONE_G), snapshot)
        assert isinstance(first, Placement)
        hold(snapshot, first)
        assert isinstance(place_gang(_gang(share=ONE_G), snapshot), Unplaceable)
    assert snapshot.shared.mig_free["m1"]["1g.10gb"] == 1


@given(st.lists(st.integers(0, 4), min_size=1, max_size=5), st.lists(st.integers(1, 4), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_mig_placements_land_only_on_nodes_with_a_free_instance(free: list[int], gangs: list[int]) -> None:
    snapshot = _mig_snapshot({f"m{i}": f for i, f in enumerate(free)}, whole=1)
    for replicas in gangs:
        left = {node: dict(free) for node, free in snapshot.shared.mig_free.items()}
        outcome = place_gang(_gang(replicas, ONE_G), snapshot)
        if isinstance(outcome, Placement):
            for node in set(outcome.nodes):
                assert outcome.nodes.count(node) <= left[node]["1g.10gb"]
            hold(snapshot, outcome)
        else:
            assert sum(f["1g.10gb"] for f in left.values()) < replicas  # they are all in one rack
    assert all(f["1g.10gb"] >= 0 for f in snapshot.shared.mig_free.values())


def test_a_mig_node_is_none_of_the_whole_gpu_nodes() -> None:
    node: Node = _mig_snapshot({"m1": 2}).shared.mig_nodes["m1"]
    assert node.allocatable_gpus == 0 and not node.usable and node.schedulable
