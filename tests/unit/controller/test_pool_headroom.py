"""controller.provisioning.pool_headroom: what a NodePool's limits still allow our NodeClaims."""

from __future__ import annotations

from typing import Any

from aisched.api.common import CapacityType
from aisched.controller.provisioning import pool_headroom


def test_pool_headroom_reads_limits_as_quantities_and_ignores_what_it_cannot_read() -> None:
    pools: list[dict[str, Any]] = [
        {"metadata": {"name": "a"}, "spec": {"limits": {"nvidia.com/gpu": "1k"}}},
        {"metadata": {"name": "b"}, "spec": {"limits": {"nvidia.com/gpu": "lots"}}},
        {"metadata": {"name": "c"}, "spec": {"limits": {"nvidia.com/gpu": "8"}}},
        {"spec": {"limits": {"nvidia.com/gpu": "8"}}},
    ]
    claim: dict[str, Any] = {
        "metadata": {"labels": {"karpenter.sh/nodepool": "c"}},
        "spec": {"resources": {"requests": {"nvidia.com/gpu": "16"}}},
    }
    headroom = pool_headroom(pools, [claim, {"metadata": None}], "nvidia.com/gpu", {CapacityType.SPOT: "a"})
    assert headroom.gpus == {"a": 1000, "c": 0}  # b's limit is no quantity; c is over, not negative
    assert headroom.pools == {CapacityType.SPOT: "a"}
