"""MIG on the live cluster: pods pinned to a node with a free instance, and a repartition only of an idle node."""

from __future__ import annotations

from typing import Any

import pytest

from aisched.api.sharing import GpuShare
from aisched.controller.mig import MigInstanceUnavailableError, MigPartitions
from aisched.controller.sharing import GpuShares, ShareDoesNotFitError
from aisched.kube.inventory import Inventory
from aisched.kube.mig_nodes import CORDONED_ANNOTATION
from aisched.policy.queueing import QueueQuota
from aisched.policy.sharing.mig_configs import CONFIG_LABEL, STATE_LABEL
from aisched.settings import Settings

OWNER = {"apiVersion": "aisched.io/v1alpha1", "kind": "TrainingJob", "name": "j", "uid": "u"}
OURS = {"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "j"}
H100 = "NVIDIA-H100-80GB-HBM3"


def _node(
    name: str, config: str | None = None, state: str = "success", mig: dict[str, int] | None = None
) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": H100, "nvidia.com/gpu.count": "2"}
    if config is not None:
        labels |= {CONFIG_LABEL: config, STATE_LABEL: state}
    mig = mig or {}
    allocatable = {"nvidia.com/gpu": "0" if mig else "2"} | {f"nvidia.com/mig-{p}": str(n) for p, n in mig.items()}
    return {
        "metadata": {"name": name, "labels": labels, "resourceVersion": "1"},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _pod(name: str, node: str, **limits: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "labels": dict(OURS)},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "c", "image": "i", "resources": {"limits": limits}}],
        },
        "status": {"phase": "Running"},
    }


def _inventory(*nodes: dict[str, Any]) -> Inventory:
    inventory = Inventory(Settings())
    inventory.replace_nodes(list(nodes))
    return inventory


class Patches:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        self.sent.append((name, patch))


def test_a_mig_pod_is_pinned_to_a_node_with_a_free_instance_and_asks_for_it() -> None:
    inventory = _inventory(_node("whole"), _node("mig", "all-1g.10gb", mig={"1g.10gb": 14}))
    inventory.upsert_pod(_pod("other", "mig", **{"nvidia.com/mig-1g.10gb": "13"}))
    shares = GpuShares(inventory)
    _, pods = shares.shared_pods(GpuShare(mig_profile="1g.10gb"), [_pod("w-0", "whole")], OWNER)
    assert pods[0]["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "mig"
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    # The last instance was handed out before the watch shows the pod: none is left.
    with pytest.raises(ShareDoesNotFitError, match=r"1 x 1g\.10gb asked, 0 free"):
        shares.shared_pods(GpuShare(mig_profile="1g.10gb"), [_pod("w-1", "whole")], OWNER)
    assert shares.mig.waiting == {"1g.10gb": 1}
    shares.forget(pods)  # not created after all
    _, again = shares.shared_pods(GpuShare(mig_profile="1g.10gb"), [_pod("w-1", "whole")], OWNER)
    assert again[0]["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "mig"


@pytest.mark.asyncio
async def test_an_idle_node_is_cordoned_relabelled_and_uncordoned_once_applied() -> None:
    inventory = _inventory(_node("busy", "all-1g.10gb", mig={"1g.10gb": 14}), _node("idle", "all-1g.10gb"))
    inventory.upsert_pod(_pod("one", "busy", **{"nvidia.com/mig-1g.10gb": "1"}))
    mig, kube = MigPartitions(inventory), Patches()
    with pytest.raises(MigInstanceUnavailableError, match=r"3g\.40gb"):  # 4 x 3g fill the idle node's 2 GPUs
        mig.place("3g.40gb", [_pod(f"w-{i}", "busy") for i in range(4)])
    await mig.step(kube)
    assert kube.sent == [
        ("idle", {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: "all-3g.40gb"}}})
    ]
    await mig.step(kube)
    assert kube.sent[-1] == ("idle", {"metadata": {"labels": {CONFIG_LABEL: "all-3g.40gb", STATE_LABEL: "pending"}}})
    await mig.step(kube)  # the watch still shows the old config: wait
    pending = _node("idle", "all-3g.40gb", "pending")
    pending["metadata"]["resourceVersion"] = "2"
    inventory.upsert_node(pending)
    await mig.step(kube)
    assert len(kube.sent) == 2, "nothing until the MIG manager reports the config applied"
    applied = _node("idle", "all-3g.40gb", mig={"3g.40gb": 4})
    applied["metadata"]["resourceVersion"] = "3"
    inventory.upsert_node(applied)
    await mig.step(kube)
    assert kube.sent[-1] == (
        "idle",
        {"spec": {"unschedulable": False}, "metadata": {"annotations": {CORDONED_ANNOTATION: None}}},
    )
    assert all(name == "idle" for name, _ in kube.sent), "the busy node is never touched"
    placed = mig.place("3g.40gb", [_pod("w-0", "busy")])
    assert placed[0]["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "idle"


@pytest.mark.asyncio
async def test_a_node_in_use_by_the_time_it_would_be_relabelled_is_uncordoned_and_left_as_it_is() -> None:
    inventory = _inventory(_node("n", "all-1g.10gb", mig={"1g.10gb": 14}))
    mig, kube = MigPartitions(inventory), Patches()
    mig.asked({"3g.40gb": 4})
    await mig.step(kube)
    assert kube.sent[-1][1]["spec"] == {"unschedulable": True}
    inventory.upsert_pod(_pod("late", "n", **{"nvidia.com/gpu": "1"}))  # bound just before the cordon
    await mig.step(kube)
    assert kube.sent[-1][1]["spec"] == {"unschedulable": False}
    assert not any(CONFIG_LABEL in patch.get("metadata", {}).get("labels", {}) for _, patch in kube.sent)


@pytest.mark.asyncio
async def test_a_restarted_operator_finishes_the_repartition_it_left_or_uncordons() -> None:
    applying = _node("applying", "all-3g.40gb", "pending")
    stopped_early = _node("stopped-early", "all-1g.10gb", mig={"1g.10gb": 14})
    for node, config in ((applying, "all-3g.40gb"), (stopped_early, "all-2g.20gb")):
        node["metadata"]["annotations"] = {CORDONED_ANNOTATION: config}
        node["spec"] = {"unschedulable": True}
    inventory = _inventory(applying, stopped_early)
    mig, kube = MigPartitions(inventory), Patches()
    await mig.step(kube)  # the MIG manager is still applying: wait for it
    assert kube.sent == [] and mig.in_flight is not None and mig.in_flight.node == "applying"
    done = _node("applying", "all-3g.40gb", mig={"3g.40gb": 4})
    done["metadata"] |= {"resourceVersion": "2", "annotations": {CORDONED_ANNOTATION: "all-3g.40gb"}}
    inventory.upsert_node(done)
    await mig.step(kube)
    await mig.step(kube)  # cordoned before its label was set: nothing is coming, so uncordoned
    assert [(name, patch["spec"]) for name, patch in kube.sent] == [
        ("applying", {"unschedulable": False}),
        ("stopped-early", {"unschedulable": False}),
    ]


def test_a_mig_pod_stays_on_its_gpu_type_and_capacity_type() -> None:
    a100 = _node("a100", "all-1g.10gb", mig={"1g.10gb": 14})
    a100["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    spot = _node("spot", "all-1g.10gb", mig={"1g.10gb": 14})
    spot["metadata"]["labels"]["karpenter.sh/capacity-type"] = "spot"
    h100 = _node("h100", "all-1g.10gb", mig={"1g.10gb": 14})
    mig = MigPartitions(_inventory(_node("on-demand"), a100, spot, h100))
    placed = mig.place("1g.10gb", [_pod(f"w-{i}", "on-demand") for i in range(14)], gpu_type=H100)
    assert {p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in placed} == {"h100"}
    with pytest.raises(MigInstanceUnavailableError):
        mig.place("1g.10gb", [_pod("w-14", "on-demand")], gpu_type=H100)
    others = mig.place("1g.10gb", [_pod(f"x-{i}", "on-demand") for i in range(14)])
    assert {p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in others} == {"a100"}
    with pytest.raises(MigInstanceUnavailableError):  # the spot node's are not for an on-demand worker
        mig.place("1g.10gb", [_pod("x-14", "on-demand")])


@pytest.mark.asyncio
async def test_an_ask_not_repeated_goes_stale_and_repartitions_nothing() -> None:
    inventory = _inventory(_node("idle", "all-1g.10gb", mig={"1g.10gb": 14}))
    mig, kube = MigPartitions(inventory, stale_after_passes=2), Patches()
    with pytest.raises(MigInstanceUnavailableError):
        mig.place("3g.40gb", [_pod(f"w-{i}", "idle") for i in range(4)])
    mig.passes = 5  # asked 5 passes ago and not since: the job went, or fits elsewhere
    await mig.step(kube)
    assert kube.sent == [] and mig.waiting == {}
    with pytest.raises(MigInstanceUnavailableError):
        mig.place("3g.40gb", [_pod(f"w-{i}", "idle") for i in range(4)])
    await mig.step(kube)  # asked again: the idle node is cordoned for it
    assert [name for name, _ in kube.sent] == ["idle"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class WaitingSpec:
    """A waiting TrainingJob's spec, as the cycle hands it to `cycle_asked`."""

    def __init__(self, queue: str, replicas: int, gpus: int = 1, profile: str | None = None) -> None:
        self.queue, self.replicas, self.gpus_per_replica = queue, replicas, gpus
        self.gpu_share = GpuShare(mig_profile=profile) if profile is not None else None


def _applied(name: str, config: str, version: str, **mig: int) -> dict[str, Any]:
    node = _node(name, config, mig=mig or None)
    node["metadata"]["resourceVersion"] = version
    return node


async def _repartition(
    mig: MigPartitions, kube: Patches, inventory: Inventory, node: str, applied: dict[str, Any]
) -> str:
    """Carry a cordon the last step sent through: relabel, the MIG manager applies, uncordon; the config set."""
    await mig.step(kube)
    config = kube.sent[-1][1]["metadata"]["labels"][CONFIG_LABEL]
    inventory.upsert_node(applied)
    await mig.step(kube)
    assert kube.sent[-1] == (
        node,
        {"spec": {"unschedulable": False}, "metadata": {"annotations": {CORDONED_ANNOTATION: None}}},
    )
    return str(config)


@pytest.mark.asyncio
async def test_a_queue_slices_no_more_than_its_instances_fill_and_its_node_goes_back_when_they_are_gone() -> None:
    inventory = _inventory(_node("a", "all-disabled"), _node("b", "all-disabled"))  # 2 GPUs each
    clock = Clock()
    mig, kube = MigPartitions(inventory, hold_down_seconds=30.0, clock=clock), Patches()
    assert mig.hold_down_seconds == 30.0
    mig.cycle_asked([(WaitingSpec("team", 3, profile="1g.10gb"), "InsufficientGPUs")], [])
    await mig.step(kube)
    assert kube.sent == [], "3 x 1g (3/7 of a GPU) slice no 2-GPU node"
    mig.cycle_asked([(WaitingSpec("team", 14, profile="1g.10gb"), "InsufficientGPUs")], [])
    await mig.step(kube)
    assert [name for name, _ in kube.sent] == ["a"]  # 14 fill 2 GPUs: one node
    config = await _repartition(mig, kube, inventory, "a", _applied("a", "all-1g.10gb", "2", **{"1g.10gb": 14}))
    assert config == "all-1g.10gb" and mig.partitioned_for == {"a": "team"}
    mig.cycle_asked([(WaitingSpec("team", 14, profile="1g.10gb"), "InsufficientGPUs")], [])
    sent = len(kube.sent)
    await mig.step(kube)
    assert len(kube.sent) == sent, "b is not sliced too: a's free instances are the ask's"
    # The jobs ran and ended, and nobody asks: a is free; it goes back once the hold-down is over.
    mig.asks.clear()
    await mig.step(kube)
    clock.now += 29
    await mig.step(kube)
    assert len(kube.sent) == sent
    clock.now += 1
    await mig.step(kube)
    assert kube.sent[-1] == (
        "a",
        {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: "all-disabled"}}},
    )
    config = await _repartition(mig, kube, inventory, "a", _applied("a", "all-disabled", "3"))
    assert config == "all-disabled"
    await mig.step(kube)
    assert mig.partitioned_for == {} and mig.idle_since == {}


@pytest.mark.asyncio
async def test_a_whole_gpu_gang_waiting_sets_free_sliced_nodes_back_at_once_and_quota_bounds_slicing() -> None:
    inventory = _inventory(_node("s", "all-1g.10gb", mig={"1g.10gb": 14}), _node("w", "all-disabled"))
    mig, kube = MigPartitions(inventory, hold_down_seconds=3600.0, clock=Clock()), Patches()
    quota = [QueueQuota("team", 1)]
    mig.cycle_asked([(WaitingSpec("team", 28, profile="3g.40gb"), "InsufficientGPUs")], quota)
    await mig.step(kube)  # 28 x 3g fill 14 GPUs, but the queue's quota is 1 GPU: no 2-GPU node for it
    assert kube.sent == []
    mig.cycle_asked([(WaitingSpec("other", 2, gpus=2), "TopologyTooSmall")], quota)
    await mig.step(kube)
    assert kube.sent == [
        ("s", {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: "all-disabled"}}})
    ]
