"""aisched.sim.llm: the continuously-batching server model, the fleet, the peers and the trace reader."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from aisched.sim.llm.arms import Scenario, peak_rate, run_arms
from aisched.sim.llm.capacity import saturated_output_throughput
from aisched.sim.llm.fleet import FleetSettings, FleetView, Objectives, ReplicaGauges, simulate_fleet
from aisched.sim.llm.peers import HpaBehavior, KedaOnQueue, Kpa, Saturation
from aisched.sim.llm.server import H100_LLAMA3_8B, Replica, Request
from aisched.sim.llm.trace import TraceRequest, read_azure_trace, scale_trace, window

SMALL_KV = replace(H100_LLAMA3_8B, kv_capacity_tokens=10_000, load_time_s=30.0)


def served(replica: Replica, until: float = 1_000.0) -> list[Request]:
    replica.advance(until)
    return replica.finished


def test_prefill_time_grows_with_prompt_and_decode_step_with_batch_and_context() -> None:
    model = H100_LLAMA3_8B
    assert model.step_seconds(0, 0, 4096) > 1.8 * model.step_seconds(0, 0, 2048)
    assert model.step_seconds(256, 0, 0) > model.step_seconds(1, 0, 0)
    assert model.step_seconds(64, 200_000, 0) > model.step_seconds(64, 10_000, 0)
    # A lone decode step of an 8B model on an H100: weight-read bound, about 6-10 ms.
    assert 0.006 < model.step_seconds(1, 1000, 0) < 0.010


def test_one_request_gets_its_first_token_after_prefill_then_one_token_a_step() -> None:
    replica = Replica(H100_LLAMA3_8B, created_at=0.0, ready_at=0.0)
    request = Request(0.0, prompt_tokens=1000, output_tokens=101)
    replica.submit(request)
    (done,) = served(replica)
    assert done.ttft() == pytest.approx(H100_LLAMA3_8B.step_seconds(0, 0, 1000))
    assert 0.006 < done.tpot() < 0.012


def test_long_prompt_waits_for_kv_room_and_blocks_the_queue_behind_it() -> None:
    replica = Replica(SMALL_KV, created_at=0.0, ready_at=0.0)
    holder = Request(0.0, prompt_tokens=6000, output_tokens=200)
    long_prompt = Request(0.0, prompt_tokens=5000, output_tokens=5)
    short = Request(0.0, prompt_tokens=100, output_tokens=5)
    for request in (holder, long_prompt, short):
        replica.submit(request)
    replica.advance(0.05)
    assert long_prompt in replica.waiting and short in replica.waiting  # FCFS: no overtaking
    served(replica)
    assert holder.finished_at is not None and long_prompt.first_token_at is not None
    assert long_prompt.first_token_at >= holder.finished_at - 1e-9
    assert short.first_token_at is not None and short.first_token_at >= long_prompt.first_token_at


def test_decode_growth_past_kv_preempts_the_newest_and_everything_still_finishes() -> None:
    replica = Replica(SMALL_KV, created_at=0.0, ready_at=0.0)
    requests = [Request(0.0, prompt_tokens=2000, output_tokens=1500) for _ in range(4)]
    for request in requests:
        replica.submit(request)
    done = served(replica, until=10_000.0)
    assert len(done) == 4
    assert all(r.finished_at is not None for r in requests)
    assert replica.kv_used() == 0 and replica.in_flight() == 0


def test_a_booting_replica_serves_nothing_until_it_is_ready() -> None:
    replica = Replica(SMALL_KV, created_at=0.0, ready_at=30.0)
    request = Request(0.0, prompt_tokens=100, output_tokens=2)
    replica.submit(request)
    served(replica)
    assert request.first_token_at is not None and request.first_token_at > 30.0


def test_batching_multiplies_throughput_over_one_stream() -> None:
    one = Replica(H100_LLAMA3_8B, created_at=0.0, ready_at=0.0)
    one.submit(Request(0.0, 1000, 1000))
    (alone,) = served(one, until=100.0)
    single_stream = 1000 / (alone.finished_at or 1.0)
    assert saturated_output_throughput(H100_LLAMA3_8B) > 20 * single_stream


def steady(rate: float, seconds: float, prompt: int = 500, output: int = 50) -> list[TraceRequest]:
    gap = 1 / rate
    return [TraceRequest(i * gap, prompt, output) for i in range(int(seconds * rate))]


def test_fleet_attains_the_objectives_when_it_has_room_and_counts_gpu_time() -> None:
    settings = FleetSettings(SMALL_KV, Objectives(), initial_replicas=2)
    outcome = simulate_fleet(steady(2.0, 300.0), settings, None)
    assert outcome.slo_attainment == 1.0
    assert outcome.gpu_hours == pytest.approx(2 * 300.0 / 3600, rel=0.01)
    overloaded = simulate_fleet(steady(200.0, 120.0, prompt=4000), replace(settings, initial_replicas=1), None)
    assert overloaded.slo_attainment < 0.5


def view(ready: list[ReplicaGauges], booting: int = 0, now: float = 100.0, rate: float = 0.0) -> FleetView:
    return FleetView(now, tuple(ready), booting, rate, None, None, (), 0)


def test_keda_asks_for_one_replica_per_five_waiting_and_holds_scale_down() -> None:
    keda = KedaOnQueue(HpaBehavior(1, 10))
    assert keda.decide(view([ReplicaGauges(30, 10, 0.5)])) == 5  # 6 wanted; HPA allows +4 pods (or 100%) a step
    assert keda.decide(view([ReplicaGauges(0, 10, 0.5)] * 5, now=115.0)) == 5  # stabilised


def test_kpa_panics_on_a_burst_and_does_not_scale_down_in_panic() -> None:
    kpa = Kpa(target_concurrency=10, min_replicas=1, max_replicas=50)
    for t in range(0, 60, 5):
        kpa.decide(view([ReplicaGauges(0, 5, 0.1)] * 2, now=float(t)))
    burst = kpa.decide(view([ReplicaGauges(40, 60, 0.9)] * 2, now=60.0))
    assert burst >= 4 and kpa.panicking_since == 60.0
    assert kpa.decide(view([ReplicaGauges(0, 1, 0.0)] * burst, now=65.0)) == burst


def test_saturation_adds_one_replica_when_spare_kv_runs_low_and_none_is_pending() -> None:
    saturation = Saturation(HpaBehavior(1, 10))
    tight = [ReplicaGauges(0, 100, 0.75), ReplicaGauges(0, 100, 0.75)]
    assert saturation.decide(view(tight)) == 3
    assert saturation.decide(view(tight, booting=1, now=115.0)) == 3


def test_every_arm_runs_on_a_small_trace() -> None:
    trace = steady(5.0, 240.0)
    result = run_arms(trace, 120.0, Scenario(SMALL_KV, Objectives(), max_replicas=4))
    assert set(result["arms"]) == {"aisched", "hpa", "keda", "aibrix_kpa", "saturation", "static_peak"}
    for outcome in result["arms"].values():
        assert 0.0 <= outcome["slo_attainment"] <= 1.0 and outcome["gpu_hours"] > 0
    assert peak_rate(trace) == pytest.approx(5.0, rel=0.05)


def test_azure_trace_is_read_relative_to_its_first_row_and_scaled(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:47.5000000,200,0\n"
        "2023-11-16 18:15:46.5000000,100,10\n"
    )
    trace = read_azure_trace(path)
    assert trace == [TraceRequest(0.0, 100, 10), TraceRequest(1.0, 200, 1)]
    scaled = scale_trace(trace, 3, seed=1)
    assert len(scaled) == 6 and scaled == sorted(scaled, key=lambda r: r.arrival_s)
    assert window(scaled, 0.5, 10.0)[0].arrival_s >= 0.0
