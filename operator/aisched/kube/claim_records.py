"""What the inventory keeps of each DRA ResourceClaim, and which of their GPUs each pod holds.

A pod holds the GPUs of a claim only as the API server says it does: the claim is allocated
(`status.allocation.devices.results`, written by kube-scheduler) and reserved for that pod
(`status.reservedFor`, idem). The claims a pod names (`spec.resourceClaims`), how many and
under which names, count for nothing: a pod naming eight claims that do not exist holds no
GPU, and one claim with `allocationMode: All` holds every GPU the allocation lists. Only devices
of the GPU driver count (`kube.claims.DRIVER`), each on the node of its allocation, and a device
allocated by consumable capacity counts for the compute it consumes (in thousandths of the GPU,
as its ResourceSlice publishes it: `aisched.testing.devices`).

Tenants may create claims and edit their own pods' annotations, but not the status of either
(`edit` grants no `*/status`), so nothing here reads what a tenant writes. Records are slim: a
cluster's claims are as many as its DRA pods.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from aisched.kube.claims import DRIVER, MILLI, PodShare, same_claim_spec, share_claim_spec
from aisched.kube.quantities import parse_quantity
from aisched.kube.records import ClaimedDevice, PodKey, PodRecord
from aisched.kube.versions import VersionLedger

ClaimKey = tuple[str, str]
"""(namespace, name) of a ResourceClaim."""

_MIB = Decimal(1024 * 1024)
_INDEX_SELECTOR = re.compile(rf"device\.attributes\['{re.escape(DRIVER)}'\]\.index == ([0-9]{{1,4}})")
MAX_DEVICES_PER_CLAIM = 4096  # no node has more GPUs; a larger allocation is a forged object's


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    namespace: str
    name: str
    devices: tuple[tuple[str | None, ClaimedDevice], ...] = ()
    """The GPUs its allocation names: (node, device), the node None where the allocation names none."""
    reserved_for: frozenset[str] = frozenset()
    """Names of the pods it is reserved for (in its namespace)."""
    owner_pod: str | None = None
    """The pod that controls it (kube-controller-manager makes a template's claim owned by its pod)."""
    asked: PodShare | None = None
    """Not allocated yet: the share it asks, where its spec is exactly what the operator's template asks."""
    resource_version: str = field(default="", compare=False)

    @property
    def allocated(self) -> bool:
        return bool(self.devices)


def read_claim(obj: dict[str, Any], driver: str = DRIVER) -> ClaimRecord:
    """OBJ (a resource.k8s.io/v1 ResourceClaim) as the inventory keeps it; odd fields count as absent."""
    metadata, spec, status = obj["metadata"], _mapping(obj.get("spec")), _mapping(obj.get("status"))
    allocation = _mapping(status.get("allocation"))
    node = _allocation_node(_mapping(allocation.get("nodeSelector")))
    devices = []
    for result in _items(_mapping(allocation.get("devices")).get("results"))[:MAX_DEVICES_PER_CLAIM]:
        device = _text(result.get("device"))
        if result.get("driver") != driver or device is None:
            continue
        consumed = _mapping(result.get("consumedCapacity"))
        milli = _milli(consumed.get("compute"))
        on = node or _text(result.get("pool"))  # a node-local driver names its pool after the node
        devices.append((sys.intern(on) if on else None, ClaimedDevice(device, milli, _mib(consumed.get("memory")))))
    reserved = frozenset(
        name
        for consumer in _items(status.get("reservedFor"))
        if consumer.get("resource") == "pods" and not consumer.get("apiGroup") and (name := _text(consumer.get("name")))
    )
    owner = next(
        (
            _text(ref.get("name"))
            for ref in _items(metadata.get("ownerReferences"))
            if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" and ref.get("controller") is True
        ),
        None,
    )
    return ClaimRecord(
        namespace=sys.intern(metadata["namespace"]),
        name=metadata["name"],
        devices=tuple(devices),
        reserved_for=reserved,
        owner_pod=owner,
        asked=None if devices else _asked_share(spec),
        resource_version=_text(metadata.get("resourceVersion")) or "",
    )


def _asked_share(spec: dict[str, Any]) -> PodShare | None:
    """The share a claim made from the operator's template asks; None for any other claim.

    Read from the spec alone, which nobody may change once the claim exists, and only where the
    spec is exactly the one `share_claim_spec` makes for that share.
    """
    requests = _items(_mapping(spec.get("devices")).get("requests"))
    exactly = _mapping(requests[0].get("exactly")) if len(requests) == 1 else {}
    selectors = _items(exactly.get("selectors"))
    expression = _text(_mapping(selectors[0].get("cel")).get("expression")) if len(selectors) == 1 else None
    match = _INDEX_SELECTOR.fullmatch(expression or "")
    asked = _mapping(_mapping(exactly.get("capacity")).get("requests"))
    compute, memory = parse_quantity(asked.get("compute")), parse_quantity(asked.get("memory"))
    if match is None or compute is None or memory is None or not 0 < compute <= MILLI or compute % 1 or memory % _MIB:
        return None
    share = PodShare(f"gpu-{int(match[1])}", int(compute), int(memory / _MIB))
    return share if same_claim_spec(spec, share_claim_spec(share)) else None


def with_claims(pod: PodRecord, claims: Mapping[ClaimKey, ClaimRecord]) -> PodRecord:
    """POD with what its claims hold: the operator's share (its own claim), and the GPUs of the others.

    A claim counts only when it is allocated and reserved for the pod, and only for its devices
    on the pod's node. Before kube-scheduler allocates the share claim of a pod of ours that it
    has not bound yet, the annotation the operator wrote stands for it (it is promised), but
    only while it is what the claim asks, or while the pod is still gated and its claim not made.
    """
    node = pod.gpu_node
    share, claimed = None, []
    if pod.share_claim is not None or pod.share_hint is not None:
        claim = claims.get((pod.namespace, pod.share_claim)) if pod.share_claim is not None else None
        if claim is not None and claim.allocated:
            held = _held_on(claim, pod, node)
            if held:  # one device is the share; any more (a template not the operator's) are held whole
                share = PodShare(held[0].device, held[0].milli, held[0].memory_mib)
                claimed.extend(held[1:])
        elif pod.node is None and pod.share_hint is not None:
            if claim is None:
                share = pod.share_hint if pod.gated else None  # made a moment ago, its claim not seen yet
            elif claim.owner_pod == pod.name and claim.asked == pod.share_hint:
                share = pod.share_hint
    claimed.extend(
        device
        for name in pod.claim_names
        if (claim := claims.get((pod.namespace, name))) is not None
        for device in _held_on(claim, pod, node)
    )
    if share == pod.share and tuple(claimed) == pod.claimed:
        return pod
    return replace(pod, share=share, claimed=tuple(claimed))


def _held_on(claim: ClaimRecord, pod: PodRecord, node: str | None) -> list[ClaimedDevice]:
    if pod.name not in claim.reserved_for or node is None:
        return []
    return [device for on, device in claim.devices if on in (node, None)]


def _allocation_node(selector: dict[str, Any]) -> str | None:
    """The one node an allocation's node selector names (kube-scheduler's `metadata.name In [node]`)."""
    names = {
        value
        for term in _items(selector.get("nodeSelectorTerms"))
        for match in _items(term.get("matchFields"))
        if match.get("key") == "metadata.name" and match.get("operator") == "In"
        for value in _strings(match.get("values"))
    }
    return names.pop() if len(names) == 1 else None


def _milli(value: Any) -> int:
    """Thousandths of its GPU a result's consumed compute is; a whole GPU when it consumes none by amount."""
    amount = parse_quantity(value)
    if amount is None or not amount.is_finite() or amount <= 0:
        return MILLI
    return min(MILLI, max(1, int(amount.to_integral_value(rounding="ROUND_CEILING"))))


def _mib(value: Any) -> int:
    amount = parse_quantity(value)
    if amount is None or not amount.is_finite() or amount <= 0:
        return 0
    return min(10**9, int((amount / _MIB).to_integral_value(rounding="ROUND_CEILING")))


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass
class ClaimBook:
    """The claims the inventory knows, and which pods name each: a claim's change is its pods' change."""

    claims: dict[ClaimKey, ClaimRecord] = field(default_factory=dict)
    _versions: VersionLedger[ClaimKey] = field(default_factory=VersionLedger)
    _named_by: dict[ClaimKey, set[PodKey]] = field(default_factory=dict)

    def put(self, record: ClaimRecord) -> bool:
        """Keep RECORD unless a newer copy is held; True when what is held changed."""
        key = (record.namespace, record.name)
        if self._versions.is_stale(key, record.resource_version):
            return False
        self._versions.saw(key, record.resource_version)
        changed = self.claims.get(key) != record
        self.claims[key] = record
        return changed

    def delete(self, key: ClaimKey, resource_version: str | None) -> bool:
        """The claim's deletion; True when a claim was held and the event is not older than it."""
        if self._versions.is_stale(key, resource_version):
            return False
        self._versions.deleted(key, resource_version)
        return self.claims.pop(key, None) is not None

    def begin_relist(self, list_version: str) -> None:
        self._versions.begin_relist(list_version)

    def absent(self, listed: set[ClaimKey], list_version: str) -> list[ClaimKey]:
        return list(self._versions.absent(listed, list_version))

    def named_by(self, key: ClaimKey) -> list[PodKey]:
        return sorted(self._named_by.get(key, ()))

    def index(self, pod: PodRecord, *, add: bool) -> None:
        """Remember (ADD) or forget which claims POD names."""
        names = (*pod.claim_names, *((pod.share_claim,) if pod.share_claim else ()))
        for name in names:
            key = (pod.namespace, name)
            pods = self._named_by.setdefault(key, set())
            if add:
                pods.add((pod.namespace, pod.name))
            else:
                pods.discard((pod.namespace, pod.name))
                if not pods:
                    del self._named_by[key]
