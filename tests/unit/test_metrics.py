"""aisched.metrics on a fresh registry: the helpers change what is exposed, names
follow Prometheus conventions (promtool's own check is in tests/tools)."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aisched.metrics import GpuPoolUsage, Metrics, serve
from aisched.metrics.labels import (
    AUTOSCALER_REASONS,
    CAPACITY_TYPES,
    CARBON_MODES,
    CARBON_SOURCES,
    CHECKPOINT_REASONS,
    FINISHED_PHASES,
    INTERRUPTION_SIGNALS,
    KINDS,
    PHASES,
    RECONCILED_KINDS,
    RESTART_REASONS,
    SPREAD_LEVELS,
)
from tests.metrics_catalog import exercise

# Label -> the values its help text must name, for labels drawn from fixed sets.
ENUMERATED_LABELS: dict[str, tuple[str, ...]] = {
    "phase": PHASES,
    "capacity_type": CAPACITY_TYPES,
    "signal": INTERRUPTION_SIGNALS,
    "mode": CARBON_MODES,
    "source": CARBON_SOURCES,
}
ENUMERATED_BY_METRIC: dict[str, dict[str, tuple[str, ...]]] = {
    "aisched_jobs_completed": {"phase": FINISHED_PHASES},
    "aisched_checkpoints": {"reason": CHECKPOINT_REASONS},
    "aisched_gang_restarts": {"reason": RESTART_REASONS},
    "aisched_autoscaler_decisions": {"reason": AUTOSCALER_REASONS},
    "aisched_reconcile_errors": {"kind": RECONCILED_KINDS},
    "aisched_reconcile_duration_seconds": {"kind": RECONCILED_KINDS},
    "aisched_running_gangs": {"level": SPREAD_LEVELS},
    "aisched_job_pod_info": {"kind": KINDS},
    "aisched_carbon_emitted_grams": {"kind": KINDS},
}


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry())


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_nothing_is_registered_at_import_and_registries_are_independent() -> None:
    first, second = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    first.interruptions.record_checkpoint("Periodic")
    assert value(first, "aisched_checkpoints_total", reason="Periodic") == 1
    assert value(second, "aisched_checkpoints_total", reason="Periodic") == 0  # exported at zero, not shared


def test_job_census_reports_every_phase_of_a_seen_queue_and_forgets_vanished_queues(
    metrics: Metrics,
) -> None:
    metrics.workload.record_jobs({("default", "Queued"): 2, ("research", "Running"): 1})
    assert value(metrics, "aisched_jobs", queue="default", phase="Queued") == 2
    assert value(metrics, "aisched_jobs", queue="default", phase="Failed") == 0
    assert value(metrics, "aisched_jobs", queue="research", phase="Running") == 1

    metrics.workload.record_jobs({("default", "Running"): 2})
    assert value(metrics, "aisched_jobs", queue="default", phase="Queued") == 0
    assert value(metrics, "aisched_jobs", queue="research", phase="Running") is None


def test_admission_observes_the_wait_and_ends_the_pending_series(metrics: Metrics) -> None:
    queued = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    metrics.workload.record_job_pending("ml", "llama", "default", queued)
    assert value(
        metrics, "aisched_job_queued_timestamp_seconds", namespace="ml", job_name="llama", queue="default"
    ) == (queued.timestamp())
    metrics.workload.record_job_admitted("ml", "llama", "default", waited_seconds=90)
    assert (
        value(metrics, "aisched_job_queued_timestamp_seconds", namespace="ml", job_name="llama", queue="default")
        is None
    )
    assert value(metrics, "aisched_queue_wait_seconds_count", queue="default") == 1
    assert value(metrics, "aisched_queue_wait_seconds_bucket", queue="default", le="60.0") == 0
    assert value(metrics, "aisched_queue_wait_seconds_bucket", queue="default", le="120.0") == 1


def test_interruption_counts_lost_work_in_seconds_and_gpu_seconds(metrics: Metrics) -> None:
    metrics.interruptions.record_interruption("Spot", "NodeTaint", lost_seconds=300, gpus=8)
    metrics.interruptions.record_interruption("Spot", "NodeLost", lost_seconds=100, gpus=2)
    assert value(metrics, "aisched_interruptions_total", capacity_type="Spot", signal="NodeTaint") == 1
    assert value(metrics, "aisched_lost_work_seconds_total", capacity_type="Spot") == 400
    assert value(metrics, "aisched_lost_gpu_seconds_total", capacity_type="Spot") == 300 * 8 + 100 * 2


def test_gpu_inventory_is_replaced_not_accumulated(metrics: Metrics) -> None:
    metrics.capacity.record_gpu_pools(
        [GpuPoolUsage("A100", "Spot", 8, 4, 4, 1), GpuPoolUsage("H100", "OnDemand", 16, 0, 16, 0)]
    )
    metrics.capacity.record_gpu_pools([GpuPoolUsage("H100", "OnDemand", 16, 8, 8, 2)])
    assert value(metrics, "aisched_gpus_allocatable", gpu_type="A100", capacity_type="Spot") is None
    assert value(metrics, "aisched_gpus_allocated", gpu_type="H100", capacity_type="OnDemand") == 8
    assert value(metrics, "aisched_gpus_free", gpu_type="H100", capacity_type="OnDemand") == 8
    assert value(metrics, "aisched_gpus_fragmented", gpu_type="H100", capacity_type="OnDemand") == 2


def test_pending_demand_is_by_gpu_type_zone_and_capacity_type_and_replaced(metrics: Metrics) -> None:
    metrics.capacity.record_pending_demand({("H100", "us-east-1a", "Spot"): 32, ("any", "any", "OnDemand"): 8})
    assert value(metrics, "aisched_pending_gpus", gpu_type="H100", zone="us-east-1a", capacity_type="Spot") == 32
    assert value(metrics, "aisched_pending_gpus", gpu_type="any", zone="any", capacity_type="OnDemand") == 8
    metrics.capacity.record_pending_demand({("H100", "us-east-1b", "Spot"): 16})
    # The gang now planned in another zone: the old series goes, not left at its last value.
    assert value(metrics, "aisched_pending_gpus", gpu_type="H100", zone="us-east-1a", capacity_type="Spot") is None
    assert value(metrics, "aisched_pending_gpus", gpu_type="H100", zone="us-east-1b", capacity_type="Spot") == 16
    with pytest.raises(ValueError, match="is not one of"):
        metrics.capacity.record_pending_demand({("H100", "us-east-1b", "spot"): 16})


def test_grid_intensity_is_exported_in_grams_per_joule(metrics: Metrics) -> None:
    metrics.carbon.record_grid_intensity("GB", 360)
    assert value(metrics, "aisched_grid_carbon_intensity_grams_per_joule", region="GB") == pytest.approx(1e-4)


@pytest.mark.parametrize(("before", "after", "direction"), [(2, 5, "Up"), (5, 2, "Down"), (3, 3, "None"), (0, 1, "Up")])
def test_autoscaler_direction_follows_the_replica_change(
    metrics: Metrics, before: int, after: int, direction: str
) -> None:
    metrics.serving.record_autoscaler_decision(before, after, "ScaleUp")
    assert value(metrics, "aisched_autoscaler_decisions_total", direction=direction, reason="ScaleUp") == 1


def test_unknown_inference_metric_drops_its_series(metrics: Metrics) -> None:
    args: dict[str, Any] = {"desired": 2, "on_demand": 1, "spot": 1, "target_per_replica": 10.0}
    metrics.serving.record_inference_service("ml", "chat", metric_per_replica=9.0, **args)
    metrics.serving.record_inference_service("ml", "chat", metric_per_replica=None, **args)
    assert value(metrics, "aisched_inference_metric_per_replica", namespace="ml", service="chat") is None
    assert value(metrics, "aisched_inference_replicas", namespace="ml", service="chat", capacity_type="Spot") == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.workload.record_jobs({("default", "Pending"): 1}),
        lambda m: m.workload.record_job_finished("default", "Running"),
        lambda m: m.interruptions.record_interruption("spot", "NodeTaint", lost_seconds=1, gpus=1),
        lambda m: m.interruptions.record_checkpoint("Whenever"),
        lambda m: m.serving.record_autoscaler_decision(1, 2, "BecauseICan"),
        lambda m: m.process.record_reconcile("Deployment", 0.1),
        lambda m: m.pods.record("ml", "x", "Deployment", ["p"]),
        lambda m: m.workload.record_running_gangs({"Host": 1}),
        lambda m: m.carbon.record_carbon_source_error("Twitter"),
    ],
)
def test_label_values_outside_the_documented_sets_are_refused(metrics: Metrics, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="is not one of"):
        call(metrics)


@given(
    updates=st.lists(st.frozensets(st.sampled_from([f"llama-worker-{i}" for i in range(6)])), min_size=1, max_size=6)
)
def test_pod_info_always_matches_the_latest_pod_set(updates: list[frozenset[str]]) -> None:
    metrics = Metrics(CollectorRegistry(), process_metrics=False)
    metrics.pods.record("ml", "other", "TrainingJob", ["other-worker-0"])
    for pods in updates:
        metrics.pods.record("ml", "llama", "TrainingJob", pods)
    exposed = {
        sample.labels["pod"]
        for family in metrics.registry.collect()
        if family.name == "aisched_job_pod_info"
        for sample in family.samples
        if sample.labels["job_name"] == "llama"
    }
    assert exposed == set(updates[-1])
    metrics.workload.forget_job("ml", "llama")
    assert (
        value(
            metrics,
            "aisched_job_pod_info",
            namespace="ml",
            pod="other-worker-0",
            job_name="other",
            kind="TrainingJob",
        )
        == 1
    )
    assert not [s for f in metrics.registry.collect() for s in f.samples if s.labels.get("job_name") == "llama"]


def test_forgetting_a_job_drops_all_its_series(metrics: Metrics) -> None:
    metrics.workload.record_job_pending("ml", "llama", "default", datetime(2026, 1, 1, tzinfo=UTC))
    metrics.workload.record_deadline_slack("ml", "llama", 30)
    metrics.pods.record("ml", "llama", "TrainingJob", ["llama-worker-0"])
    metrics.workload.forget_job("ml", "llama")
    text = generate_latest(metrics.registry).decode()
    assert 'job_name="llama"' not in text


def test_forgetting_an_inference_service_drops_its_series(metrics: Metrics) -> None:
    metrics.serving.record_inference_service(
        "ml", "chat", desired=1, on_demand=1, spot=0, metric_per_replica=1.0, target_per_replica=2.0
    )
    metrics.pods.record("ml", "chat", "InferenceService", ["chat-0"])
    metrics.serving.forget_inference_service("ml", "chat")
    text = generate_latest(metrics.registry).decode()
    assert 'service="chat"' not in text
    assert 'job_name="chat"' not in text


def test_a_standby_reports_no_cluster_state_but_keeps_counters(metrics: Metrics) -> None:
    exercise(metrics)
    metrics.record_leadership(False)
    assert value(metrics, "aisched_leader") == 0
    assert value(metrics, "aisched_gpus_free", gpu_type="NVIDIA-H100-80GB-HBM3", capacity_type="Spot") is None
    assert value(metrics, "aisched_jobs", queue="default", phase="Queued") is None
    assert value(metrics, "aisched_interruptions_total", capacity_type="Spot", signal="NodeTaint") == 1
    assert value(metrics, "aisched_build_info", version=_version()) == 1


def _version() -> str:
    from importlib.metadata import version

    return version("aisched")


def test_names_follow_prometheus_conventions(metrics: Metrics) -> None:
    exercise(metrics)
    families = [f for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())]
    ours = [f for f in families if f.name.startswith("aisched_")]
    assert len(ours) >= 30
    for family in ours:
        assert family.documentation.strip(), family.name
        label_names = {name for sample in family.samples for name in sample.labels} - {"le"}
        assert not label_names & {"job", "instance"}, f"{family.name} uses a label Prometheus owns"
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), family.name
        else:
            assert not family.name.endswith("_total"), family.name
        if family.type == "histogram":
            assert family.name.endswith(("_seconds", "_domains")), family.name


def test_help_text_names_every_allowed_label_value(metrics: Metrics) -> None:
    exercise(metrics)
    for family in metrics.registry.collect():
        if not family.name.startswith("aisched_"):
            continue
        labels = {name for sample in family.samples for name in sample.labels}
        expected = {k: v for k, v in ENUMERATED_LABELS.items() if k in labels}
        expected.update(ENUMERATED_BY_METRIC.get(family.name, {}))
        for label, allowed in expected.items():
            assert "|".join(allowed) in family.documentation, f"{family.name}: help must list {label} values"


@pytest.mark.loopback  # the server itself, on 127.0.0.1 (tests/unit/conftest.py)
def test_serve_exposes_the_registry_over_http(metrics: Metrics) -> None:
    metrics.interruptions.record_checkpoint("Periodic")
    server, thread = serve(metrics, 0, address="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert 'aisched_checkpoints_total{reason="Periodic"} 1.0' in body
