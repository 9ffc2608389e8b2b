from __future__ import annotations

from typing import Any

from aisched.api import CapacityType
from aisched.kube.inventory import Inventory
from aisched.settings import Settings


def node(name: str, gpus: int = 8, *, ready: bool = True, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(name: str, node_name: str | None, gpus: int, phase: str = "Running", **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "labels": extra.pop("labels", {}), **extra},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": 1}}}],
        },
        "status": {"phase": phase},
    }


def test_counts_gpus_of_every_bound_running_pod() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1"), node("n2")])
    inventory.upsert_pod(pod("theirs", "n1", 3))
    inventory.upsert_pod(pod("done", "n1", 4, phase="Succeeded"))
    inventory.upsert_pod(pod("pending", None, 2, phase="Pending"))
    assert inventory.used_gpus("n1") == 3
    snapshot = inventory.snapshot({"n2": 8})
    assert snapshot.free_gpus("n1") == 5
    assert snapshot.free_gpus("n2") == 0


def test_a_pod_moving_or_vanishing_moves_its_gpus() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1"), node("n2")])
    inventory.upsert_pod(pod("p", "n1", 2))
    inventory.upsert_pod(pod("p", "n2", 2))
    assert (inventory.used_gpus("n1"), inventory.used_gpus("n2")) == (0, 2)
    inventory.delete_pod("ns", "p")
    assert inventory.used_gpus("n2") == 0


def test_relist_replaces_whatever_the_watch_missed() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1"), node("gone")])
    inventory.upsert_pod(pod("orphan", "n1", 8))
    inventory.replace_nodes([node("n1")])
    inventory.replace_pods([])
    assert set(inventory.nodes) == {"n1"}
    assert inventory.used_gpus("n1") == 0


def test_labels_give_topology_product_and_capacity_type() -> None:
    inventory = Inventory(Settings())
    assert inventory.upsert_node(
        {
            "metadata": {
                "name": "n1",
                "labels": {
                    "karpenter.sh/capacity-type": "spot",
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "aisched.io/rack": "r1",
                    "topology.kubernetes.io/zone": "z1",
                    "nvidia.com/gpu.clique": "c1",
                },
            },
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    record = inventory.nodes["n1"]
    assert record.capacity_type == CapacityType.SPOT
    assert (record.zone, record.rack, record.nvlink_domain) == ("z1", "r1", "c1")
    assert record.gpu_product == "NVIDIA-H100-80GB-HBM3"


def test_interruption_taints_and_not_ready_nodes_are_doomed() -> None:
    inventory = Inventory(Settings())
    inventory.replace_nodes(
        [
            node("ok"),
            node("notice", taints=[{"key": "aws-node-termination-handler/spot-itn", "effect": "NoSchedule"}]),
            node("sick", ready=False),
        ]
    )
    assert inventory.doomed_nodes() == {"notice", "sick"}


OURS = {"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "llm"}


def test_termination_message_and_unschedulable_reason_are_read() -> None:
    inventory = Inventory(Settings())
    obj = pod("w", "n1", 1, phase="Failed", labels=dict(OURS))
    obj["status"]["containerStatuses"] = [{"state": {"terminated": {"exitCode": 75, "message": '{"step": 10}'}}}]
    record = inventory.upsert_pod(obj)
    assert (record.exit_code, record.termination_message) == (75, '{"step": 10}')
    stuck = pod("s", None, 1, phase="Pending", labels=dict(OURS))
    stuck["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "message": "0/3 nodes are available",
        }
    ]
    assert inventory.upsert_pod(stuck).unschedulable_message == "0/3 nodes are available"
