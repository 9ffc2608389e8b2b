"""aisched.testing.nodes: cluster descriptions become the fake GPU nodes the local cluster runs."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from aisched.testing.cluster import expected_nodes
from aisched.testing.nodes import DescriptionError, render_nodes


def labels(nodes: list[dict[str, Any]], key: str) -> Counter[str]:
    return Counter(n["metadata"]["labels"].get(key, "") for n in nodes)


def test_large_preset_has_over_a_thousand_8_gpu_nodes_with_unique_names_and_addresses() -> None:
    nodes = expected_nodes("large")

    assert len(nodes) >= 1000
    assert {n["status"]["allocatable"]["nvidia.com/gpu"] for n in nodes} == {"8"}
    assert len({n["metadata"]["name"] for n in nodes}) == len(nodes)
    assert len({n["status"]["addresses"][0]["address"] for n in nodes}) == len(nodes)
    assert len(labels(nodes, "topology.kubernetes.io/zone")) >= 2
    assert len(labels(nodes, "aisched.io/rack")) > 10


def test_small_preset_mixes_zones_capacity_types_products_and_nvlink_domains() -> None:
    nodes = expected_nodes("small")

    assert len(nodes) == 16
    assert set(labels(nodes, "karpenter.sh/capacity-type")) == {"spot", "on-demand"}
    assert len(labels(nodes, "topology.kubernetes.io/zone")) == 2
    assert len(labels(nodes, "nvidia.com/gpu.product")) >= 4
    cliques = labels(nodes, "nvidia.com/gpu.clique")
    assert cliques[""] == 2  # PCIe L4 cards have no NVLink domain
    assert max(cliques.values()) == 4  # the GB200 rack's nodes share one
    for node in nodes:
        meta = node["metadata"]
        assert meta["annotations"] == {"kwok.x-k8s.io/node": "fake"}
        assert meta["labels"]["nvidia.com/gpu.count"] == node["status"]["capacity"]["nvidia.com/gpu"]
        assert "taints" not in node["spec"]


def a_description(**overrides: Any) -> dict[str, Any]:
    node_type = {"gpu": {"product": "NVIDIA-GB200", "count": 4}, "cpu": "144", "memory": "960Gi"}
    rack = {"nodes": [{"type": "gb200", "count": 4}]}
    return {
        "region": "r",
        "nodeTypes": {"gb200": {**node_type, **overrides.pop("node_type", {})}},
        "zones": [{"name": "z", "racks": [{**rack, **overrides.pop("rack", {})}]}],
        **overrides,
    }


def test_a_rack_must_fill_its_nvlink_domains() -> None:
    with pytest.raises(DescriptionError, match="do not fill NVLink domains of 3"):
        render_nodes(a_description(node_type={"nodesPerNvlinkDomain": 3}))


@pytest.mark.parametrize(
    ("description", "message"),
    [
        (a_description(rack={"nodes": [{"type": "h100", "count": 1}]}), "unknown node type 'h100'"),
        (a_description(rack={"nodes": [{"type": "gb200", "count": 1, "capacityType": "reserved"}]}), "capacityType"),
        ({"region": "r", "nodeTypes": {}}, "missing 'zones'"),
    ],
)
def test_malformed_descriptions_say_what_is_wrong(description: dict[str, Any], message: str) -> None:
    with pytest.raises(DescriptionError, match=message):
        render_nodes(description)
