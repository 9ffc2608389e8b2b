"""The fake DRA driver publishes one device per GPU of each KWOK node, shareable by consumable capacity."""

from __future__ import annotations

from pathlib import Path

from aisched.kube import claims
from aisched.testing.devices import DEVICE_CLASS, DRIVER, gpu_uuid, render_devices
from aisched.testing.nodes import load_description, render_nodes

SMALL = Path(__file__).parents[3] / "hack" / "clusters" / "small.yaml"


def test_every_gpu_of_every_node_is_one_device_with_a_unique_uuid() -> None:
    description = load_description(SMALL)
    objects = render_devices(description)
    assert objects[0]["kind"] == "DeviceClass" and objects[0]["metadata"]["name"] == DEVICE_CLASS
    slices = objects[1:]
    nodes = render_nodes(description)
    assert [s["spec"]["nodeName"] for s in slices] == [n["metadata"]["name"] for n in nodes]
    uuids = [d["attributes"]["uuid"]["string"] for s in slices for d in s["spec"]["devices"]]
    assert len(uuids) == len(set(uuids)) == sum(int(n["status"]["capacity"]["nvidia.com/gpu"]) for n in nodes)
    for node, slice_ in zip(nodes, slices, strict=True):
        assert slice_["spec"]["driver"] == DRIVER
        assert slice_["spec"]["pool"] == {"name": node["metadata"]["name"], "generation": 1, "resourceSliceCount": 1}
        for index, device in enumerate(slice_["spec"]["devices"]):
            assert device["allowMultipleAllocations"] is True
            assert device["attributes"]["uuid"]["string"] == gpu_uuid(node["metadata"]["name"], index)
            assert device["attributes"]["productName"]["string"] == node["metadata"]["labels"]["nvidia.com/gpu.product"]
            memory = device["capacity"]["memory"]
            assert memory["value"] == f"{node['metadata']['labels']['nvidia.com/gpu.memory']}Mi"
            assert memory["requestPolicy"]["default"] == memory["value"]  # a claim naming no amount takes it all


def test_the_driver_is_the_one_the_operator_claims_from() -> None:
    assert (DRIVER, DEVICE_CLASS) == (claims.DRIVER, claims.DEVICE_CLASS)


def test_uuids_are_stable_and_distinct() -> None:
    assert gpu_uuid("n1", 0) == gpu_uuid("n1", 0)
    assert gpu_uuid("n1", 0) != gpu_uuid("n1", 1) != gpu_uuid("n2", 0)
    assert gpu_uuid("n1", 0).startswith("GPU-") and len(gpu_uuid("n1", 0)) == 40
