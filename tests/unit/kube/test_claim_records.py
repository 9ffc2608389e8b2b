"""What a pod holds is what the API server says it holds: DRA claims as allocated and reserved for it, and
only once it is bound; nothing a tenant writes on its pods (claim entries, annotations, nodeName) counts."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aisched.api.sharing import GpuShare
from aisched.controller.sharing import GpuShares
from aisched.kube.claim_records import read_claim
from aisched.kube.claims import CLAIM_NAME, SHARE_ANNOTATION, PodShare, share_claim_spec, with_share_claim
from aisched.kube.inventory import Inventory
from aisched.kube.records import ClaimedDevice, read_pod
from aisched.settings import Settings
from tests.unit.kube.claim_objects import bound, made_for, resource_claim, result, share_claim_of

OURS = {"aisched.io/kind": "InferenceService", "aisched.io/job-name": "svc"}
OWNER = {"apiVersion": "aisched.io/v1alpha1", "kind": "InferenceService", "name": "svc", "uid": "u"}


def _node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": "80000"}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _pod(name: str, *, node: str | None = None, pinned: str | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if node is not None:
        spec["nodeName"] = node
    if pinned is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": pinned}
    if extra.pop("gated", False):
        spec["schedulingGates"] = [{"name": "aisched.io/gang"}]
    spec["resourceClaims"] = extra.pop("claims", [])
    return {
        "metadata": {"namespace": "ns", "name": name, "labels": extra.pop("labels", {})},
        "spec": spec,
        "status": extra.pop("status", {"phase": "Pending"}),
    }


def _running(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    return obj


def _inventory(*nodes: str) -> Inventory:
    inventory = Inventory(Settings())
    inventory.replace_nodes([_node(n) for n in nodes or ("n1",)])
    return inventory


def _share(name: str, device: str, milli: int, *, gated: bool = False) -> dict[str, Any]:
    return with_share_claim(_pod(name, pinned="n1", labels=OURS, gated=gated), name, PodShare(device, milli, 8_000))


# -- 1: claims count as allocated, never as named ------------------------------------------------------------


def test_pods_naming_claims_that_do_not_exist_hold_nothing() -> None:
    # The attack: 16 pods with nodeName set and 8 claims each, named and never made, took 32 free GPUs to 0.
    inventory = _inventory("n1", "n2", "n3", "n4")
    for i in range(16):
        claims = [{"name": f"c{j}", "resourceClaimName": f"nothing-{i}-{j}"} for j in range(8)]
        inventory.upsert_pod(_running(_pod(f"p{i}", node=f"n{i % 4 + 1}", claims=claims)))
    assert all(inventory.used_gpus(n) == 0 for n in ("n1", "n2", "n3", "n4"))
    assert sum(inventory.snapshot().free_gpus(n) for n in ("n1", "n2", "n3", "n4")) == 32
    assert inventory.pods["ns", "p0"].gpu_milli == 0


def test_a_claim_with_allocation_mode_all_holds_every_device_it_is_allocated() -> None:
    inventory = _inventory()
    inventory.upsert_pod(_running(_pod("greedy", node="n1", claims=[{"name": "all", "resourceClaimName": "every"}])))
    assert inventory.used_gpus("n1") == 0  # not allocated yet: holds nothing
    allocated = resource_claim("every", results=[result(f"gpu-{i}") for i in range(8)], reserved_for=("greedy",))
    changed = inventory.upsert_claim(allocated)
    assert [p.name for p in changed] == ["greedy"]
    assert inventory.used_gpus("n1") == 8 and inventory.snapshot().free_gpus("n1") == 0
    assert inventory.pods["ns", "greedy"].gpu_milli == 8000
    inventory.delete_claim("ns", "every")
    assert inventory.used_gpus("n1") == 0


def test_a_claim_counts_only_for_the_pods_it_is_reserved_for_and_a_device_once_however_many_share_it() -> None:
    inventory = _inventory()
    entry = [{"name": "gpu", "resourceClaimName": "shared"}]
    for name in ("a", "b", "outsider"):
        inventory.upsert_pod(_running(_pod(name, node="n1", claims=entry)))
    inventory.upsert_claim(resource_claim("shared", results=[result("gpu-0")], reserved_for=("a", "b")))
    assert inventory.used_gpus("n1") == 1  # one device, held by two pods
    assert inventory.pods["ns", "outsider"].claimed == ()
    inventory.delete_pod("ns", "a")
    assert inventory.used_gpus("n1") == 1
    inventory.delete_pod("ns", "b")
    assert inventory.used_gpus("n1") == 0


def test_allocated_but_reserved_for_no_pod_or_of_another_driver_or_node_counts_for_no_pod() -> None:
    inventory = _inventory("n1", "n2")
    claims = [{"name": f"e{i}", "resourceClaimName": f"c{i}"} for i in range(3)]
    inventory.upsert_pod(_running(_pod("p", node="n1", claims=claims)))
    inventory.upsert_claim(resource_claim("c0", results=[result("gpu-0")]))
    inventory.upsert_claim(
        resource_claim("c1", results=[result("gpu-1", driver="other.example.com")], reserved_for=("p",))
    )
    inventory.upsert_claim(resource_claim("c2", node="n2", results=[result("gpu-2", pool="n2")], reserved_for=("p",)))
    assert inventory.used_gpus("n1") == inventory.used_gpus("n2") == 0


def test_a_pod_seen_after_its_claim_and_a_template_claim_named_by_the_pods_status_count_too() -> None:
    inventory = _inventory()
    inventory.upsert_claim(resource_claim("p-gpu-abc", results=[result("gpu-3", compute=250)], reserved_for=("p",)))
    obj = _running(_pod("p", node="n1", claims=[{"name": "gpu", "resourceClaimTemplateName": "t"}]))
    assert inventory.upsert_pod(obj).claimed == ()  # type: ignore[union-attr]  # the pod's status names no claim
    held = inventory.upsert_pod(made_for(obj, "gpu", "p-gpu-abc"))
    assert held is not None and held.claimed == (ClaimedDevice("gpu-3", 250),) and held.gpu_milli == 250
    assert inventory.used_gpus("n1") == 1


def test_a_relist_drops_claims_gone_and_frees_their_gpus() -> None:
    inventory = _inventory()
    inventory.upsert_pod(_running(_pod("p", node="n1", claims=[{"name": "g", "resourceClaimName": "c"}])))
    inventory.upsert_claim(resource_claim("c", results=[result("gpu-0")], reserved_for=("p",), version="5"))
    assert inventory.used_gpus("n1") == 1
    assert inventory.relist_claims([], "4") == []  # an older list proves nothing gone
    changed = inventory.relist_claims([], "9")
    assert [p.name for p in changed] == ["p"] and inventory.used_gpus("n1") == 0


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=8), c),
        max_leaves=20,
    )
)
def test_a_claim_of_any_shape_reads_as_holding_something_or_nothing_and_never_raises(junk: Any) -> None:
    obj = {
        "metadata": {"namespace": "ns", "name": "c"},
        "spec": junk,
        "status": {"allocation": junk, "reservedFor": junk},
    }
    record = read_claim(obj)
    assert all(0 < device.milli <= 1000 for _, device in record.devices)


# -- 2: a share is what its claim is allocated, not the annotation ----------------------------------------


def test_a_forged_share_annotation_changes_nothing_once_the_claim_is_allocated() -> None:
    inventory = _inventory()
    for i in range(4):
        obj, claim = share_claim_of(_share(f"r{i}", "gpu-0", 10))
        inventory.upsert_claim(claim)
        # The tenant points each 1% share at another GPU, and says it holds 0.1% of it.
        obj["metadata"]["annotations"][SHARE_ANNOTATION] = f"gpu-{i + 1},1,1"
        inventory.upsert_pod(obj)
    assert inventory.used_gpus("n1") == 1  # gpu-0 only, as allocated
    assert {p.share for p in inventory.pods.values()} == {PodShare("gpu-0", 10, 8_000)}
    assert inventory.snapshot().shared.parts == {"n1": {"gpu-0": (960, 80_000 - 4 * 8_000)}}


def test_replicas_that_rewrite_their_annotation_are_charged_the_compute_their_claims_consume() -> None:
    inventory = _inventory()
    for i in range(4):
        obj, claim = share_claim_of(_share(f"r{i}", f"gpu-{i}", 900))
        obj["metadata"]["annotations"][SHARE_ANNOTATION] = f"gpu-{i},1,1"
        inventory.upsert_claim(claim)
        inventory.upsert_pod(obj)
    assert sum(p.gpu_milli for p in inventory.pods.values()) == 3600


def test_before_its_allocation_the_annotation_stands_for_the_share_only_while_it_is_what_the_claim_asks() -> None:
    inventory = _inventory()
    gated = _share("w", "gpu-2", 300, gated=True)
    assert inventory.upsert_pod(gated).share == PodShare("gpu-2", 300, 8_000)  # type: ignore[union-attr]
    ungated = _share("w", "gpu-2", 300)
    assert inventory.upsert_pod(ungated).share is None  # type: ignore[union-attr]  # no claim made: no promise
    obj, claim = share_claim_of(ungated, allocated=False)
    inventory.upsert_claim(claim)
    assert inventory.upsert_pod(obj).share == PodShare("gpu-2", 300, 8_000)  # type: ignore[union-attr]
    assert inventory.used_gpus("n1") == 1
    obj["metadata"]["annotations"][SHARE_ANNOTATION] = "gpu-5,1,1"
    assert inventory.upsert_pod(obj).share is None  # type: ignore[union-attr]  # not what the claim asks
    assert inventory.used_gpus("n1") == 0


def test_a_claim_that_is_not_the_operators_shape_asks_no_share() -> None:
    share = PodShare("gpu-1", 300, 8_000)
    ours = read_claim(resource_claim("c", owner_pod="p", spec=share_claim_spec(share)))
    assert ours.asked == share
    greedy = share_claim_spec(share)
    greedy["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    assert read_claim(resource_claim("c", owner_pod="p", spec=greedy)).asked is None
    canonical = share_claim_spec(PodShare("gpu-1", 1000, 1024))
    canonical["devices"]["requests"][0]["exactly"]["capacity"]["requests"] = {"compute": "1k", "memory": "1Gi"}
    canonical["devices"]["requests"][0]["exactly"] |= {"allocationMode": "ExactCount", "count": 1}
    assert read_claim(resource_claim("c", spec=canonical)).asked == PodShare("gpu-1", 1000, 1024)


def test_a_share_claim_allocated_every_gpu_holds_them_all() -> None:
    inventory = _inventory()
    obj, claim = share_claim_of(_share("w", "gpu-0", 10))
    claim["status"]["allocation"]["devices"]["results"] = [result(f"gpu-{i}") for i in range(4)]
    inventory.upsert_claim(claim)
    held = inventory.upsert_pod(obj)
    assert held is not None and held.gpu_milli == 4000 and inventory.used_gpus("n1") == 4


# -- 3: a pod is on a node once it is bound there ------------------------------------------------------------


def test_a_pod_with_a_node_name_its_kubelet_never_admitted_holds_nothing_there() -> None:
    inventory = _inventory()
    obj = _pod("direct", node="n1")
    obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    record = inventory.upsert_pod(obj)
    assert record is not None and record.node is None and inventory.used_gpus("n1") == 0
    obj["status"] = {"phase": "Pending", "containerStatuses": [{"name": "c", "state": {"waiting": {}}}]}
    assert inventory.upsert_pod(obj).node == "n1"  # type: ignore[union-attr]  # its kubelet admitted it
    assert inventory.used_gpus("n1") == 8


def test_bound_is_what_the_binding_or_the_kubelet_writes() -> None:
    assert read_pod(bound(_pod("p"), "n1"), "nvidia.com/gpu").node == "n1"
    assert read_pod(_pod("p", node="n1", status={"phase": "Running"}), "nvidia.com/gpu").node == "n1"
    assert read_pod(_pod("p", node="n1", status={"phase": "Failed"}), "nvidia.com/gpu").node == "n1"
    assert read_pod(_pod("p", node="n1"), "nvidia.com/gpu").node is None


def test_our_pinned_gated_workers_hold_their_gpus_before_they_bind() -> None:
    inventory = _inventory()
    obj = _pod("w", pinned="n1", labels={"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "j"}, gated=True)
    obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
    inventory.upsert_pod(obj)
    assert inventory.used_gpus("n1") == 4
    theirs = _pod("t", pinned="n1", gated=True)
    theirs["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
    inventory.upsert_pod(theirs)
    assert inventory.used_gpus("n1") == 4


def test_a_claim_entry_of_ours_on_anyone_elses_pod_is_just_a_claim() -> None:
    claims = [{"name": CLAIM_NAME, "resourceClaimName": "c"}]
    record = read_pod(_running(_pod("t", node="n1", claims=claims)), "nvidia.com/gpu")
    assert (record.share_claim, record.claim_names, record.share_hint) == (None, ("c",), None)


def test_a_share_is_never_handed_the_gpu_another_claim_holds_whole() -> None:
    inventory = _inventory()
    inventory.upsert_pod(_running(_pod("theirs", node="n1", claims=[{"name": "g", "resourceClaimName": "c"}])))
    inventory.upsert_claim(resource_claim("c", results=[result("gpu-0")], reserved_for=("theirs",)))
    shares = GpuShares(inventory)
    _, (pod,) = shares.shared_pods(GpuShare(compute_percent=30), [_pod("w", pinned="n1", labels=OURS)], OWNER)
    assert pod["metadata"]["annotations"][SHARE_ANNOTATION].split(",")[0] != "gpu-0"
