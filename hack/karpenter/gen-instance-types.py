"""Write instance-types.json (Karpenter's KWOK provider format) from the table below.

    python3 hack/karpenter/gen-instance-types.py > hack/karpenter/instance-types.json

On-demand prices: AWS us-east-1 Linux list prices before the June 2025 GPU price cut, as
aisched.sim.fleet.catalog has them (p5e: a buyers'-guide estimate, AWS lists none). Spot: a
share of on-demand per zone (write-ups of H100 spot put it 50-65% below on-demand); the
zones differ a little so that "the cheapest zone" is a real choice.
"""

import json
import sys

ZONES = {"us-east-1a": 0.40, "us-east-1b": 0.42, "us-east-1c": 0.45}  # spot price / on-demand price
# name, GPU product (as GPU Feature Discovery labels it), GPUs, GPU memory MiB, vCPUs, memory, on-demand $/h
TYPES = [
    ("p5.48xlarge", "NVIDIA-H100-80GB-HBM3", 8, 81559, "192", "2048Gi", 98.32),
    ("p5e.48xlarge", "NVIDIA-H200", 8, 143771, "192", "2048Gi", 107.0),
    ("p4d.24xlarge", "NVIDIA-A100-SXM4-40GB", 8, 40960, "96", "1152Gi", 32.7726),
    ("g6.xlarge", "NVIDIA-L4", 1, 23034, "4", "16Gi", 0.8048),
    ("g6.12xlarge", "NVIDIA-L4", 4, 23034, "48", "192Gi", 4.6016),
    ("g6.48xlarge", "NVIDIA-L4", 8, 23034, "192", "768Gi", 13.3504),
]


def requirement(key, value):
    return {"key": key, "operator": "In", "values": [value]}


def main():
    types = []
    for name, product, gpus, memory_mib, cpu, memory, on_demand in TYPES:
        offerings = []
        for zone, spot_share in ZONES.items():
            for capacity, price in (("spot", on_demand * spot_share), ("on-demand", on_demand)):
                # Offering requirements with one value become labels of the node (KWOK's
                # addInstanceLabels): this is how its nodes get the labels GFD would put there.
                offerings.append(
                    {
                        "Price": round(price, 4),
                        "Available": True,
                        "Requirements": [
                            requirement("karpenter.sh/capacity-type", capacity),
                            requirement("topology.kubernetes.io/zone", zone),
                            requirement("nvidia.com/gpu.product", product),
                            requirement("nvidia.com/gpu.count", str(gpus)),
                            requirement("nvidia.com/gpu.memory", str(memory_mib)),
                        ],
                    }
                )
        types.append(
            {
                "name": name,
                "offerings": offerings,
                "architecture": "amd64",
                "operatingSystems": ["linux"],
                "resources": {
                    "cpu": cpu,
                    "memory": memory,
                    "pods": "110",
                    "ephemeral-storage": "1Ti",
                    "nvidia.com/gpu": str(gpus),
                },
            }
        )
    json.dump(types, sys.stdout, indent=1)
    sys.stdout.write("\n")


main()
