"""ResourceClaims and pods as the API server shows them once kube-controller-manager and kube-scheduler
have done their part: a claim made from a pod's template, allocated and reserved for it (builders)."""

from __future__ import annotations

import copy
from typing import Any

from aisched.kube.claims import CLAIM_NAME, DRIVER, SHARE_ANNOTATION, read_share, share_claim_spec


def result(device: str, compute: int | None = None, memory_mib: int | None = None, **extra: Any) -> dict[str, Any]:
    """One device of an allocation; COMPUTE and MEMORY_MIB: what it consumes of a shared GPU."""
    consumed = {
        **({"compute": str(compute)} if compute is not None else {}),
        **({"memory": f"{memory_mib}Mi"} if memory_mib is not None else {}),
    }
    return {
        "request": "gpu",
        "driver": DRIVER,
        "pool": extra.pop("pool", "n1"),
        "device": device,
        **({"consumedCapacity": consumed} if consumed else {}),
        **extra,
    }


def resource_claim(
    name: str,
    *,
    node: str | None = "n1",
    results: list[dict[str, Any]] | None = None,
    reserved_for: tuple[str, ...] = (),
    owner_pod: str | None = None,
    spec: dict[str, Any] | None = None,
    namespace: str = "ns",
    version: str = "",
) -> dict[str, Any]:
    """A ResourceClaim; allocated on NODE when RESULTS are given, reserved for the pods named."""
    metadata: dict[str, Any] = {"namespace": namespace, "name": name, "resourceVersion": version}
    if owner_pod is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner_pod, "uid": f"uid-{owner_pod}", "controller": True}
        ]
    status: dict[str, Any] = {}
    if results is not None:
        status["allocation"] = {"devices": {"results": results}}
        if node is not None:
            status["allocation"]["nodeSelector"] = {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"} for pod in reserved_for]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": spec or {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
        "status": status,
    }


def made_for(pod: dict[str, Any], entry: str, claim: str) -> dict[str, Any]:
    """POD once kube-controller-manager made CLAIM for its template entry ENTRY (the pod's status says so)."""
    pod = copy.deepcopy(pod)
    statuses = pod.setdefault("status", {}).setdefault("resourceClaimStatuses", [])
    statuses.append({"name": entry, "resourceClaimName": claim})
    return pod


def bound(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """POD as kube-scheduler's binding leaves it: on NODE, PodScheduled True."""
    pod = copy.deepcopy(pod)
    pod["spec"]["nodeName"] = node
    pod.setdefault("status", {}).setdefault("conditions", []).append({"type": "PodScheduled", "status": "True"})
    return pod


def share_claim_of(
    pod: dict[str, Any], *, allocated: bool = True, node: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(POD, its share claim) as the cluster shows a pod of ours made with `with_share_claim`: the claim made
    from the operator's template (owned by the pod); ALLOCATED: the GPU the template selects, on the pod's
    node, reserved for it, and the pod bound there (NODE: another node than the one it is pinned to)."""
    share = read_share(pod["metadata"]["annotations"][SHARE_ANNOTATION])
    assert share is not None
    name = pod["metadata"]["name"]
    claim_name = f"{name}-{CLAIM_NAME}-x7k2p"
    pod = made_for(pod, CLAIM_NAME, claim_name)
    on = node or pod["spec"].get("nodeName") or pod["spec"]["nodeSelector"]["kubernetes.io/hostname"]
    claim = resource_claim(
        claim_name,
        node=on,
        owner_pod=name,
        spec=share_claim_spec(share),
        namespace=pod["metadata"]["namespace"],
        results=[result(share.device, share.milli, share.memory_mib, pool=on)] if allocated else None,
        reserved_for=(name,) if allocated else (),
    )
    if allocated and not pod["spec"].get("nodeName"):
        pod = bound(pod, on)
    return pod, claim
