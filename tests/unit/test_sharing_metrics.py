"""Shared-GPU metrics on a fresh registry: parts allocated, GPUs stranded, MIG instances by profile."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from aisched.metrics import Metrics, SharedGpuUsage
from aisched.metrics.sharing import MigSlices, mig_slices

H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry(), process_metrics=False)


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_shared_gpus_are_reported_in_gpu_equivalents_and_replaced_not_accumulated(metrics: Metrics) -> None:
    metrics.sharing.record_shared_gpus([SharedGpuUsage(H100, "OnDemand", 2, 1300, 1, 150)])
    pool = {"gpu_type": H100, "capacity_type": "OnDemand"}
    assert value(metrics, "aisched_gpu_share_allocated_gpus", **pool) == 1.3
    assert value(metrics, "aisched_gpus_shared", **pool) == 2
    assert value(metrics, "aisched_gpus_stranded", **pool) == 1
    assert value(metrics, "aisched_gpu_share_stranded_gpus", **pool) == 0.15
    metrics.sharing.record_shared_gpus([SharedGpuUsage(H100, "Spot", 1, 300, 0, 0)])
    assert value(metrics, "aisched_gpus_shared", **pool) is None  # the pool without shares drops out
    assert value(metrics, "aisched_gpu_share_allocated_gpus", gpu_type=H100, capacity_type="Spot") == 0.3


def test_a_capacity_type_outside_the_set_is_refused(metrics: Metrics) -> None:
    with pytest.raises(ValueError, match="capacity_type"):
        metrics.sharing.record_shared_gpus([SharedGpuUsage(H100, "Reserved", 1, 300, 0, 0)])


def test_mig_instances_by_profile_allocated_and_free_where_known(metrics: Metrics) -> None:
    offered = [(H100, "1g.10gb", 7), (H100, "1g.10gb", 7), (H100, "3g.40gb", 2)]
    held = [(H100, "1g.10gb")] * 3 + [(H100, "7g.80gb")]
    slices = mig_slices(offered, held)
    assert slices == [
        MigSlices(H100, "1g.10gb", 3, 11),
        MigSlices(H100, "3g.40gb", 0, 2),
        MigSlices(H100, "7g.80gb", 1, None),  # held, but no node says what it offers
    ]
    metrics.sharing.record_mig_slices(slices)
    assert value(metrics, "aisched_mig_instances", gpu_type=H100, profile="1g.10gb", state="free") == 11
    assert value(metrics, "aisched_mig_instances", gpu_type=H100, profile="7g.80gb", state="allocated") == 1
    assert value(metrics, "aisched_mig_instances", gpu_type=H100, profile="7g.80gb", state="free") is None


def test_a_profile_no_model_has_is_counted_as_other_so_labels_stay_bounded(metrics: Metrics) -> None:
    metrics.sharing.record_mig_slices([MigSlices(H100, "9g.999gb", 2, 1), MigSlices(H100, "x" * 300, 1, 0)])
    assert value(metrics, "aisched_mig_instances", gpu_type=H100, profile="other", state="allocated") == 3
    assert value(metrics, "aisched_mig_instances", gpu_type=H100, profile="other", state="free") == 1


def test_a_standby_drops_the_shared_gpu_picture(metrics: Metrics) -> None:
    metrics.sharing.record_shared_gpus([SharedGpuUsage(H100, "OnDemand", 2, 1300, 1, 150)])
    metrics.sharing.record_mig_slices([MigSlices(H100, "1g.10gb", 1, 6)])
    metrics.record_leadership(False)
    assert value(metrics, "aisched_gpus_shared", gpu_type=H100, capacity_type="OnDemand") is None
    assert value(metrics, "aisched_mig_instances", gpu_type=H100, profile="1g.10gb", state="free") is None
