"""Autoscaling benchmark: time within the latency target and GPU-hours on a bursty diurnal trace.

There is no public per-second trace of requests to a GPU model server under
../shared/data, so the request rate is generated from a documented, seeded model
(`TraceModel`), in requests per second:

    rate(t) = base * diurnal(t) * weekly(t) * wander(t) * burst(t)

- diurnal: 1 + a1 sin(2 pi (h - 9) / 24) + a2 sin(4 pi (h - 7.5) / 24), h the hour of
  the day: a trough around 03:00 and a broad afternoon peak (peak / trough about 4,
  the shape of interactive inference services' daily curves);
- weekly: Saturdays and Sundays carry `weekend` of a weekday's load;
- wander: slow multiplicative noise, a mean-reverting (Ornstein-Uhlenbeck) process of
  the log rate with a 30-minute correlation time;
- bursts: a Poisson process of flash crowds (`bursts_per_day`), each multiplying
  the load by 1 + h, h drawn uniformly from `burst_height`, reached over a ramp
  of 1 to 5 minutes, held for an exponential time (mean `burst_minutes`), then
  decaying over a ramp as long.

Requests arriving in each 5-second tick are Poisson with that rate, and a request
counter per service is what Prometheus scrapes.

The cluster side, the same for every policy: each replica serves `capacity` requests
per second within the latency target and holds `gpus_per_replica` GPUs from the
moment it is created; it starts serving `startup` seconds later (model load).
Scale-down removes not-ready replicas first, then the newest. Prometheus scrapes every
`scrape` seconds; the metric is rate(counter[1m]) as of the last scrape; the
controller reconciles every 15 s, like HPA's sync period. Capacity meets demand
when ready replicas * capacity >= the arrival rate.

Policies:
- aisched: aisched.policy.autoscale.decide_replicas with ScalingBehavior.from_spec on
  an AutoscalingSpec that sets only min/max replicas and the target (API defaults
  for the rest).
- hpa_default: the same proportional law with the Kubernetes HPA's default
  behaviour: tolerance 0.1, no scale-up window, 300 s scale-down window, up by
  max(4 pods, 100%) per 15 s, down by 100% per 15 s. For an external metric with an
  AverageValue target this is HPA's algorithm.
- static_peak: ceil(peak rate / capacity) replicas, always ready.

Both autoscalers get the same target per replica (`target_fraction` of capacity,
the headroom a user leaves as with HPA's usual 70% CPU target).

Usage: .venv/bin/python hack/bench/autoscale.py [--days 14] [--seed 7] [--startup 120] ...
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
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

REPO_ROOT = Path(__file__).resolve().parents[2]
EPOCH = datetime(2025, 3, 3, tzinfo=UTC)  # a Monday, so the weekly pattern starts on a weekday
TICK = 5.0
SYNC_PERIOD = 15.0
RATE_WINDOW = 60.0
DAY = 86_400.0
HOUR = 3_600.0


@dataclass(frozen=True)
class TraceModel:
    days: float = 14.0
    seed: int = 7
    base_rps: float = 120.0
    diurnal_amplitude: float = 0.55
    second_harmonic: float = 0.12
    weekend: float = 0.65
    wander_sigma: float = 0.08
    wander_minutes: float = 30.0
    bursts_per_day: float = 6.0
    burst_height: tuple[float, float] = (0.2, 1.0)
    burst_minutes: float = 15.0


@dataclass(frozen=True)
class Cluster:
    capacity_rps: float = 10.0
    gpus_per_replica: int = 1
    startup_s: float = 120.0
    scrape_s: float = 15.0
    target_fraction: float = 0.7
    min_replicas: int = 2
    max_replicas: int = 100


def request_rates(model: TraceModel) -> list[float]:
    """The arrival rate (requests per second) of every tick."""
    rng = random.Random(model.seed)
    ticks = int(model.days * DAY / TICK)
    bursts = _bursts(model, rng)
    decay = math.exp(-TICK / (model.wander_minutes * 60))
    log_wander, rates = 0.0, []
    for i in range(ticks):
        t = i * TICK
        hour = (t % DAY) / HOUR
        diurnal = (
            1
            + model.diurnal_amplitude * math.sin(2 * math.pi * (hour - 9) / 24)
            + model.second_harmonic * math.sin(4 * math.pi * (hour - 7.5) / 24)
        )
        weekday = (EPOCH + timedelta(seconds=t)).weekday()
        weekly = model.weekend if weekday >= 5 else 1.0
        log_wander = log_wander * decay + model.wander_sigma * math.sqrt(1 - decay**2) * rng.gauss(0, 1)
        rates.append(model.base_rps * diurnal * weekly * math.exp(log_wander) * _burst_factor(bursts, t))
    return rates


def _bursts(model: TraceModel, rng: random.Random) -> list[tuple[float, float, float, float]]:
    """(start, ramp, hold, height) of each flash crowd."""
    bursts: list[tuple[float, float, float, float]] = []
    t = 0.0
    while model.bursts_per_day > 0:
        t += rng.expovariate(model.bursts_per_day / DAY)
        if t >= model.days * DAY:
            return bursts
        ramp = rng.uniform(60, 300)
        hold = rng.expovariate(1 / (model.burst_minutes * 60))
        bursts.append((t, ramp, hold, rng.uniform(*model.burst_height)))
    return bursts


def _burst_factor(bursts: Sequence[tuple[float, float, float, float]], t: float) -> float:
    factor = 1.0
    for start, ramp, hold, height in bursts:
        if start <= t < start + 2 * ramp + hold:
            since = t - start
            shape = min(1.0, since / ramp, (start + 2 * ramp + hold - t) / ramp)
            factor *= 1 + height * shape
    return factor


def arrivals(rates: Sequence[float], seed: int) -> list[int]:
    """Requests counted in each tick (Poisson), what a request counter would add up."""
    rng = random.Random(seed + 1)
    return [_poisson(rng, rate * TICK) for rate in rates]


def _poisson(rng: random.Random, mean: float) -> int:
    if mean > 50:  # normal approximation; exact sampling is needlessly slow at these counts
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        k += 1
        product *= rng.random()
    return k


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


def run(model: TraceModel, cluster: Cluster) -> dict[str, Any]:
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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--days", type=float, default=TraceModel.days, help="length of the trace")
    parser.add_argument("--seed", type=int, default=TraceModel.seed)
    parser.add_argument("--bursts-per-day", type=float, default=TraceModel.bursts_per_day)
    parser.add_argument("--startup", type=float, default=Cluster.startup_s, help="seconds from pod creation to ready")
    parser.add_argument("--scrape", type=float, default=Cluster.scrape_s, help="Prometheus scrape interval, seconds")
    parser.add_argument(
        "--target-fraction", type=float, default=Cluster.target_fraction, help="targetPerReplica / replica capacity"
    )
    parser.add_argument(
        "--large-scale",
        type=float,
        default=5.0,
        help="load multiplier of the second scenario, a service of about a hundred replicas (0: skip it)",
    )
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "hack" / "bench" / "results" / "autoscale.json")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    model = TraceModel(days=args.days, seed=args.seed, bursts_per_day=args.bursts_per_day)
    cluster = Cluster(startup_s=args.startup, scrape_s=args.scrape, target_fraction=args.target_fraction)
    began = time.perf_counter()
    results = run(model, cluster)
    _print("service of tens of replicas", results)
    if args.large_scale:
        # The same trace shape, larger: shows how per-minute replica caps fare as a service grows.
        large = run(
            replace(model, base_rps=model.base_rps * args.large_scale),
            replace(cluster, max_replicas=math.ceil(cluster.max_replicas * args.large_scale * 2)),
        )
        _print(f"the same load x{args.large_scale:g}", large)
        results["large_service"] = large
    results["targets"] = {"within_target_at_least": 0.99, "gpu_hours_saved_vs_static_peak_at_least": 0.30}
    results["wall_seconds"] = round(time.perf_counter() - began, 2)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


def _print(title: str, results: dict[str, Any]) -> None:
    trace = results["trace"]
    print(f"{title}: {trace['days']:g} days, mean {trace['mean_rps']} rps, peak {trace['peak_rps']} rps")
    print(f"  {'policy':<12} {'within':>8} {'GPU-h':>9} {'saved':>7} {'mean rep':>9} {'events':>7} {'short min':>10}")
    for name, detail in results["details"].items():
        print(
            f"  {name:<12} {detail['within_target']:>8.2%} {detail['gpu_hours']:>9.1f} "
            f"{detail['gpu_hours_saved_vs_static_peak']:>7.1%} {detail['mean_replicas']:>9.2f} "
            f"{detail['scale_events']:>7} {detail['short_minutes']:>10.1f}"
        )


if __name__ == "__main__":
    raise SystemExit(main())
