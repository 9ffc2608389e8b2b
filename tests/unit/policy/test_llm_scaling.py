"""aisched.policy.llm_scaling: replicas from queue, KV, latency and forecast; bounds; presets; history."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.api.inference_service import AutoscalingSpec
from aisched.policy.llm_scaling import (
    SGLANG,
    TGI,
    VLLM,
    ColdStartEstimate,
    LatencyObjectives,
    LlmScalingSpec,
    LoadHistory,
    ScalingMemory,
    ServiceSignals,
    decide_llm_replicas,
    engine_preset,
    llm_scaling_spec,
)
from aisched.policy.llm_scaling.history import DAY_S


def signals(
    *,
    ready: int = 2,
    booting: int = 0,
    waiting: int = 0,
    running: int = 20,
    kv: float = 0.4,
    rate: float = 10.0,
    ttft: float | None = 0.3,
    tpot: float | None = 0.03,
) -> ServiceSignals:
    return ServiceSignals(ready, booting, waiting, running, kv, rate, ttft, tpot)


SPEC = LlmScalingSpec(min_replicas=1, max_replicas=20)


def decide(
    spec: LlmScalingSpec, observed: ServiceSignals, memory: ScalingMemory | None = None, quota: int = 100
) -> int:
    decision, _ = decide_llm_replicas(spec, observed, memory or ScalingMemory(), quota, now=1000.0)
    return decision.replicas


def test_quiet_service_keeps_its_fleet() -> None:
    assert decide(SPEC, signals()) == 2


def test_kv_pressure_scales_up_before_latency_breaks() -> None:
    # Latency still fine, KV at 95% on both replicas: more replicas now, not after the breach.
    assert decide(SPEC, signals(kv=1.9, running=200, ttft=0.3, tpot=0.03)) >= 3


def test_queue_of_long_prompts_scales_up_with_kv_to_spare() -> None:
    assert decide(SPEC, signals(waiting=40, running=8, kv=0.3)) > 2


def test_ttft_past_headroom_scales_up() -> None:
    assert decide(SPEC, signals(ttft=1.9)) > 2


def test_latency_scaling_at_most_doubles_ready_replicas() -> None:
    assert decide(SPEC, signals(ttft=60.0, kv=0.1, running=4)) == 4


def test_load_tested_capacity_sizes_for_the_rate() -> None:
    spec = LlmScalingSpec(max_replicas=50, replica_capacity_rps=10.0, rate_utilisation_target=0.9)
    assert decide(spec, signals(rate=90.0, kv=0.1)) == 10


def test_scale_down_waits_for_the_window() -> None:
    memory = ScalingMemory(recommendations=((900.0, 6),))
    assert decide(SPEC, signals(ready=6, running=6, kv=0.1), memory) == 6
    old = ScalingMemory(recommendations=((500.0, 6),))
    assert decide(SPEC, signals(ready=6, running=6, kv=0.1), old) < 6


def test_first_decision_does_not_shrink_an_empty_new_fleet() -> None:
    assert decide(SPEC, signals(ready=5, running=0, kv=0.0, rate=0.0)) == 5


def test_scale_to_zero_only_when_allowed_and_idle() -> None:
    idle = signals(ready=1, running=0, kv=0.0, rate=0.0, ttft=None, tpot=None)
    long_ago = ScalingMemory(recommendations=((100.0, 1),), last_arrival_at=0.0)
    allowed = LlmScalingSpec(min_replicas=0, scale_to_zero=True, idle_before_zero_s=600)
    assert decide(allowed, idle, long_ago) == 0
    assert decide(LlmScalingSpec(min_replicas=0), idle, long_ago) == 1
    assert decide(allowed, idle, ScalingMemory(recommendations=((100.0, 1),), last_arrival_at=900.0)) == 1


def test_request_held_at_the_service_wakes_a_zero_fleet() -> None:
    allowed = LlmScalingSpec(min_replicas=0, scale_to_zero=True)
    woken = signals(ready=0, waiting=1, running=0, kv=0.0, rate=0.0, ttft=None, tpot=None)
    assert decide(allowed, woken, ScalingMemory(recommendations=((999.0, 0),))) == 1


def test_quota_caps_the_decision() -> None:
    assert decide(SPEC, signals(kv=1.9, running=200, ttft=5.0), quota=3) == 3


def test_forecast_reads_the_same_time_yesterday() -> None:
    yesterday = tuple((1000.0 - DAY_S + t, 10.0 if t < 100 else 40.0) for t in range(-600, 900, 60))
    history = LoadHistory(samples=yesterday)
    assert history.forecast(1000.0, 10.0, horizon_s=300.0) == pytest.approx(40.0)
    assert LoadHistory().forecast(1000.0, 10.0, horizon_s=300.0) == 10.0


def test_forecast_scales_ahead_by_the_learned_cold_start() -> None:
    yesterday = tuple((1000.0 - DAY_S + t, 10.0 if t < 100 else 40.0) for t in range(-600, 900, 60))
    spec = LlmScalingSpec(max_replicas=50, replica_capacity_rps=10.0, rate_utilisation_target=1.0)
    memory = ScalingMemory(load=LoadHistory(samples=yesterday), cold_start=ColdStartEstimate((200.0,)))
    decision, _ = decide_llm_replicas(spec, signals(rate=10.0, kv=0.1), memory, 100, now=1000.0)
    assert decision.replicas == 4
    assert decision.reason == "forecast"


def test_cold_start_is_a_high_quantile_of_observed_boots() -> None:
    estimate = ColdStartEstimate(prior_s=60.0)
    assert estimate.seconds() == 60.0
    for seconds in (100.0, 110.0, 120.0, 130.0, 400.0, -5.0, math.nan):
        estimate = estimate.observe(seconds)
    assert estimate.durations_s == (100.0, 110.0, 120.0, 130.0, 400.0)
    assert estimate.seconds() == 400.0


def test_engine_presets_name_each_engines_series() -> None:
    assert VLLM.waiting == "vllm:num_requests_waiting"
    assert VLLM.kv_usage == "vllm:kv_cache_usage_perc"
    assert SGLANG.waiting == "sglang:num_queue_reqs"
    assert SGLANG.kv_usage == "sglang:token_usage"
    assert TGI.waiting == "tgi_queue_size"
    assert TGI.kv_usage is None


def test_engine_preset_overrides_are_checked() -> None:
    assert engine_preset("vllm", {"waiting": "my:queue"}).waiting == "my:queue"
    with pytest.raises(ValueError, match="metric name"):
        engine_preset("vllm", {"waiting": 'x"} or vector(1)'})
    with pytest.raises(KeyError):
        engine_preset("vllm", {"engine": "tgi"})
    with pytest.raises(KeyError):
        engine_preset("nope")


counts = st.integers(min_value=0, max_value=5000)
optional_seconds = st.one_of(st.none(), st.floats(min_value=0, max_value=1000, allow_nan=False))
any_signals = st.builds(
    ServiceSignals,
    ready_replicas=st.integers(0, 64),
    booting_replicas=st.integers(0, 64),
    waiting=counts,
    running=counts,
    kv_usage_sum=st.floats(min_value=0, max_value=64, allow_nan=False),
    arrival_rate=st.floats(min_value=0, max_value=1e4, allow_nan=False),
    ttft_percentile_s=optional_seconds,
    tpot_percentile_s=optional_seconds,
)
any_spec = st.builds(
    LlmScalingSpec,
    min_replicas=st.integers(0, 10),
    max_replicas=st.integers(0, 80),
    objectives=st.just(LatencyObjectives()),
    scale_to_zero=st.booleans(),
    replica_capacity_rps=st.one_of(st.none(), st.floats(min_value=0.01, max_value=100)),
)
any_memory = st.builds(
    ScalingMemory,
    recommendations=st.lists(st.tuples(st.floats(0, 999), st.integers(0, 100)), max_size=5).map(tuple),
    rate_per_replica=st.one_of(st.none(), st.floats(min_value=0.01, max_value=100)),
    last_arrival_at=st.one_of(st.none(), st.floats(0, 1000)),
)


@settings(max_examples=300, deadline=None)
@given(spec=any_spec, observed=any_signals, memory=any_memory, quota=st.integers(-5, 80))
def test_decision_stays_within_max_and_quota_and_serves_in_flight(
    spec: LlmScalingSpec, observed: ServiceSignals, memory: ScalingMemory, quota: int
) -> None:
    decision, remembered = decide_llm_replicas(spec, observed, memory, quota, 1000.0)
    cap = max(0, min(spec.max_replicas, quota))
    in_flight_need = math.ceil((observed.waiting + observed.running) / spec.max_running_per_replica)
    assert 0 <= decision.replicas <= cap
    assert decision.replicas >= min(cap, in_flight_need)
    assert decision.in_flight_floor == min(cap, in_flight_need)
    assert remembered.recommendations[-1] == (1000.0, remembered.recommendations[-1][1])


# -- the spec's per-minute caps ---------------------------------------------------------------

RATE_NEED = signals(rate=90.0, kv=0.1)  # 10 replicas at 10 requests/s each, run at 90%


def test_unset_caps_leave_the_law_as_it_was() -> None:
    spec = LlmScalingSpec(max_replicas=50, replica_capacity_rps=10.0)
    assert spec.max_scale_up_per_minute is None and decide(spec, RATE_NEED) == 10


def test_a_scale_up_cap_counts_what_the_last_minute_added() -> None:
    spec = LlmScalingSpec(max_replicas=50, replica_capacity_rps=10.0, max_scale_up_per_minute=3)
    first, memory = decide_llm_replicas(spec, RATE_NEED, ScalingMemory(), 100, now=1000.0)
    assert (first.replicas, first.reason) == (5, "rate limited")
    again, memory = decide_llm_replicas(spec, signals(ready=5, rate=90.0, kv=0.1), memory, 100, now=1030.0)
    assert again.replicas == 5  # the minute's three are spent
    later, _ = decide_llm_replicas(spec, signals(ready=5, rate=90.0, kv=0.1), memory, 100, now=1061.0)
    assert later.replicas == 8


def test_a_scale_down_cap_removes_that_many_a_minute() -> None:
    spec = LlmScalingSpec(max_scale_down_per_minute=2)
    old = ScalingMemory(recommendations=((500.0, 6),))
    assert decide(SPEC, signals(ready=6, running=6, kv=0.1), old) == 1
    assert decide(spec, signals(ready=6, running=6, kv=0.1), old) == 4


def test_caps_never_hold_a_fleet_below_its_floor_nor_at_it_when_it_may_sleep() -> None:
    capped = {"max_scale_up_per_minute": 1, "max_scale_down_per_minute": 1}
    raised = LlmScalingSpec(min_replicas=4, max_replicas=20, **capped)  # type: ignore[arg-type]
    assert decide(raised, signals(ready=1, running=1, kv=0.1)) == 4
    sleepy = LlmScalingSpec(min_replicas=0, scale_to_zero=True, idle_before_zero_s=600, **capped)  # type: ignore[arg-type]
    idle = signals(ready=1, running=0, kv=0.0, rate=0.0, ttft=None, tpot=None)
    assert decide(sleepy, idle, ScalingMemory(recommendations=((100.0, 1),), last_arrival_at=0.0)) == 0
    woken = signals(ready=0, waiting=1, running=0, kv=0.0, rate=0.0, ttft=None, tpot=None)
    assert decide(sleepy, woken, ScalingMemory(recommendations=((999.0, 0),))) == 1


def test_a_fleet_above_its_max_or_quota_comes_down_at_once_whatever_its_cap() -> None:
    spec = LlmScalingSpec(max_replicas=3, max_scale_down_per_minute=1)
    assert decide(spec, signals(ready=6, running=60, kv=1.0)) == 3
    assert decide(LlmScalingSpec(max_replicas=20, max_scale_down_per_minute=1), signals(ready=6), quota=2) == 2


@settings(max_examples=200, deadline=None)
@given(
    up=st.integers(1, 5),
    down=st.integers(1, 5),
    rates=st.lists(st.floats(0, 400), min_size=2, max_size=30),
    steps=st.lists(st.sampled_from((5.0, 15.0, 30.0, 61.0)), min_size=30, max_size=30),
)
def test_no_minute_changes_the_fleet_by_more_than_its_caps(
    up: int, down: int, rates: list[float], steps: list[float]
) -> None:
    spec = LlmScalingSpec(
        max_replicas=60, replica_capacity_rps=10.0, max_scale_up_per_minute=up, max_scale_down_per_minute=down
    )
    memory, replicas, now, history = ScalingMemory(), 2, 1000.0, [(1000.0, 2)]
    for rate, step in zip(rates, steps, strict=False):
        now += step
        observed = signals(ready=replicas, running=replicas, kv=0.1 * replicas, rate=rate)
        decision, memory = decide_llm_replicas(spec, observed, memory, 100, now)
        replicas = decision.replicas
        history.append((now, replicas))
        minute_ago = [n for t, n in history if now - t >= 60.0]
        start = minute_ago[-1] if minute_ago else history[0][1]
        assert start - down <= replicas <= start + up or replicas == max(1, spec.min_replicas), history


def test_a_manifests_caps_reach_the_policy_and_unset_ones_stay_unset() -> None:
    def translated(**caps: int) -> LlmScalingSpec:
        autoscaling = AutoscalingSpec.model_validate(
            {"minReplicas": 1, "maxReplicas": 8, "metric": {"type": "LLM", "llm": {}}, **caps}
        )
        assert autoscaling.metric.llm is not None
        return llm_scaling_spec(autoscaling, autoscaling.metric.llm, sync_period_s=15.0)

    unset = translated()
    assert (unset.max_scale_up_per_minute, unset.max_scale_down_per_minute) == (None, None)
    assert unset == LlmScalingSpec(min_replicas=1, max_replicas=8)  # the API's defaults are the policy's
    capped = translated(maxScaleUpReplicasPerMinute=2, maxScaleDownReplicasPerMinute=1)
    assert (capped.max_scale_up_per_minute, capped.max_scale_down_per_minute) == (2, 1)
