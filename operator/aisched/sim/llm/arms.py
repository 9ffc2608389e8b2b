"""Every arm on one trace, the same model, cold start, max and scrape: SLO attainment and GPU-hours.

The trace is split in two: the first part is the service's past, the rest is what the arms are
judged on. From the past come the load test that sets `hpa`'s and `aibrix_kpa`'s per-replica targets
(aisched.sim.llm.capacity.sustainable_load, on the past's request lengths) and the fleet every arm
starts the past with (its first minute's rate over that sustainable rate). Every arm then runs
through the past (its warm-up: its windows and histories fill as they would have in production) and
on into the judged part, where requests and GPU-hours are counted. `static_peak` alone reads the
judged part: its fleet is sized for its peak minute, which no real autoscaler knows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from aisched.policy.llm_scaling import LatencyObjectives
from aisched.sim.llm.capacity import sustainable_load
from aisched.sim.llm.fleet import Autoscaler, FleetSettings, Objectives, simulate_fleet
from aisched.sim.llm.peers import AischedLlm, HpaBehavior, HpaOnRate, KedaOnQueue, Kpa, Saturation, aisched_spec
from aisched.sim.llm.server import ServerModel
from aisched.sim.llm.trace import TraceRequest

ARMS = ("aisched", "hpa", "keda", "aibrix_kpa", "saturation", "static_peak")
TARGET_FRACTION = 0.7
KNEW = {
    "aisched": "scraped gauges (waiting, running, KV usage), TTFT/TPOT percentiles of the last minute, "
    "the arrival counter, its own replicas' boot times and its own past load",
    "hpa": "the arrival counter's rate per replica; a target from a load test on the tuning part",
    "keda": "vllm:num_requests_waiting summed over ready replicas (threshold 5)",
    "aibrix_kpa": "running plus waiting requests per replica (stable 60 s / panic 6 s means); "
    "a target from a load test on the tuning part",
    "saturation": "per-replica KV usage and queue length, and whether a replica is pending",
    "static_peak": "the evaluated trace's peak one-minute rate (the future)",
}


@dataclass(frozen=True)
class Scenario:
    model: ServerModel
    objectives: Objectives
    max_replicas: int
    scrape_s: float = 5.0
    load_test_s: float = 240.0


def peak_rate(trace: Sequence[TraceRequest], window_s: float = 60.0) -> float:
    """The most requests in any WINDOW_S starting at a request, per second."""
    times = [r.arrival_s for r in trace]
    best, j = 0, 0
    for i, start in enumerate(times):
        while j < len(times) and times[j] < start + window_s:
            j += 1
        best = max(best, j - i)
    return best / window_s


def build_arm(name: str, scenario: Scenario, rps_target: float, concurrency_target: float) -> Autoscaler:
    top = scenario.max_replicas
    if name == "hpa":
        return HpaOnRate(rps_target, HpaBehavior(1, top))
    if name == "keda":
        return KedaOnQueue(HpaBehavior(1, top))
    if name == "aibrix_kpa":
        return Kpa(concurrency_target, 1, top)
    if name == "saturation":
        return Saturation(HpaBehavior(1, top))
    if name == "aisched":
        o = scenario.objectives
        objectives = LatencyObjectives(o.ttft_s, o.tpot_s, o.percentile)
        return AischedLlm(aisched_spec(top, objectives, rps_target / TARGET_FRACTION), quota_replicas=top)
    raise KeyError(name)


def run_arms(
    trace: Sequence[TraceRequest], judged_from_s: float, scenario: Scenario, arms: Sequence[str] = ARMS
) -> dict[str, Any]:
    """Each arm's outcome on TRACE's requests from JUDGED_FROM_S, configured from the ones before (see the module)."""
    past = [r for r in trace if r.arrival_s < judged_from_s]
    judged = [r for r in trace if r.arrival_s >= judged_from_s]
    sustainable = sustainable_load(scenario.model, past, scenario.objectives, duration_s=scenario.load_test_s)
    rps_target = TARGET_FRACTION * sustainable.requests_per_second
    concurrency_target = max(1.0, TARGET_FRACTION * sustainable.concurrency)
    first_minute = sum(1 for r in past if r.arrival_s < 60.0) / 60.0
    initial = min(scenario.max_replicas, max(1, math.ceil(first_minute / sustainable.requests_per_second)))
    peak = peak_rate(judged)
    static = min(scenario.max_replicas, max(1, math.ceil(peak / sustainable.requests_per_second)))
    start, whole = judged_from_s, list(trace)
    outcomes: dict[str, Any] = {}
    for name in arms:
        if name == "static_peak":
            settings = FleetSettings(scenario.model, scenario.objectives, scenario.scrape_s, static)
            outcome = simulate_fleet(whole, settings, None, measure_from_s=start)
        else:
            settings = FleetSettings(scenario.model, scenario.objectives, scenario.scrape_s, initial)
            arm = build_arm(name, scenario, rps_target, concurrency_target)
            outcome = simulate_fleet(whole, settings, arm, measure_from_s=start)
        outcomes[name] = {
            key: round(value, 5) if isinstance(value, float) else value for key, value in asdict(outcome).items()
        }
    return {
        "arms": outcomes,
        "load_test": {
            "sustainable_rps_per_replica": round(sustainable.requests_per_second, 3),
            "concurrency_at_sustainable": round(sustainable.concurrency, 2),
            "hpa_target_rps_per_replica": round(rps_target, 3),
            "kpa_target_concurrency": round(concurrency_target, 2),
        },
        "initial_replicas": initial,
        "static_peak_replicas": static,
        "judged_requests": len(judged),
        "judged_peak_rps": round(peak, 2),
        "judged_mean_rps": round(len(judged) / max(1.0, judged[-1].arrival_s - start), 2) if judged else 0.0,
    }
