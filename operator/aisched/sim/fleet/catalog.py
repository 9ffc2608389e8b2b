"""Instance types a simulated fleet is made of, and what each offering (type, zone, capacity type) costs.

On-demand prices are AWS's us-east-1 Linux list prices per instance-hour as published before the
June 2025 GPU price cut (p5.48xlarge $98.32, p4d.24xlarge $32.77, g6.xlarge $0.8048, g6.12xlarge
$4.6016, g6.48xlarge $13.3504); p5e.48xlarge (H200) has no public on-demand list price (it is
sold through Capacity Blocks), so the estimate of about $107/h used by buyers' guides stands in.
Only ratios matter to the benchmark: every arm pays the same prices.

Spot prices are not constant in reality; here each is `SPOT_PRICE_RATIO` of on-demand in every
zone: market write-ups of H100 spot put it 50-65% below on-demand, and AWS says spot is "up to
90%" off. The ratio is a parameter of the benchmark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aisched.api.common import CapacityType

SPOT_PRICE_RATIO = 0.4


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    gpus: int
    gpu_product: str
    on_demand_per_hour: float


H100 = "NVIDIA-H100-80GB-HBM3"
INSTANCE_TYPES = (
    InstanceType("p5.48xlarge", 8, H100, 98.32),
    InstanceType("p5e.48xlarge", 8, "NVIDIA-H200", 107.0),
    InstanceType("p4d.24xlarge", 8, "NVIDIA-A100-SXM4-40GB", 32.77),
    InstanceType("g6.xlarge", 1, "NVIDIA-L4", 0.8048),
    InstanceType("g6.12xlarge", 4, "NVIDIA-L4", 4.6016),
    InstanceType("g6.48xlarge", 8, "NVIDIA-L4", 13.3504),
)


@dataclass(frozen=True, slots=True)
class Offering:
    """One way to get a node: an instance type in a zone, on spot or on-demand, at a price."""

    instance_type: InstanceType
    zone: str
    capacity_type: CapacityType
    per_hour: float


def offerings(
    zones: Sequence[str],
    types: Sequence[InstanceType] = INSTANCE_TYPES,
    *,
    spot_price_ratio: float = SPOT_PRICE_RATIO,
) -> tuple[Offering, ...]:
    """Every type in every zone, spot and on-demand: what Karpenter's instance-types file lists."""
    if not 0 < spot_price_ratio <= 1:
        raise ValueError(f"the spot price ratio must be in (0, 1], got {spot_price_ratio}")
    return tuple(
        Offering(kind, zone, capacity, kind.on_demand_per_hour * (spot_price_ratio if spot else 1.0))
        for kind in types
        for zone in zones
        for capacity, spot in ((CapacityType.SPOT, True), (CapacityType.ON_DEMAND, False))
    )


def for_product(catalog: Sequence[Offering], product: str) -> tuple[Offering, ...]:
    """The offerings whose GPU is `product`, cheapest first: what a pod asking for that GPU can get."""
    return tuple(
        sorted(
            (o for o in catalog if o.instance_type.gpu_product == product),
            key=lambda o: (o.per_hour / o.instance_type.gpus, o.zone),
        )
    )
