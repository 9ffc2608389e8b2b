"""What Nodes and Pods say about MIG, read defensively: labels and quantities are anyone's to write."""

from __future__ import annotations

from aisched.kube.mig_nodes import CORDONED_ANNOTATION, NodeMig, read_node_mig, requested_profiles


def test_a_node_with_a_mig_manager_and_instances_is_read() -> None:
    labels = {"nvidia.com/mig.config": "all-balanced", "nvidia.com/mig.config.state": "success"}
    labels["nvidia.com/gpu.count"] = "8"
    allocatable = {"nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-3g.40gb": "8", "nvidia.com/gpu": "0", "cpu": "9"}
    assert read_node_mig(labels, allocatable, {CORDONED_ANNOTATION: "all-balanced"}) == NodeMig(
        "all-balanced", "success", 8, (("1g.10gb", 16), ("3g.40gb", 8)), "all-balanced"
    )


def test_a_node_without_mig_and_malformed_values_read_as_absent() -> None:
    assert read_node_mig({"nvidia.com/gpu.count": "8"}, {"nvidia.com/gpu": "8"}, {}) is None
    odd = read_node_mig(
        {"nvidia.com/mig.config": "Not A Name!", "nvidia.com/gpu.count": "lots"},
        {"nvidia.com/mig-../etc": "3", "nvidia.com/mig-1g.10gb": "1e9", "nvidia.com/mig-2g.20gb": "-4"},
        {},
    )
    assert odd is not None and odd.config is None and odd.gpus == 0
    assert dict(odd.allocatable) == {"1g.10gb": 448, "2g.20gb": 0}  # bounded; negative is none


def test_a_pods_instances_are_counted_one_entry_each_from_its_limits() -> None:
    spec = {
        "containers": [
            {"resources": {"limits": {"nvidia.com/mig-1g.10gb": "2", "cpu": "1"}}},
            {"resources": {"requests": {"nvidia.com/mig-3g.40gb": 1}}},
            {"resources": "garbage"},
            "garbage",
        ]
    }
    assert requested_profiles(spec) == ("1g.10gb", "1g.10gb", "3g.40gb")
    assert requested_profiles({}) == ()
