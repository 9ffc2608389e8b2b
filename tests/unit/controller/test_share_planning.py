"""Placement and the claims agree: the node and GPU the cycle plans for a share or MIG worker is where it goes."""

from __future__ import annotations

from aisched.api.sharing import GpuShare
from aisched.controller.in_flight import placement_fits
from aisched.controller.mig import MigPartitions
from aisched.controller.sharing_report import shared_gpu_usage
from aisched.kube.claims import SHARE_ANNOTATION, PodShare, with_share_claim
from aisched.metrics import SharedGpuUsage
from aisched.policy.placement import GangRequest, Placement, hold, place_gang
from aisched.policy.shared_room import ShareShape
from aisched.policy.sharing.mig_configs import CONFIG_LABEL, STATE_LABEL
from aisched.policy.sharing.mig_demand import waiting_instances
from tests.unit.controller.test_mig import _inventory as _mig_inventory
from tests.unit.controller.test_mig import _node as _mig_node
from tests.unit.controller.test_mig import _pod as _mig_pod
from tests.unit.controller.test_sharing import OWNER, _pod, _shares


def _holding(name: str, node: str, device: str, milli: int) -> dict[str, object]:
    return with_share_claim(_pod(name, node), name, PodShare(device, milli, milli * 80))


def test_the_snapshot_carries_what_shares_left_of_each_gpu_and_the_cycle_places_there() -> None:
    # n1: 4 GPUs; a whole-GPU pod holds 2 (gpu-3, gpu-2), shares hold parts of gpu-0 and gpu-1: as whole
    # GPUs go, n1 is full, and n2 (1 GPU of 20,000 MiB) is free.
    shares = _shares(_pod("whole", "n1", gpus=2), _holding("a", "n1", "gpu-0", 300), _holding("b", "n1", "gpu-1", 700))
    snapshot = shares.inventory.snapshot()
    assert snapshot.free_gpus("n1") == 0
    assert snapshot.shared.parts == {"n1": {"gpu-0": (700, 56_000), "gpu-1": (300, 24_000)}}
    placement = place_gang(GangRequest(1, 1, share=ShareShape(400)), snapshot)
    assert isinstance(placement, Placement) and placement.nodes == ("n1",)
    # The claim's GPU, chosen when the pod is made, is the one planned.
    _, pods = shares.shared_pods(GpuShare(compute_percent=40), [_pod("w-0", "n1")], OWNER)
    assert pods[0]["metadata"]["annotations"][SHARE_ANNOTATION].split(",")[0] == placement.parts[0].device == "gpu-0"


def test_an_admission_still_fits_only_while_its_parts_and_instances_are_free() -> None:
    shares = _shares(_holding("a", "n1", "gpu-0", 300))
    snapshot = shares.inventory.snapshot()
    placement = place_gang(GangRequest(2, 1, share=ShareShape(350)), snapshot)
    assert isinstance(placement, Placement)
    assert placement_fits(snapshot, placement)
    hold(snapshot, placement)
    assert not placement_fits(snapshot, placement)  # taken once: a second time it no longer fits


def test_mig_nodes_offer_what_they_advertise_less_what_pods_ask_and_nothing_while_repartitioned() -> None:
    pending = _mig_node("pending", "all-3g.40gb", "pending", mig={"1g.10gb": 14})
    inventory = _mig_inventory(_mig_node("mig", "all-1g.10gb", mig={"1g.10gb": 14}), pending)
    inventory.upsert_pod(_mig_pod("held", "mig", **{"nvidia.com/mig-1g.10gb": "3"}))
    room = inventory.snapshot().shared
    assert room.mig_free == {"mig": {"1g.10gb": 11}}
    assert set(room.mig_nodes) == {"mig"}


def test_a_mig_pod_stays_on_the_node_its_placement_names_while_that_node_has_an_instance() -> None:
    inventory = _mig_inventory(
        _mig_node("roomy", "all-1g.10gb", mig={"1g.10gb": 14}), _mig_node("tight", "all-1g.10gb", mig={"1g.10gb": 1})
    )
    snapshot = inventory.snapshot()
    placement = place_gang(GangRequest(2, 1, share=ShareShape(mig_profile="1g.10gb")), snapshot)
    assert isinstance(placement, Placement) and placement.nodes == ("roomy", "roomy")  # the node that holds both
    mig = MigPartitions(inventory)
    placed = mig.place("1g.10gb", [_mig_pod(f"w-{i}", node) for i, node in enumerate(placement.nodes)])
    assert [p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in placed] == ["roomy", "roomy"]
    # A pod whose node has no instance left (a pod the watch had not shown) moves to one that has.
    moved = mig.place("1g.10gb", [_mig_pod("w-2", "gone")])
    assert moved[0]["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "tight"


def test_waiting_mig_gangs_and_replicas_ask_for_instances_and_the_larger_ask_stands() -> None:
    class Spec:
        def __init__(self, share: GpuShare | None, replicas: int) -> None:
            self.gpu_share, self.replicas = share, replicas

    asked = waiting_instances(
        [Spec(GpuShare(mig_profile="3g.40gb"), 2), Spec(None, 4), Spec(GpuShare(mig_profile="3g.40gb"), 1)]
    )
    assert asked == {"3g.40gb": 3}
    shares = _shares()
    shares.mig.asked(asked)
    shares.note_waiting_replicas(("ns", "svc"), GpuShare(mig_profile="3g.40gb"), 1, None)
    assert shares.mig.waiting == {"3g.40gb": 3} and shares.mig.waiting_since == {"3g.40gb": 0}


def test_inference_replicas_waiting_for_a_share_count_in_the_stranded_measure() -> None:
    shares = _shares(_holding("a", "n1", "gpu-0", 700), _holding("b", "n1", "gpu-1", 500))
    node = shares.inventory.nodes["n1"]
    pool = (node.gpu_product or "unknown", str(node.capacity_type))
    assert shared_gpu_usage(shares, [], 0) == [SharedGpuUsage(*pool, 2, 1200, 0, 0)]  # nothing waits
    # A replica of 40% waits: gpu-0's 300 free are of no use to it, gpu-1's 500 are.
    shares.note_waiting_replicas(("ns", "svc"), GpuShare(compute_percent=40), 1, None)
    assert shared_gpu_usage(shares, [], 0) == [SharedGpuUsage(*pool, 2, 1200, 1, 300)]
    shares.note_waiting_replicas(("ns", "svc"), GpuShare(compute_percent=40), 0, None)  # placed, or gone
    assert shared_gpu_usage(shares, [], 0) == [SharedGpuUsage(*pool, 2, 1200, 0, 0)]


def test_mig_labels_in_the_test_nodes_are_the_mig_managers() -> None:
    labels = _mig_node("x", "all-1g.10gb")["metadata"]["labels"]
    assert labels[CONFIG_LABEL] == "all-1g.10gb" and labels[STATE_LABEL] == "success"
