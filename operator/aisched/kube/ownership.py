"""Whether an object found under a name the operator creates is the one it would have made.

A create that answers AlreadyExists is success only when the object there is ours: an earlier
attempt of ours made it (a retry, a restart, another replica that led before). It is ours when
it names the owner we create it with (the ownerReference's uid) AND asks what we would ask:

- a ResourceClaimTemplate: the same claim spec, compared as it means (`claims.same_claim_spec`);
- a Pod: our labels, node selector, claims and every container's resources;
- a Service: its selector and cluster IP (the gang's rendezvous).

A tenant may name our job as owner (an ownerReference needs no right on its owner without
blockOwnerDeletion), so the owner alone proves nothing. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from aisched.kube import labels
from aisched.kube.claims import same_claim_spec
from aisched.kube.quantities import parse_quantity


def names_owner(existing: dict[str, Any], built: dict[str, Any]) -> bool:
    """EXISTING names the owner BUILT is made with (the uid of its first ownerReference)."""
    owners = built["metadata"].get("ownerReferences") or []
    return bool(owners) and owners[0]["uid"] in _owner_uids(existing)


def is_own(existing: dict[str, Any], built: dict[str, Any]) -> bool:
    """EXISTING, found where BUILT was to be created, is the operator's: its owner and what it asks."""
    if not names_owner(existing, built):
        return False
    kind = built["kind"]
    if kind == "ResourceClaimTemplate":
        return same_claim_spec(_mapping(_mapping(existing.get("spec")).get("spec")), built["spec"]["spec"])
    if kind == "Pod":
        return _pod_meaning(existing) == _pod_meaning(built)
    if kind == "Service":
        return _service_meaning(existing) == _service_meaning(built)
    return False


def _owner_uids(obj: dict[str, Any]) -> set[str]:
    refs = _mapping(obj.get("metadata")).get("ownerReferences")
    return {str(ref.get("uid")) for ref in refs if isinstance(ref, dict)} if isinstance(refs, list) else set()


def _pod_meaning(pod: dict[str, Any]) -> tuple[Any, ...]:
    metadata, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    ours = {k: v for k, v in _mapping(metadata.get("labels")).items() if str(k).startswith(labels.PREFIX + "/")}
    containers = [
        (c.get("name"), _resources(c)) for key in ("initContainers", "containers") for c in _items(spec.get(key))
    ]
    return ours, spec.get("nodeSelector") or {}, spec.get("resourceClaims") or [], spec.get("nodeName"), containers


def _resources(container: dict[str, Any]) -> tuple[Any, ...]:
    """A container's resources as they mean: the API server copies limits into unset requests."""
    resources = _mapping(container.get("resources"))
    limits = {k: parse_quantity(v) for k, v in _mapping(resources.get("limits")).items()}
    requests = {**limits, **{k: parse_quantity(v) for k, v in _mapping(resources.get("requests")).items()}}
    return limits, requests, resources.get("claims") or []


def _service_meaning(service: dict[str, Any]) -> tuple[Any, ...]:
    spec = _mapping(service.get("spec"))
    return spec.get("selector") or {}, spec.get("clusterIP") == "None"


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
