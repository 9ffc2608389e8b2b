"""The controllers' part for gpuShare: a GPU of each pod's node, shared where it fits, and the claims."""

from __future__ import annotations

from typing import Any

import pytest

from aisched.api.sharing import GpuShare
from aisched.controller.sharing import GpuShares, ShareDoesNotFitError
from aisched.kube.claims import CLAIM_NAME, SHARE_ANNOTATION
from aisched.kube.inventory import Inventory
from aisched.settings import Settings
from tests.unit.kube.claim_objects import share_claim_of

OWNER = {"apiVersion": "aisched.io/v1alpha1", "kind": "TrainingJob", "name": "j", "uid": "u"}
OURS = {"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "j"}


def _node(name: str, gpus: int = 4, memory: int = 80_000) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": str(memory)}},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(name: str, node: str, gpus: int = 0) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {
        "metadata": {"namespace": "ns", "name": name, "labels": dict(OURS)},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "c", "image": "i", "resources": resources}],
        },
        "status": {"phase": "Pending"},
    }


def _shares(*pods: dict[str, Any]) -> GpuShares:
    inventory = Inventory(Settings())
    inventory.replace_nodes([_node("n1"), _node("n2", gpus=1, memory=20_000)])
    for made in pods:
        pod = made
        if SHARE_ANNOTATION in made["metadata"].get("annotations", {}):
            # Held as the cluster shows it: the claim allocated by kube-scheduler (the annotation is a hint).
            pod, claim = share_claim_of(made)
            inventory.upsert_claim(claim)
        inventory.upsert_pod(pod)
    return GpuShares(inventory)


def test_workers_and_a_replica_of_one_node_share_one_gpu_and_each_gets_a_claim_for_it() -> None:
    shares = _shares(_pod("whole", "n1", gpus=2))
    claims, pods = shares.shared_pods(GpuShare(compute_percent=30), [_pod("w-0", "n1"), _pod("w-1", "n1")], OWNER)
    devices = {p["metadata"]["annotations"][SHARE_ANNOTATION].split(",")[0] for p in pods}
    assert devices == {"gpu-0"}  # the whole-GPU pod counts as the highest GPUs: gpu-3 and gpu-2
    assert [c["metadata"]["name"] for c in claims] == ["w-0", "w-1"]
    assert all(p["spec"]["resourceClaims"][0]["name"] == CLAIM_NAME for p in pods)
    # A replica placed later, before the watch shows the workers, goes beside them.
    _, later = shares.shared_pods(GpuShare(compute_percent=30), [_pod("svc-0", "n1")], OWNER)
    assert later[0]["metadata"]["annotations"][SHARE_ANNOTATION] == "gpu-0,300,24000"
    _, more = shares.shared_pods(GpuShare(compute_percent=30), [_pod("svc-1", "n1")], OWNER)
    assert more[0]["metadata"]["annotations"][SHARE_ANNOTATION].startswith("gpu-1,")  # gpu-0 is at 90%


def test_memory_decides_as_much_as_compute_and_a_share_that_fits_nowhere_is_refused() -> None:
    shares = _shares()
    _, pods = shares.shared_pods(GpuShare(memory_mib=10_000), [_pod("a", "n2")], OWNER)
    assert pods[0]["metadata"]["annotations"][SHARE_ANNOTATION] == "gpu-0,500,10000"  # half of 20,000 MiB
    with pytest.raises(ShareDoesNotFitError, match="pod b"):
        shares.shared_pods(GpuShare(compute_percent=60), [_pod("b", "n2")], OWNER)


def test_a_mig_profile_no_node_advertises_waits_and_no_share_leaves_pods_alone() -> None:
    shares = _shares()  # MIG placement itself: tests/unit/controller/test_mig.py
    with pytest.raises(ShareDoesNotFitError, match="0 free on nodes with MIG"):
        shares.shared_pods(GpuShare(mig_profile="1g.10gb"), [_pod("m", "n1")], OWNER)
    plain = [_pod("p", "n1", gpus=1)]
    assert shares.shared_pods(None, plain, OWNER) == ([], plain)


def test_a_share_handed_to_a_pod_that_was_not_made_is_free_again() -> None:
    shares = _shares()
    _, pods = shares.shared_pods(GpuShare(compute_percent=60), [_pod("a", "n2")], OWNER)
    with pytest.raises(ShareDoesNotFitError):
        shares.shared_pods(GpuShare(compute_percent=60), [_pod("b", "n2")], OWNER)
    shares.forget(pods)
    _, again = shares.shared_pods(GpuShare(compute_percent=60), [_pod("b", "n2")], OWNER)
    assert again[0]["metadata"]["annotations"][SHARE_ANNOTATION].startswith("gpu-0,600,")
