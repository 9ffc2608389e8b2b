"""A fake DRA driver for the KWOK GPU nodes: a DeviceClass and one ResourceSlice per node, as NVIDIA's driver publishes.

The devices look like those of NVIDIA's DRA driver (driver `gpu.nvidia.com`, attributes
`type`, `uuid`, `index`, `productName` in the driver's domain) so that the claims the operator
writes select a device the same way on a real cluster. Each GPU also publishes two consumable
capacities (`compute` in thousandths of the GPU, `memory` in bytes) and allows several
allocations, as the DRAConsumableCapacity feature (alpha in 1.35) describes: claims for parts of
one GPU then share it, and kube-scheduler refuses a claim that would take more than is left.

KWOK plays no kubelet, so nothing prepares the devices: the local cluster shows the allocation,
which is what the operator decides; a real node's driver would set up the GPU or the MPS share.

Usage: python -m aisched.testing.devices DESCRIPTION (a YAML stream of the DeviceClass and slices)
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any, Final

import yaml

from aisched.testing.nodes import DescriptionError, load_description, render_nodes

# As aisched.kube.claims names them (a unit test holds them equal): hack/cluster.sh runs this module
# with whatever Python it finds, which needs no more than PyYAML for it.
DRIVER: Final = "gpu.nvidia.com"
DEVICE_CLASS: Final = "gpu.nvidia.com"
MILLI: Final = 1000


def device_class() -> dict[str, Any]:
    """The class every GPU claim names: whole GPUs of our driver (NVIDIA's driver ships one of this name)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {
            "selectors": [
                {"cel": {"expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"}}
            ]
        },
    }


def gpu_uuid(node: str, index: int) -> str:
    """A stable, unique, UUID-shaped name for GPU INDEX of NODE (a real GPU's UUID is fixed by its board)."""
    digest = hashlib.sha256(f"{node}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def resource_slice(node: dict[str, Any]) -> dict[str, Any] | None:
    """The slice of one rendered Node: one device per GPU; None for a node without GPUs."""
    name = node["metadata"]["name"]
    labels = node["metadata"]["labels"]
    count = int(labels.get("nvidia.com/gpu.count", "0"))
    if count <= 0:
        return None
    memory_mib = int(labels.get("nvidia.com/gpu.memory", "0")) or 1
    devices = [
        {
            "name": f"gpu-{index}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": gpu_uuid(name, index)},
                "index": {"int": index},
                "productName": {"string": labels["nvidia.com/gpu.product"]},
            },
            "allowMultipleAllocations": True,
            "capacity": {
                # A claim that names no amount takes the whole GPU: both defaults are all of it.
                "compute": {
                    "value": str(MILLI),
                    "requestPolicy": {"default": str(MILLI), "validRange": {"min": "1", "step": "1"}},
                },
                "memory": {
                    "value": f"{memory_mib}Mi",
                    "requestPolicy": {"default": f"{memory_mib}Mi", "validRange": {"min": "1Mi", "step": "1Mi"}},
                },
            },
        }
        for index in range(count)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def render_devices(description: dict[str, Any]) -> list[dict[str, Any]]:
    """The DeviceClass and every node's slice, in the nodes' order."""
    slices = [resource_slice(node) for node in render_nodes(description)]
    return [device_class(), *(s for s in slices if s is not None)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the fake DRA driver's DeviceClass and ResourceSlices.")
    parser.add_argument("description", type=Path, help="cluster description YAML (hack/clusters/*.yaml)")
    args = parser.parse_args(argv)
    try:
        objects = render_devices(load_description(args.description))
    except (OSError, DescriptionError, yaml.YAMLError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
