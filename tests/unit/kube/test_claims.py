"""Shares of a GPU as the inventory counts them, and the claims and pods that carry them."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aisched.api.sharing import GpuShare
from aisched.kube.claims import (
    CLAIM_NAME,
    SHARE_ANNOTATION,
    PodShare,
    build_share_claim_template,
    read_share,
    share_memory_mib,
    with_mig_slice,
    with_share_claim,
)
from aisched.kube.inventory import Inventory
from aisched.kube.records import read_pod
from aisched.policy.sharing.charge import share_milli
from aisched.settings import Settings
from tests.unit.kube.claim_objects import share_claim_of
from tests.unit.kube.test_inventory import node, pod

OURS = {"aisched.io/kind": "InferenceService", "aisched.io/job-name": "svc"}


def _bare(name: str, gpus: int, **extra: Any) -> dict[str, Any]:
    obj = pod(name, "n1", gpus, **extra)
    obj["spec"]["initContainers"] = []
    return obj


def _shared(name: str, device: str, milli: int, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    obj = _bare(name, 0, labels=OURS if labels is None else labels)
    return with_share_claim(obj, name, PodShare(device, milli, 10_000))


def _held(inventory: Inventory, obj: dict[str, Any]) -> None:
    """OBJ's claim and OBJ as the cluster shows them once kube-scheduler allocated the claim."""
    shared, claim = share_claim_of(obj)
    inventory.upsert_claim(claim)
    inventory.upsert_pod(shared)


def test_pods_sharing_one_gpu_use_one_gpu_of_the_node_and_the_last_to_go_frees_it() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1")])
    inventory.upsert_pod(pod("whole", "n1", 2))
    for name in ("a", "b", "c"):
        _held(inventory, _shared(name, "gpu-5", 300))
    _held(inventory, _shared("d", "gpu-6", 100))
    assert inventory.used_gpus("n1") == 4
    assert inventory.snapshot().free_gpus("n1") == 4
    inventory.delete_pod("ns", "a")
    inventory.delete_pod("ns", "b")
    assert inventory.used_gpus("n1") == 4
    inventory.delete_pod("ns", "c")
    assert inventory.used_gpus("n1") == 3
    assert sorted(p.share.milli for p in inventory.pods_on_node("n1") if p.share) == [100]


def test_every_gpu_a_pod_can_get_is_counted_in_gpu_equivalents() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1")])
    _held(inventory, _shared("a", "gpu-0", 250))
    shared = inventory.pods["ns", "a"]
    assert (shared.gpus, shared.share, shared.gpu_milli) == (0, PodShare("gpu-0", 250, 10_000), 250)
    mig = read_pod(with_mig_slice(_bare("m", 0), "3g.40gb"), "nvidia.com/gpu")
    assert mig.gpu_milli == 429  # 3 of 7 compute slices
    odd_mig = _bare("o", 0)
    odd_mig["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-9z.whatever"] = 2
    assert read_pod(odd_mig, "nvidia.com/gpu").gpu_milli == 2000  # no known shape: whole GPUs
    theirs = _bare("t", 1)
    theirs["spec"]["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimName": "x"}, {"name": "y"}]
    # Claims named count for what they are allocated (tests/unit/kube/test_claim_records.py): none here.
    assert read_pod(theirs, "nvidia.com/gpu").gpu_milli == 1000
    assert read_pod(theirs, "nvidia.com/gpu").claim_names == ("x",)


def test_a_share_annotation_counts_only_on_our_pods() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1")])
    _held(inventory, _shared("t", "gpu-0", 250, labels={}))
    lookalike = inventory.pods["ns", "t"]
    # Not ours: the annotation means nothing; its claim, anyone's, holds what it is allocated: a GPU in use.
    assert lookalike.share is None and lookalike.share_hint is None
    assert lookalike.gpu_milli == 250 and inventory.used_gpus("n1") == 1


@given(st.one_of(st.text(max_size=30), st.integers(), st.none()))
def test_a_malformed_share_annotation_is_none(value: Any) -> None:
    parsed = read_share(value)
    assert parsed is None or (0 < parsed.milli <= 1000 and parsed.annotation() == value)


def test_read_share_bounds() -> None:
    assert read_share("gpu-3,1000,81559") == PodShare("gpu-3", 1000, 81559)
    assert read_share("gpu-3,0,10") is None
    assert read_share("gpu-3,1001,10") is None
    assert read_share("gpu-3,10,-1") is None


def test_the_claim_template_selects_the_chosen_gpu_and_asks_the_share_as_capacity() -> None:
    owner = {"apiVersion": "aisched.io/v1alpha1", "kind": "InferenceService", "name": "svc", "uid": "u"}
    template = build_share_claim_template("ns", "svc-r1", PodShare("gpu-5", 300, 20_000), owner, {"a": "b"})
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == "gpu.nvidia.com"
    assert request["selectors"] == [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].index == 5"}}]
    assert request["capacity"] == {"requests": {"compute": "300", "memory": "20000Mi"}}
    assert template["metadata"]["ownerReferences"] == [owner]
    shared = with_share_claim(pod("p", "n1", 0), "svc-r1", PodShare("gpu-5", 300, 20_000))
    assert shared["spec"]["resourceClaims"] == [{"name": CLAIM_NAME, "resourceClaimTemplateName": "svc-r1"}]
    assert shared["spec"]["containers"][0]["resources"]["claims"] == [{"name": CLAIM_NAME}]
    assert shared["metadata"]["annotations"][SHARE_ANNOTATION] == "gpu-5,300,20000"


@given(
    compute=st.one_of(st.none(), st.integers(1, 99)),
    memory=st.one_of(st.none(), st.integers(1, 200_000)),
    gpu_memory=st.integers(1_000, 200_000),
)
def test_a_fraction_is_charged_the_larger_of_its_compute_and_memory_shares(
    compute: int | None, memory: int | None, gpu_memory: int
) -> None:
    if compute is None and memory is None:
        return
    share = GpuShare(compute_percent=compute, memory_mib=memory)
    milli = share_milli(share, gpu_memory)
    assert 1 <= milli <= 1000
    assert milli >= (compute or 0) * 10
    assert milli * gpu_memory >= min(memory or 0, gpu_memory) * 1000
    assert share_memory_mib(share, milli, gpu_memory) == (memory if memory is not None else milli * gpu_memory // 1000)
