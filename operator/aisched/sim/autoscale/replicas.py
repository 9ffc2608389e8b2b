"""Replicas over time under each policy on one request trace: time within the target and GPU-hours."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from aisched.api.inference_service import AutoscalingSpec
from aisched.policy.autoscale import (
    AutoscalerState,
    MetricSample,
    PolicyKind,
    RatePolicy,
    ScalingBehavior,
    decide_replicas,
)
from aisched.sim.autoscale.demand import EPOCH, HOUR, TICK, TraceModel, arrivals, request_rates

SYNC_PERIOD = 15.0
RATE_WINDOW = 60.0


@dataclass(frozen=True)
class Cluster:
    capacity_rps: float = 10.0
    gpus_per_replica: int = 1
    startup_s: float = 120.0
    scrape_s: float = 15.0
    target_fraction: float = 0.7
    min_replicas: int = 2
    max_replicas: int = 100


@dataclass
class Outcome:
    within_target: float
    gpu_hours: float
    mean_replicas: float
    max_replicas: int
    scale_events: int
    short_minutes: float
    worst_shortfall: float


def simulate_static(rates: Sequence[float], cluster: Cluster) -> Outcome:
    replicas = math.ceil(max(rates) / cluster.capacity_rps)
    hours = len(rates) * TICK / HOUR
    short = sum(rate > replicas * cluster.capacity_rps for rate in rates)
    return Outcome(
        within_target=1 - short / len(rates),
        gpu_hours=replicas * cluster.gpus_per_replica * hours,
        mean_replicas=replicas,
        max_replicas=replicas,
        scale_events=0,
        short_minutes=short * TICK / 60,
        worst_shortfall=0.0,
    )


def simulate_autoscaler(
    rates: Sequence[float], counts: Sequence[int], cluster: Cluster, behavior: ScalingBehavior
) -> Outcome:
    ticks_per_scrape = round(cluster.scrape_s / TICK)
    scrapes_per_window = round(RATE_WINDOW / cluster.scrape_s)
    ticks_per_sync = round(SYNC_PERIOD / TICK)
    ready_at: list[float] = [0.0] * behavior.min_replicas  # creation order; warm at the start
    state = AutoscalerState()
    counter, scraped = 0, [0]
    short = gpu_ticks = replica_ticks = events = 0
    peak = len(ready_at)
    worst = 0.0
    for i, (rate, count) in enumerate(zip(rates, counts, strict=True)):
        t = i * TICK
        counter += count
        if i % ticks_per_scrape == 0:
            scraped.append(counter)
        # The reconcile runs between scrapes, as it would against a real Prometheus.
        if i % ticks_per_sync == ticks_per_sync // 2 and len(scraped) > scrapes_per_window:
            value = (scraped[-1] - scraped[-1 - scrapes_per_window]) / RATE_WINDOW
            last_scrape = EPOCH + timedelta(seconds=(i - i % ticks_per_scrape) * TICK)
            sample = MetricSample(value, last_scrape)
            decision = decide_replicas(behavior, state, len(ready_at), sample, EPOCH + timedelta(seconds=t))
            state = decision.state
            if decision.replicas != len(ready_at):
                events += 1
                ready_at = _resize(ready_at, decision.replicas, t, cluster.startup_s)
        ready = bisect.bisect_right(ready_at, t)
        missing = rate - ready * cluster.capacity_rps
        if missing > 0:
            short += 1
            worst = max(worst, missing / rate)
        gpu_ticks += len(ready_at) * cluster.gpus_per_replica
        replica_ticks += len(ready_at)
        peak = max(peak, len(ready_at))
    return Outcome(
        within_target=1 - short / len(rates),
        gpu_hours=gpu_ticks * TICK / HOUR,
        mean_replicas=replica_ticks / len(rates),
        max_replicas=peak,
        scale_events=events,
        short_minutes=short * TICK / 60,
        worst_shortfall=worst,
    )


def _resize(ready_at: list[float], replicas: int, now: float, startup_s: float) -> list[float]:
    if replicas > len(ready_at):
        return ready_at + [now + startup_s] * (replicas - len(ready_at))
    # Not-ready replicas go first, then the newest: what a ReplicaSet's scale-down picks.
    by_age = sorted(ready_at, key=lambda at: (at <= now, -at), reverse=True)
    return sorted(by_age[:replicas])


def aisched_behavior(cluster: Cluster) -> ScalingBehavior:
    spec = AutoscalingSpec.model_validate(
        {
            "minReplicas": cluster.min_replicas,
            "maxReplicas": cluster.max_replicas,
            "metric": {"type": "RequestsPerSecond", "targetPerReplica": cluster.capacity_rps * cluster.target_fraction},
        }
    )
    return ScalingBehavior.from_spec(spec)


def hpa_default_behavior(cluster: Cluster) -> ScalingBehavior:
    return ScalingBehavior(
        min_replicas=cluster.min_replicas,
        max_replicas=cluster.max_replicas,
        target_per_replica=cluster.capacity_rps * cluster.target_fraction,
        tolerance=0.1,
        scale_up_window_seconds=0,
        scale_down_window_seconds=300,
        scale_up_policies=(RatePolicy(PolicyKind.PODS, 4, 15), RatePolicy(PolicyKind.PERCENT, 100, 15)),
        scale_down_policies=(RatePolicy(PolicyKind.PERCENT, 100, 15),),
    )


def simulate_policies(model: TraceModel, cluster: Cluster) -> dict[str, Any]:
    """Every policy on one trace: the figures the results file's `policies` holds, and more."""
    rates = request_rates(model)
    counts = arrivals(rates, model.seed)
    outcomes = {
        "aisched": simulate_autoscaler(rates, counts, cluster, aisched_behavior(cluster)),
        "static_peak": simulate_static(rates, cluster),
        "hpa_default": simulate_autoscaler(rates, counts, cluster, hpa_default_behavior(cluster)),
    }
    static_hours = outcomes["static_peak"].gpu_hours
    return {
        "policies": {
            name: {"within_target": round(o.within_target, 5), "gpu_hours": round(o.gpu_hours, 1)}
            for name, o in outcomes.items()
        },
        "details": {
            name: {
                **{k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(o).items()},
                "gpu_hours_saved_vs_static_peak": round(1 - o.gpu_hours / static_hours, 4),
            }
            for name, o in outcomes.items()
        },
        "trace": {
            **asdict(model),
            "peak_rps": round(max(rates), 1),
            "mean_rps": round(sum(rates) / len(rates), 1),
            "peak_to_mean": round(max(rates) / (sum(rates) / len(rates)), 3),
        },
        "cluster": asdict(cluster),
    }
