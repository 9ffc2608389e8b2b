"""Carries out `policy.provisioning`'s plan: Karpenter NodeClaims for whole waiting gangs.

Why NodeClaims and not placeholder pods (KAI's node-scale-adjuster, KEDA-scaled Deployments):
the operator decides the zone, the instance type and how many nodes, for the whole gang at
once, and Karpenter launches exactly those; nothing waits on Karpenter's batching window to put
a gang's nodes together. Placeholder pods would hold GPUs in the operator's own ledger (which
counts every pod's GPUs) and in kube-scheduler's until preempted, and a withdrawn request would
leave its node until consolidation; a NodeClaim deleted is a node not launched.

Each claim carries the label `aisched.io/provisioned-for` (a hash: label values are short) and
the annotation of the same name with the job's namespace/name; it belongs to the NodePool of its
capacity type, so the pool's disruption settings apply to its node. Karpenter checks a pool's
limits only for NodeClaims it makes itself: the plan keeps ours within them (`pool_headroom`). A claim no waiting
gang needs is deleted while its node boots. Once the node is up it is left to Karpenter: under a
running gang its workers carry `karpenter.sh/do-not-disrupt`; empty, Karpenter's consolidation
takes it (tainting it first, so that the scheduler places nothing there meanwhile). Deleting an
up node ourselves would race the cycle that places a gang on it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from aisched.api.common import CapacityType
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.kube.quantities import parse_quantity
from aisched.policy.provisioning import (
    CAPACITY_TYPE_LABEL,
    ZONE_LABEL,
    Claim,
    FleetOutlook,
    NodeRequest,
    Offering,
    PoolHeadroom,
    ProvisioningPlan,
    offerings_from_instance_types,
    offers,
    plan_provisioning,
)
from aisched.policy.scheduler import JobRequest, ScheduleResult
from aisched.settings import Settings

log = logging.getLogger(__name__)
GROUP, VERSION, PLURAL = "karpenter.sh", "v1", "nodeclaims"
FOR_LABEL = "aisched.io/provisioned-for"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
KARPENTER_CAPACITY = {CapacityType.SPOT: "spot", CapacityType.ON_DEMAND: "on-demand"}


def gang_label(key: str) -> str:
    """A label value for a job key (namespace/name can be 317 characters; a label value 63)."""
    return hashlib.sha256(key.encode()).hexdigest()[:40]


class NodeProvisioner:
    def __init__(self, settings: Settings, kube: KubeClient, inventory: Inventory, offerings: list[Offering]) -> None:
        self.settings, self.kube, self.inventory, self.offerings = settings, kube, inventory, offerings
        self.boot = timedelta(seconds=settings.provisioning.boot_seconds)
        self.topology = settings.topology.resolved()

    @classmethod
    def from_settings(cls, settings: Settings, kube: KubeClient, inventory: Inventory) -> NodeProvisioner:
        """Raises (at start-up) when provisioning is on without a readable instance types file."""
        path = settings.provisioning.instance_types_file
        if path is None:
            raise ValueError("AISCHED_PROVISIONING_ENABLED needs AISCHED_PROVISIONING_INSTANCE_TYPES_FILE")
        data = json.loads(path.read_text())
        offerings = offerings_from_instance_types(data, settings.gpu_resource, settings.gpu_product_label)
        if not offerings:
            raise ValueError(f"{path}: no instance type with {settings.gpu_resource}")
        return cls(settings, kube, inventory, offerings)

    def offers(self, capacity_type: CapacityType, gpu_type: str | None) -> bool:
        """Whether nodes of this capacity type (and product) can be asked for: the spot decision's
        "spot available" when the fleet can grow."""
        return offers(self.offerings, capacity_type, gpu_type)

    def spot_offerings(self) -> set[tuple[str | None, str]]:
        """(GPU product, zone) of every spot offering: the pools whose interruption rates the plan weighs."""
        return {(o.gpu_product, o.zone) for o in self.offerings if o.capacity_type == CapacityType.SPOT}

    async def after_cycle(
        self,
        result: ScheduleResult,
        jobs: Iterable[JobRequest],
        held: set[str],
        now: datetime,
        spot_interruptions: Mapping[tuple[str | None, str], float] | None = None,
    ) -> ProvisioningPlan:
        """Ask for and withdraw nodes after a scheduling cycle; HELD: nodes some gang's placement names;
        SPOT_INTERRUPTIONS: per node-second, by (GPU product, zone) (`kube.pools`)."""
        # Every pool's NodeClaims, Karpenter's own among them: the pools' limits count them all.
        objects = await self.kube.list_cluster_objects(GROUP, VERSION, PLURAL, NODEPOOL_LABEL)
        ours = [obj for obj in objects if FOR_LABEL in ((obj.get("metadata") or {}).get("labels") or {})]
        claims = [c for c in (self._claim(obj, held) for obj in ours) if c is not None]
        pools = await self.kube.list_cluster_objects(GROUP, VERSION, "nodepools", "")
        # An interruption costs a gang new nodes and its restart (its save on notice keeps its work).
        loss = self.boot + timedelta(seconds=self.settings.restart_overhead_seconds)
        outlook = FleetOutlook(
            headroom=pool_headroom(pools, objects, self.settings.gpu_resource, self._pool_of()),
            spot_interruptions=dict(spot_interruptions or {}),
            interruption_loss=loss,
        )
        plan = plan_provisioning(
            result, jobs, self.offerings, claims, now=now, boot=self.boot, topology=self.topology, outlook=outlook
        )
        for request in plan.create:
            log.info(
                "%s: asking for %d %s node(s) on %s in %s",
                request.gang,
                request.count,
                request.offering.instance_type,
                request.offering.capacity_type,
                request.offering.zone,
            )
            for _ in range(request.count):
                await self.kube.create_cluster_object(GROUP, VERSION, PLURAL, self.node_claim(request))
        for name in plan.withdraw:
            log.info("withdrawing NodeClaim %s: no waiting gang needs it", name)
            await self.kube.delete_cluster_object(GROUP, VERSION, PLURAL, name)
        return plan

    def _pool_of(self) -> dict[CapacityType, str]:
        named = self.settings.provisioning.node_pools
        return {kind: named[kind.value] for kind in CapacityType if named.get(kind.value)}

    def _claim(self, obj: dict[str, Any], held: set[str]) -> Claim | None:
        """One of our NodeClaims as the plan sees it; None for one we cannot read (left alone)."""
        meta = obj.get("metadata") or {}
        gang = (meta.get("annotations") or {}).get(FOR_LABEL)
        requirements = {r.get("key"): r.get("values") or [] for r in (obj.get("spec") or {}).get("requirements") or ()}
        capacity = {v: k for k, v in KARPENTER_CAPACITY.items()}.get(_one(requirements.get(CAPACITY_TYPE_LABEL)) or "")
        instance_type = _one(requirements.get(INSTANCE_TYPE_LABEL))
        zone = _one(requirements.get(ZONE_LABEL))
        if not (gang and capacity and instance_type and zone) or meta.get("deletionTimestamp"):
            return None
        node = ((obj.get("status") or {}).get("nodeName")) or ""
        # GPUs held there, not any pod: a cloud's DaemonSets run on every node, and finished workers
        # hold nothing (they stay until their report is read).
        occupied = bool(node) and (node in held or self.inventory.used_gpus(node) > 0)
        gpus = next((o.gpus for o in self.offerings if o.instance_type == instance_type), 0)
        return Claim(str(meta.get("name")), gang, instance_type, zone, capacity, gpus, occupied, registered=bool(node))

    def node_claim(self, request: NodeRequest) -> dict[str, Any]:
        offering, provisioning = request.offering, self.settings.provisioning
        pool = provisioning.node_pools.get(offering.capacity_type.value, "")

        def exactly(key: str, value: str) -> dict[str, Any]:
            return {"key": key, "operator": "In", "values": [value]}

        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeClaim",
            "metadata": {
                "generateName": f"{pool or 'aisched'}-",
                "labels": {FOR_LABEL: gang_label(request.gang), NODEPOOL_LABEL: pool},
                "annotations": {FOR_LABEL: request.gang},
            },
            "spec": {
                "nodeClassRef": {
                    "group": provisioning.node_class_group,
                    "kind": provisioning.node_class_kind,
                    "name": provisioning.node_class_name,
                },
                "requirements": [
                    exactly(INSTANCE_TYPE_LABEL, offering.instance_type),
                    exactly(ZONE_LABEL, offering.zone),
                    exactly(CAPACITY_TYPE_LABEL, KARPENTER_CAPACITY[offering.capacity_type]),
                    exactly(NODEPOOL_LABEL, pool),
                ],
                "resources": {"requests": {self.settings.gpu_resource: str(offering.gpus)}},
            },
        }


def pool_headroom(
    pools: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    gpu_resource: str,
    pool_of: Mapping[CapacityType, str],
) -> PoolHeadroom:
    """GPUs each NodePool's `spec.limits` still allows, less the GPUs of every NodeClaim of the pool
    (its capacity once launched, else what it asks for), deleting ones included until they are gone.
    A pool with no GPU limit, or one we cannot read, gets no figure: no limit of ours."""
    limits: dict[str, Decimal] = {}
    for pool in pools:
        name = (pool.get("metadata") or {}).get("name")
        limit = parse_quantity(((pool.get("spec") or {}).get("limits") or {}).get(gpu_resource))
        if isinstance(name, str) and limit is not None:
            limits[name] = limit
    used: dict[str, Decimal] = {}
    for claim in claims:
        name = ((claim.get("metadata") or {}).get("labels") or {}).get(NODEPOOL_LABEL)
        if name not in limits:
            continue
        capacity = ((claim.get("status") or {}).get("capacity") or {}).get(gpu_resource)
        requested = (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(gpu_resource)
        gpus = parse_quantity(capacity if capacity is not None else requested) or Decimal(0)
        used[name] = used.get(name, Decimal(0)) + max(gpus, Decimal(0))
    room = {name: max(0, int(limit - used.get(name, Decimal(0)))) for name, limit in limits.items()}
    return PoolHeadroom(room, dict(pool_of))


def _one(values: list[str] | None) -> str | None:
    return values[0] if values and len(values) == 1 else None
