"""What one replica sustains, measured as a user's load test would; and the calibration check.

`sustainable_load` replays the given requests' lengths (cycled) on one warm replica at a constant
rate for `duration_s`, and finds by bisection the highest rate at which `attainment` of them meet
both objectives; it reports that rate and the mean number of requests in the server (running plus
waiting) at it. This is how a user sets an HPA requests-per-second or a KPA concurrency target.

`calibration_check` measures the model against a published figure that was not fitted to: saturated
output throughput of Llama 3.1 8B (bf16) on one H100 with vLLM, about 12,500 output tokens/s
(morphllm.com/vllm-benchmarks, "Throughput Benchmarks", FlashInfer, 0.8 GPU memory utilisation;
lengths not stated there, so the check uses 1,000 prompt and 1,000 output tokens, a common setting).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from aisched.sim.llm.fleet import FleetSettings, Objectives, simulate_fleet
from aisched.sim.llm.server import Replica, Request, ServerModel
from aisched.sim.llm.trace import TraceRequest

PUBLISHED_H100_LLAMA31_8B_OUTPUT_TOKENS_PER_S = 12_500.0


@dataclass(frozen=True)
class SustainableLoad:
    requests_per_second: float
    concurrency: float


def sustainable_load(
    model: ServerModel,
    lengths: Sequence[TraceRequest],
    objectives: Objectives,
    *,
    attainment: float = 0.99,
    duration_s: float = 240.0,
    seed: int = 0,
) -> SustainableLoad:
    """The highest constant (Poisson) rate one replica serves within the objectives, and its concurrency there."""
    low, high = 0.1, 100.0
    best = SustainableLoad(low, 0.0)
    for _ in range(9):
        rate = (low * high) ** 0.5
        met, concurrency = _probe(model, lengths, objectives, rate=rate, duration_s=duration_s, seed=seed)
        if met >= attainment:
            low, best = rate, SustainableLoad(rate, concurrency)
        else:
            high = rate
    return best


def _probe(
    model: ServerModel,
    lengths: Sequence[TraceRequest],
    objectives: Objectives,
    *,
    rate: float,
    duration_s: float,
    seed: int,
) -> tuple[float, float]:
    rng = random.Random(seed)
    trace: list[TraceRequest] = []
    t, i = 0.0, 0
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s:
            break
        sample = lengths[i % len(lengths)]
        trace.append(TraceRequest(t, sample.prompt_tokens, sample.output_tokens))
        i += 1
    if not trace:
        return 1.0, 0.0
    outcome = simulate_fleet(trace, FleetSettings(model, objectives, initial_replicas=1), None, drain_s=120.0)
    # Little's law: requests in the server = arrival rate x mean time in it (about TTFT + decode time).
    return outcome.slo_attainment, rate * outcome.mean_time_in_server_s


def saturated_output_throughput(model: ServerModel, prompt_tokens: int = 1000, output_tokens: int = 1000) -> float:
    """Output tokens per second of one replica given far more identical requests than it can batch at once."""
    replica = Replica(model, created_at=0.0, ready_at=0.0)
    count = 4 * model.max_running
    for _ in range(count):
        replica.submit(Request(0.0, prompt_tokens, output_tokens))
    replica.advance(10_000.0)
    last = max(r.finished_at or 0.0 for r in replica.finished)
    return count * output_tokens / last


def calibration_check(model: ServerModel) -> dict[str, float]:
    simulated = saturated_output_throughput(model)
    return {
        "published_output_tokens_per_s": PUBLISHED_H100_LLAMA31_8B_OUTPUT_TOKENS_PER_S,
        "simulated_output_tokens_per_s": round(simulated, 1),
        "ratio": round(simulated / PUBLISHED_H100_LLAMA31_8B_OUTPUT_TOKENS_PER_S, 3),
    }
