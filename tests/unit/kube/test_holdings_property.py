"""For any interleaving of tenant writes, the inventory holds on each node what the API server says is held.

A tenant with `edit` writes pods (GPUs in containers, a nodeName of its choosing, claims by name,
annotations of any value) and ResourceClaims' specs; the cluster writes the rest (a binding, a
kubelet's status, a claim's allocation and reservations). The oracle counts as kube-scheduler
does, from the objects as they stand: a pod bound to a node and not finished holds its containers'
GPUs there, and each device that a claim allocated on that node and reserved for it, once however
many pods share the claim. The inventory must agree after every write, in any order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.kube.claims import SHARE_ANNOTATION
from aisched.kube.inventory import Inventory
from aisched.settings import Settings
from tests.unit.kube.claim_objects import resource_claim, result

NODES = ("n1", "n2")
PODS = ("p0", "p1", "p2", "p3")
CLAIMS = ("c0", "c1", "c2")
DEVICES_PER_NODE = 8
NAMESPACE = "ns"


@dataclass(frozen=True)
class PodWrite:
    name: str
    node: str | None
    admitted: str  # "none" (nodeName only), "scheduled" (bound by kube-scheduler), "running", "succeeded"
    gpus: int
    claims: tuple[str, ...]
    forged_share: bool


@dataclass(frozen=True)
class ClaimWrite:
    name: str
    node: str | None  # None: not allocated
    devices: tuple[int, ...]
    reserved_for: tuple[str, ...]


@dataclass(frozen=True)
class Delete:
    kind: str  # "pod" or "claim"
    name: str


pod_writes = st.builds(
    PodWrite,
    name=st.sampled_from(PODS),
    node=st.sampled_from((None, *NODES)),
    admitted=st.sampled_from(("none", "scheduled", "running", "succeeded")),
    gpus=st.integers(0, 4),
    claims=st.lists(st.sampled_from(CLAIMS), max_size=3, unique=True).map(tuple),
    forged_share=st.booleans(),
)
claim_writes = st.builds(
    ClaimWrite,
    name=st.sampled_from(CLAIMS),
    node=st.sampled_from((None, *NODES)),
    devices=st.lists(st.integers(0, DEVICES_PER_NODE - 1), min_size=1, max_size=4, unique=True).map(tuple),
    reserved_for=st.lists(st.sampled_from(PODS), max_size=3, unique=True).map(tuple),
)
deletes = st.builds(Delete, kind=st.sampled_from(("pod", "claim")), name=st.sampled_from((*PODS, *CLAIMS)))
writes = st.lists(st.one_of(pod_writes, claim_writes, deletes), min_size=1, max_size=30)


def pod_object(write: PodWrite, version: int) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if write.node is not None and write.admitted == "scheduled":
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    elif write.node is not None and write.admitted == "running":
        status = {"phase": "Running", "containerStatuses": [{"name": "c", "ready": True}]}
    elif write.node is not None and write.admitted == "succeeded":
        status = {"phase": "Succeeded"}
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(write.gpus)}}}],
        "resourceClaims": [{"name": f"r-{claim}", "resourceClaimName": claim} for claim in write.claims],
    }
    if write.node is not None:
        spec["nodeName"] = write.node
    annotations = {SHARE_ANNOTATION: "gpu-0,10,100"} if write.forged_share else {}
    return {
        "metadata": {
            "namespace": NAMESPACE,
            "name": write.name,
            "resourceVersion": str(version),
            "annotations": annotations,
        },
        "spec": spec,
        "status": status,
    }


def claim_object(write: ClaimWrite, version: int) -> dict[str, Any]:
    results = [result(f"gpu-{d}", pool=write.node) for d in write.devices] if write.node is not None else None
    return resource_claim(
        write.name,
        node=write.node,
        results=results,
        reserved_for=write.reserved_for if write.node is not None else (),
        namespace=NAMESPACE,
        version=str(version),
    )


def held_as_the_api_server_says(pods: dict[str, dict[str, Any]], claims: dict[str, ClaimWrite]) -> dict[str, int]:
    """Per node: what bound, unfinished pods hold there, as kube-scheduler and the DRA allocator count it."""
    held = dict.fromkeys(NODES, 0)
    devices: dict[str, set[int]] = {node: set() for node in NODES}
    for name, pod in pods.items():
        node = pod["spec"].get("nodeName")
        status = pod["status"]
        bound = node is not None and (
            any(c.get("type") == "PodScheduled" and c.get("status") == "True" for c in status.get("conditions", []))
            or status.get("phase") in ("Running", "Succeeded", "Failed")
            or bool(status.get("containerStatuses"))
        )
        if not bound or status.get("phase") in ("Succeeded", "Failed"):
            continue
        held[node] += int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        for entry in pod["spec"]["resourceClaims"]:
            claim = claims.get(entry["resourceClaimName"])
            if claim is not None and claim.node == node and name in claim.reserved_for:
                devices[node].update(claim.devices)
    return {node: held[node] + len(devices[node]) for node in NODES}


def disjoint(write: ClaimWrite, claims: dict[str, ClaimWrite]) -> ClaimWrite:
    """WRITE as the allocator would make it: a whole device goes to one claim at a time."""
    if write.node is None:
        return write
    taken = {d for name, c in claims.items() if name != write.name and c.node == write.node for d in c.devices}
    free = tuple(d for d in write.devices if d not in taken)
    return (
        write
        if free == write.devices
        else ClaimWrite(write.name, write.node if free else None, free, write.reserved_for)
    )


@settings(max_examples=200, deadline=None)
@given(writes)
def test_any_interleaving_of_tenant_writes_leaves_each_node_holding_what_the_api_server_says(
    sequence: list[PodWrite | ClaimWrite | Delete],
) -> None:
    inventory = Inventory(Settings())
    pods: dict[str, dict[str, Any]] = {}
    claims: dict[str, ClaimWrite] = {}
    for version, write in enumerate(sequence, start=1):
        if isinstance(write, PodWrite):
            pods[write.name] = pod_object(write, version)
            inventory.upsert_pod(pods[write.name])
        elif isinstance(write, ClaimWrite):
            allocated = disjoint(write, claims)
            claims[allocated.name] = allocated
            inventory.upsert_claim(claim_object(allocated, version))
        elif write.kind == "pod" and write.name in pods:
            del pods[write.name]
            inventory.delete_pod(NAMESPACE, write.name, str(version))
        elif write.kind == "claim" and write.name in claims:
            del claims[write.name]
            inventory.delete_claim(NAMESPACE, write.name, str(version))
        expected = held_as_the_api_server_says(pods, claims)
        assert {node: inventory.used_gpus(node) for node in NODES} == expected, (write, pods.keys(), claims)
