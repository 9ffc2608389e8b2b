"""The request rate of a bursty diurnal service, from a documented, seeded model, and its Poisson arrivals."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

EPOCH = datetime(2025, 3, 3, tzinfo=UTC)  # a Monday, so the weekly pattern starts on a weekday
TICK = 5.0
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
