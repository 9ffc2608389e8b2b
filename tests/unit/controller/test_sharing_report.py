"""The shared-GPU picture the metrics report: what shares hold, and the GPUs they strand for the demand now."""

from __future__ import annotations

from aisched.api.sharing import GpuShare
from aisched.controller.sharing_report import mig_instances, shared_gpu_usage, waiting_shares
from aisched.kube.claims import PodShare, with_share_claim
from aisched.metrics import MigSlices, SharedGpuUsage
from tests.unit.controller.test_mig import H100
from tests.unit.controller.test_mig import _inventory as _mig_inventory
from tests.unit.controller.test_mig import _node as _mig_node
from tests.unit.controller.test_mig import _pod as _mig_pod
from tests.unit.controller.test_sharing import _pod, _shares


def _holding(name: str, node: str, device: str, milli: int) -> dict[str, object]:
    return with_share_claim(_pod(name, node), name, PodShare(device, milli, milli * 80))


def test_parts_held_and_gpus_stranded_by_pool_for_what_waits() -> None:
    shares = _shares(
        _holding("a", "n1", "gpu-0", 300),
        _holding("b", "n1", "gpu-0", 400),
        _holding("c", "n1", "gpu-1", 500),
        _pod("whole", "n1", gpus=1),
    )
    node = shares.inventory.nodes["n1"]
    pool = (node.gpu_product or "unknown", str(node.capacity_type))
    # 40% waits: gpu-0's 300 free fit it not (stranded), gpu-1's 500 do.
    waiting = waiting_shares([("ns/w", GpuShare(compute_percent=40), 1, None)], 80_000)
    assert shared_gpu_usage(shares, waiting, 0) == [SharedGpuUsage(*pool, 2, 1200, 1, 300)]
    # Nothing waits: nothing is stranded, the parts are still held.
    assert shared_gpu_usage(shares, [], 0) == [SharedGpuUsage(*pool, 2, 1200, 0, 0)]


def test_shares_handed_out_before_the_watch_shows_them_count_and_mig_asks_are_no_fraction() -> None:
    shares = _shares()
    shares.assumed[("ns", "new")] = ("n2", PodShare("gpu-0", 250, 5_000))
    node = shares.inventory.nodes["n2"]
    pool = (node.gpu_product or "unknown", str(node.capacity_type))
    waiting = waiting_shares([("ns/m", GpuShare(mig_profile="1g.10gb"), 3, None)], 20_000)
    assert waiting == []
    assert shared_gpu_usage(shares, waiting, whole_gpus_waiting=1) == [SharedGpuUsage(*pool, 1, 250, 1, 750)]


def test_mig_instances_are_what_device_plugins_offer_less_what_pods_hold() -> None:
    inventory = _mig_inventory(
        _mig_node("a", "all-1g.10gb", mig={"1g.10gb": 14}), _mig_node("b", "all-3g.40gb", mig={"3g.40gb": 4})
    )
    inventory.upsert_pod(_mig_pod("w-0", "a", **{"nvidia.com/mig-1g.10gb": "2"}))
    inventory.upsert_pod(_mig_pod("w-1", "b", **{"nvidia.com/mig-3g.40gb": "1"}))
    assert mig_instances(inventory) == [
        MigSlices(H100, "1g.10gb", allocated=2, free=12),
        MigSlices(H100, "3g.40gb", allocated=1, free=3),
    ]
