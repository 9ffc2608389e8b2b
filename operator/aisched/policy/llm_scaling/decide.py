"""How many replicas an LLM service needs now, from what its servers report and its own past.

The signals are the ones a continuously-batching server exports (aisched.policy.llm_scaling.engines):
the queue, the running batch, the KV cache's fill, and the TTFT / TPOT percentiles. Each gives a
number of replicas; the largest wins:

- KV pressure: the KV in use over the fill one replica should run at (`kv_usage_target`).
  KV, not the request count, bounds a batch, so this is the capacity a long-context burst eats.
- Concurrency: running plus waiting requests over the batch a replica holds at that fill, learned
  from the ratio of running requests to KV in use (long prompts: fewer requests per replica).
- Queue: when more than `waiting_per_replica_target` requests wait per replica (a compute-bound
  queue, long prompts and short answers, with KV to spare), replicas in proportion to the excess.
- Latency: a percentile past `latency_headroom` of its objective scales the ready replicas by the
  ratio, at most doubling them in one decision. The three above act before this one has to.
- Rate: the arrival rate over what one replica carries within the objectives, run at
  `rate_utilisation_target`. The starting figure is the spec's `replica_capacity_rps` (a load
  test's, as one sets an HPA target); the service corrects it from its own life: down 10% when a
  latency objective is at risk while replicas carried less than it, up 1% per healthy decision,
  within half and all of the load test's figure. KV and queue alone miss the compute-bound limit
  of short requests (prefill and decode time, not memory, is what runs out); this catches it.
- Ahead of load: the same rate need at the rate forecast for now + the replicas' own cold start
  (history.LoadHistory.forecast, from the service's own past, never the future).

The defaults of the targets and the window were chosen on the first 20 minutes of the Azure code
and conversation traces (benchmarks/serving.py judges on the remaining 40 of each): a 120 s window
was cheaper on the conversation trace's steady load but lost the code trace's bursts, which recur
after lulls shorter than a cold start plus a window; 300 s (also HPA's default) held on both.

Scale-down is conservative: the fleet only shrinks to the largest need recommended within
`scale_down_window_s`, never below the replicas its in-flight requests need, and to zero only
when the spec allows it and no request has arrived for `idle_before_zero_s`. Every decision is
capped by the spec's max and the quota the caller passes in, and, where the spec sets them, by
`max_scale_up_per_minute` / `max_scale_down_per_minute`: the replicas added (removed) over the last
60 s, as HPA's Pods policy counts them. They win over every need but the bounds: the way up to the
floor, from the floor to zero, and down to the max or the quota, is taken at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from aisched.policy.llm_scaling.history import ColdStartEstimate, LoadHistory


@dataclass(frozen=True)
class LatencyObjectives:
    """TTFT and TPOT that `percentile` of requests must meet."""

    ttft_s: float = 2.0
    tpot_s: float = 0.1
    percentile: float = 0.95


@dataclass(frozen=True)
class LlmScalingSpec:
    min_replicas: int = 1
    max_replicas: int = 16
    objectives: LatencyObjectives = LatencyObjectives()
    scale_to_zero: bool = False
    kv_usage_target: float = 0.8
    waiting_per_replica_target: float = 2.0
    latency_headroom: float = 0.7
    scale_down_window_s: float = 300.0
    idle_before_zero_s: float = 600.0
    max_running_per_replica: int = 256
    sync_period_s: float = 15.0
    replica_capacity_rps: float | None = None
    rate_utilisation_target: float = 0.9
    max_scale_up_per_minute: int | None = None
    """None: no cap (the latency need at most doubles the ready replicas in one decision)."""
    max_scale_down_per_minute: int | None = None
    """None: no cap (the scale-down window already holds the fleet at its recent need)."""


@dataclass(frozen=True)
class ServiceSignals:
    """One scrape of the service's ready replicas, summed; percentiles over the last minute (None: no data)."""

    ready_replicas: int
    booting_replicas: int
    waiting: int
    running: int
    kv_usage_sum: float
    arrival_rate: float
    ttft_percentile_s: float | None = None
    tpot_percentile_s: float | None = None


@dataclass(frozen=True)
class ScalingMemory:
    """What one decision hands the next: recent recommendations, the load history, the learned constants."""

    recommendations: tuple[tuple[float, int], ...] = ()
    load: LoadHistory = field(default_factory=LoadHistory)
    cold_start: ColdStartEstimate = field(default_factory=ColdStartEstimate)
    rate_per_replica: float | None = None
    last_arrival_at: float | None = None
    changes: tuple[tuple[float, int], ...] = ()
    """(when, replicas added or removed) of the decisions of the last `RATE_PERIOD_S`."""


RATE_PERIOD_S = 60.0


@dataclass(frozen=True)
class ScalingDecision:
    replicas: int
    reason: str
    need_now: float
    need_ahead: float
    in_flight_floor: int


def decide_llm_replicas(
    spec: LlmScalingSpec, signals: ServiceSignals, memory: ScalingMemory, quota_replicas: int, now: float
) -> tuple[ScalingDecision, ScalingMemory]:
    """The replica count for the service at NOW, and the memory for the next call.

    QUOTA_REPLICAS is the most replicas the service's quota allows at this moment; the answer never
    exceeds it or the spec's max, and never falls below what the in-flight requests need within those.
    """
    current = signals.ready_replicas + signals.booting_replicas
    in_flight = max(0, signals.running) + max(0, signals.waiting)
    last_arrival = now if signals.arrival_rate > 0 or in_flight > 0 else memory.last_arrival_at
    need_now, reason = _need_now(spec, signals)
    rate_per_replica = _corrected_capacity(spec, signals, memory.rate_per_replica)
    need_ahead = 0.0
    if rate_per_replica:
        usable = rate_per_replica * spec.rate_utilisation_target
        if signals.arrival_rate / usable > need_now:
            need_now, reason = signals.arrival_rate / usable, "rate"
        horizon = memory.cold_start.seconds() + spec.sync_period_s
        need_ahead = memory.load.forecast(now, signals.arrival_rate, horizon) / usable
        if need_ahead > need_now:
            reason = "forecast"
    raw = math.ceil(max(need_now, need_ahead) - 1e-9)
    if signals.ready_replicas == 0 and (in_flight > 0 or signals.arrival_rate > 0):
        raw = max(raw, 1, signals.booting_replicas)  # a request held at the Service wakes the fleet
    # A first decision has seen no window yet: it counts the fleet as it found it as recommended,
    # so a fleet that has just started (its gauges still empty) is not shrunk on no evidence.
    past = memory.recommendations or ((now, current),)
    window = (*(r for r in past if now - r[0] < spec.scale_down_window_s), (now, raw))
    desired = raw if raw >= current else min(current, max(r for _, r in window))
    if desired < raw:
        reason = "stabilising"
    idle = last_arrival is None or now - last_arrival >= spec.idle_before_zero_s
    floor = spec.min_replicas if (spec.scale_to_zero and idle and in_flight == 0) else max(1, spec.min_replicas)
    in_flight_floor = math.ceil(in_flight / spec.max_running_per_replica)
    cap = max(0, min(spec.max_replicas, quota_replicas))
    replicas = min(cap, max(desired, floor, in_flight_floor))
    if replicas == cap and cap < max(desired, floor, in_flight_floor):
        reason = "capped"
    changes = tuple(c for c in memory.changes if now - c[0] < RATE_PERIOD_S)
    limited = _rate_limited(spec, current, replicas, (min(cap, max(1, spec.min_replicas)), cap), changes)
    if limited != replicas:
        replicas, reason = limited, "rate limited"
    decision = ScalingDecision(replicas, reason, need_now, need_ahead, min(cap, in_flight_floor))
    remembered = replace(
        memory,
        recommendations=window,
        load=memory.load.record(now, signals.arrival_rate),
        rate_per_replica=rate_per_replica,
        last_arrival_at=last_arrival,
        changes=(*changes, (now, replicas - current)) if replicas != current else changes,
    )
    return decision, remembered


def _rate_limited(
    spec: LlmScalingSpec,
    current: int,
    replicas: int,
    bounds: tuple[int, int],
    changes: tuple[tuple[float, int], ...],
) -> int:
    """REPLICAS within the spec's per-minute caps, counted from the fleet of a minute ago (CHANGES since).

    BOUNDS (floor, ceiling) win over them: a fleet below the floor rises to it at once, one at it leaves for
    zero at once, and one above its max or its quota comes down to it at once."""
    floor, ceiling = bounds
    period_start = current - sum(change for _, change in changes)
    if replicas > current and spec.max_scale_up_per_minute is not None:
        return min(replicas, max(current, floor, period_start + spec.max_scale_up_per_minute))
    if replicas < current and spec.max_scale_down_per_minute is not None and not (replicas == 0 and current <= floor):
        return min(ceiling, max(replicas, min(current, period_start - spec.max_scale_down_per_minute)))
    return replicas


def _corrected_capacity(spec: LlmScalingSpec, signals: ServiceSignals, learned: float | None) -> float | None:
    """The rate one replica carries within the objectives, corrected by what this decision saw."""
    tested = spec.replica_capacity_rps
    if tested is None or tested <= 0:
        return None
    capacity = learned if learned is not None else tested
    ready = signals.ready_replicas
    if ready == 0:
        return capacity
    objectives = spec.objectives
    at_risk = any(
        observed is not None and observed > spec.latency_headroom * objective
        for observed, objective in (
            (signals.ttft_percentile_s, objectives.ttft_s),
            (signals.tpot_percentile_s, objectives.tpot_s),
        )
    )
    carried = signals.arrival_rate / ready
    if at_risk and carried < capacity:
        capacity *= 0.9
    elif not at_risk:
        capacity *= 1.01
    return min(tested, max(0.5 * tested, capacity))


def _need_now(spec: LlmScalingSpec, signals: ServiceSignals) -> tuple[float, str]:
    ready = signals.ready_replicas
    if ready == 0:
        return 0.0, "no ready replica"
    running, waiting = max(0, signals.running), max(0, signals.waiting)
    kv_used = max(0.0, signals.kv_usage_sum)
    needs: dict[str, float] = {"kv": kv_used / spec.kv_usage_target}
    batch_at_target = spec.max_running_per_replica * spec.kv_usage_target
    if running > 0 and kv_used > 0:
        batch_at_target = min(batch_at_target, running / kv_used * spec.kv_usage_target)
    needs["concurrency"] = (running + waiting) / batch_at_target
    allowed_waiting = spec.waiting_per_replica_target * ready
    if waiting > allowed_waiting:
        needs["queue"] = ready * (running + waiting) / max(1.0, running + allowed_waiting)
    objectives = spec.objectives
    for name, observed, objective in (
        ("ttft", signals.ttft_percentile_s, objectives.ttft_s),
        ("tpot", signals.tpot_percentile_s, objectives.tpot_s),
    ):
        if observed is not None and observed > spec.latency_headroom * objective:
            # Ready replicas, not current: the booting ones are already the answer to this breach.
            needs[name] = ready * min(2.0, observed / (spec.latency_headroom * objective))
    reason = max(needs, key=lambda name: needs[name])
    return needs[reason], reason
