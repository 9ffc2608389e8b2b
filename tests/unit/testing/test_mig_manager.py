"""The MIG manager stand-in's node rewrite: the instances of a stock config, as the mixed strategy advertises them."""

from __future__ import annotations

from typing import Any

from aisched.testing.mig_manager import node_resources


def _node(product: str = "NVIDIA-H100-80GB-HBM3", **allocatable: str) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8", "nvidia.com/mig-1g.10gb.count": "56"}
    return {"metadata": {"labels": labels}, "status": {"allocatable": allocatable}}


def test_a_mig_config_advertises_its_instances_and_no_whole_gpu() -> None:
    patches = node_resources(_node(**{"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "56"}), "all-3g.40gb")
    assert patches is not None
    allocatable, labels = patches
    assert allocatable == {"nvidia.com/mig-1g.10gb": None, "nvidia.com/mig-3g.40gb": "16", "nvidia.com/gpu": "0"}
    assert labels == {
        "nvidia.com/mig-1g.10gb.count": None,
        "nvidia.com/mig-3g.40gb.count": "16",
        "nvidia.com/mig.strategy": "mixed",
    }


def test_all_disabled_gives_the_whole_gpus_back_and_unknown_configs_or_models_apply_nothing() -> None:
    patches = node_resources(_node(**{"nvidia.com/mig-1g.10gb": "56"}), "all-disabled")
    assert patches is not None and patches[0] == {"nvidia.com/mig-1g.10gb": None, "nvidia.com/gpu": "8"}
    assert node_resources(_node(), "all-9g.99gb") is None
    assert node_resources(_node("NVIDIA-L4"), "all-1g.10gb") is None
