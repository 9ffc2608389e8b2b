"""The scheduling cycle asks Karpenter for NodeClaims for whole waiting gangs, and withdraws the unneeded.

The controller runs with a provisioner over the instance types hack/karpenter gives the local
cluster's Karpenter, and a KubeClient double that records NodeClaims created and deleted.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from aisched.api.common import CapacityType
from aisched.controller.cluster_state import ClusterState
from aisched.controller.provisioning import FOR_LABEL, NodeProvisioner
from aisched.controller.training import TrainingJobController
from aisched.kube.inventory import Inventory
from aisched.metrics import Metrics
from aisched.policy.carbon import Forecast, IntensityPoint
from aisched.policy.interruptions import CapacityPool, PoolHistory
from aisched.policy.provisioning import NodeRequest, offerings_from_instance_types
from aisched.settings import ProvisioningSettings, Settings
from aisched.sources.carbon import CachedCarbonSource
from tests.builders import a_queue, a_training_job
from tests.unit.controller.kube_double import KubeDouble

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "NVIDIA-H100-80GB-HBM3"
INSTANCE_TYPES = Path(__file__).resolve().parents[3] / "hack" / "karpenter" / "instance-types.json"


class DirtyForAnHour:
    """A grid dirty for the next hour and clean after: a deferrable job's planned start is an hour on."""

    name = "File"

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        step = timedelta(minutes=30)
        return Forecast(region, T0, step, tuple(500.0 if i < 2 else 50.0 for i in range(int((end - T0) / step) + 2)))

    async def current(self, region: str) -> IntensityPoint:
        return IntensityPoint(T0, 500.0)


def a_controller(kube: KubeDouble, quota: int = 1_000_000, *, carbon: bool = False) -> TrainingJobController:
    settings = Settings(provisioning=ProvisioningSettings(enabled=True, instance_types_file=INSTANCE_TYPES))
    inventory = Inventory(settings)
    source = None
    if carbon:
        source = CachedCarbonSource(
            DirtyForAnHour(), ttl=timedelta(minutes=5), max_stale=timedelta(hours=1), clock=lambda: T0
        )
    controller = TrainingJobController(
        settings,
        kube.client,
        ClusterState(inventory),
        metrics=Metrics(CollectorRegistry(), process_metrics=False),
        provisioner=NodeProvisioner.from_settings(settings, kube.client, inventory),
        carbon=source,
        clock=lambda: T0,
    )
    controller.queue_seen(a_queue("default", nominal_gpus=quota).obj())
    return controller


def a_job(name: str, replicas: int = 4, **spec: Any) -> dict[str, Any]:
    builder = a_training_job(name).namespace("ns").set("replicas", replicas).set("gpusPerReplica", 8)
    builder.set("gpuType", H100)
    for path, value in spec.items():
        builder.set(path, value)
    obj = builder.obj()
    obj["metadata"]["creationTimestamp"] = T0.isoformat()
    return obj


def with_claims(
    kube: KubeDouble, claims: list[dict[str, Any]], pools: list[dict[str, Any]] | None = None
) -> KubeDouble:
    kube.allow("patch_status", "post_event", "create_cluster_object", "delete_cluster_object")

    async def listed(group: str, version: str, plural: str, selector: str) -> list[dict[str, Any]]:
        if plural == "nodepools":
            assert (group, version, selector) == ("karpenter.sh", "v1", "")
            return pools or []
        assert (group, version, plural, selector) == ("karpenter.sh", "v1", "nodeclaims", "karpenter.sh/nodepool")
        return claims

    return kube.answer("list_cluster_objects", listed)


def created(kube: KubeDouble) -> list[dict[str, Any]]:
    return [args[3] for args in kube.calls("create_cluster_object")]


async def cycle(controller: TrainingJobController) -> None:
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))


async def test_a_gang_no_node_holds_gets_all_its_nodes_in_one_zone_on_spot(kube: KubeDouble) -> None:
    controller = a_controller(with_claims(kube, []))
    controller.job_seen(a_job("big", spot={"policy": "Prefer"}))
    controller.job_seen(a_job("steady", replicas=2))  # spot policy Never
    await cycle(controller)
    claims = [c for c in created(kube) if c["metadata"]["annotations"][FOR_LABEL] == "ns/big"]
    assert len(claims) == 4
    requirements = [{r["key"]: r["values"] for r in c["spec"]["requirements"]} for c in claims]
    assert {r["topology.kubernetes.io/zone"][0] for r in requirements} == {"us-east-1a"}
    assert {r["karpenter.sh/capacity-type"][0] for r in requirements} == {"spot"}
    assert {r["node.kubernetes.io/instance-type"][0] for r in requirements} == {"p5.48xlarge"}
    assert {c["metadata"]["annotations"][FOR_LABEL] for c in claims} == {"ns/big"}
    assert {c["metadata"]["labels"]["karpenter.sh/nodepool"] for c in claims} == {"gpu-spot"}
    assert all(c["spec"]["resources"]["requests"] == {"nvidia.com/gpu": "8"} for c in claims)
    steady = [c for c in created(kube) if c["metadata"]["annotations"][FOR_LABEL] == "ns/steady"]
    assert len(steady) == 2
    assert {c["metadata"]["labels"]["karpenter.sh/nodepool"] for c in steady} == {"gpu-on-demand"}
    kube.assert_only_expected_calls()


async def test_a_gang_over_its_quota_gets_no_nodes(kube: KubeDouble) -> None:
    controller = a_controller(with_claims(kube, []), quota=16)
    controller.job_seen(a_job("big"))
    await cycle(controller)
    assert created(kube) == [] and kube.calls("delete_cluster_object") == []
    kube.assert_only_expected_calls()


async def test_nodes_coming_are_not_asked_for_again_and_unneeded_ones_are_withdrawn(kube: KubeDouble) -> None:
    controller = a_controller(kube)
    provisioner = controller.provisioner
    assert provisioner is not None
    coming = []
    for i in range(4):
        obj = provisioner.node_claim(_request("ns/big"))
        obj["metadata"]["name"] = f"gpu-spot-{i}"
        coming.append(obj)
    stale = provisioner.node_claim(_request("ns/gone"))
    stale["metadata"]["name"] = "gpu-spot-stale"
    with_claims(kube, [*coming, stale])
    controller.job_seen(a_job("big", spot={"policy": "Prefer"}))
    await cycle(controller)
    assert created(kube) == []
    assert [args[3] for args in kube.calls("delete_cluster_object")] == ["gpu-spot-stale"]
    kube.assert_only_expected_calls()


async def test_a_carbon_deferred_job_gets_no_nodes_before_its_planned_start(kube: KubeDouble) -> None:
    controller = a_controller(with_claims(kube, []), carbon=True)
    controller.job_seen(
        a_job("green", carbon={"deferrable": True, "maxDelaySeconds": 86400}, expectedDurationSeconds=1800)
    )
    await cycle(controller)
    assert controller.jobs[("ns", "green")]["status"]["phase"] == "Deferred"
    assert created(kube) == []
    kube.assert_only_expected_calls()


async def test_spot_nodes_go_to_the_zone_least_likely_to_take_them_back(kube: KubeDouble) -> None:
    controller = a_controller(with_claims(kube, []))
    # us-east-1a, the cheapest, lost spot nodes about once a node-hour: us-east-1b, 5% dearer, wins.
    risky = CapacityPool(H100, "us-east-1a", CapacityType.SPOT)
    controller.pools.histories[risky] = PoolHistory(interruptions=100, exposure_s=100 * 3600.0)
    controller.job_seen(a_job("big", spot={"policy": "Prefer"}))
    await cycle(controller)
    zones = {r["values"][0] for c in created(kube) for r in c["spec"]["requirements"] if r["key"].endswith("/zone")}
    assert zones == {"us-east-1b"}
    # The queue depth says where the nodes are coming, for an autoscaler of one's own.
    labels = {"gpu_type": H100, "zone": "us-east-1b", "capacity_type": "Spot"}
    assert controller.metrics.registry.get_sample_value("aisched_pending_gpus", labels) == 32
    kube.assert_only_expected_calls()


async def test_no_nodes_beyond_a_node_pools_limit_counting_every_claim_of_the_pool(kube: KubeDouble) -> None:
    controller = a_controller(kube)
    pools = [
        {"metadata": {"name": "gpu-spot"}, "spec": {"limits": {"nvidia.com/gpu": "40", "cpu": "1k"}}},
        {"metadata": {"name": "gpu-on-demand"}, "spec": {"limits": {"cpu": "1k"}}},  # no GPU limit
    ]
    # Karpenter's own claim in the spot pool, launched with 8 GPUs: 32 GPUs of room are left.
    theirs = {
        "metadata": {"name": "gpu-spot-x", "labels": {"karpenter.sh/nodepool": "gpu-spot"}},
        "spec": {"requirements": []},
        "status": {"capacity": {"nvidia.com/gpu": "8"}},
    }
    with_claims(kube, [theirs], pools)
    controller.job_seen(a_job("fits", spot={"policy": "Prefer"}))  # 4 x 8 on spot: 32
    controller.job_seen(a_job("over", spot={"policy": "Prefer"}))  # 32 more: over the limit
    controller.job_seen(a_job("steady", replicas=8))  # on-demand, a pool without a GPU limit
    await cycle(controller)
    gangs = [c["metadata"]["annotations"][FOR_LABEL] for c in created(kube)]
    assert sorted(set(gangs)) == ["ns/fits", "ns/steady"]
    assert gangs.count("ns/fits") == 4 and gangs.count("ns/steady") == 8
    kube.assert_only_expected_calls()


def _request(gang: str) -> NodeRequest:
    data = json.loads(INSTANCE_TYPES.read_text())
    offering = next(
        o
        for o in offerings_from_instance_types(data, "nvidia.com/gpu", "nvidia.com/gpu.product")
        if o.instance_type == "p5.48xlarge" and o.zone == "us-east-1a" and o.capacity_type == "Spot"
    )
    return NodeRequest(gang, offering, 1)
