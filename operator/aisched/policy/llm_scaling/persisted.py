"""An LLM service's scaling memory across an operator's restart: kept in an annotation on its object.

What is kept, in `aisched.io/llm-scaling-memory`: the recent recommendations (the scale-down window),
the changes of the last minute (the per-minute caps), the learned capacity per replica and the last
arrival. In a second annotation, `aisched.io/llm-load-history`, written only when a five-minute bucket
completes: the load history behind the forecast, as bucket means (a week of one-minute samples is too
much to write at every decision; without it a restarted operator forecast no season for a week). Not
kept: the boots seen, which a restarted operator counts again from the ready replicas it finds.

The annotation is on the tenant's own object, so it is read as untrusted input: anything unreadable
gives a fresh memory, and each entry must be finite, within bounds and no later than now (an entry from
the future would stay in every window). What a forged memory can do is limited to the tenant's own
service, within its max and its queue's quota: the learned capacity is kept within half and all of the
spec's load-tested figure by the policy itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any, Final

from aisched.policy.llm_scaling.decide import ScalingMemory
from aisched.policy.llm_scaling.history import LoadHistory

MAX_ENTRIES: Final = 64
"""Entries of each list read: the window and the minute hold a few dozen at a decision every few seconds."""
MAX_REPLICAS: Final = 100_000
LOAD_BUCKET_S: Final = 300.0
"""The load history is written as means over buckets this long, aligned to the epoch."""
MAX_RATE: Final = 1e9
"""Requests per second no service reaches; a larger figure in the annotation is a forgery."""


def memory_to_json(memory: ScalingMemory) -> str:
    return json.dumps(
        {
            "recommendations": [[t, n] for t, n in memory.recommendations[-MAX_ENTRIES:]],
            "changes": [[t, n] for t, n in memory.changes[-MAX_ENTRIES:]],
            "ratePerReplica": memory.rate_per_replica,
            "lastArrivalAt": memory.last_arrival_at,
        },
        separators=(",", ":"),
    )


def memory_from_json(text: str | None, *, now: float, fresh: ScalingMemory) -> ScalingMemory:
    """The memory TEXT keeps, on top of FRESH (the cold start's prior, an empty load history); FRESH itself
    when TEXT is missing or anything in it is unreadable."""
    if not text:
        return fresh
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            return fresh
        return replace(
            fresh,
            recommendations=tuple(_pairs(raw.get("recommendations"), now, 0, MAX_REPLICAS)),
            changes=tuple(_pairs(raw.get("changes"), now, -MAX_REPLICAS, MAX_REPLICAS)),
            rate_per_replica=_optional(raw.get("ratePerReplica"), math.ulp(0.0), math.inf),
            last_arrival_at=_optional(raw.get("lastArrivalAt"), 0.0, now),
        )
    except (ValueError, TypeError, RecursionError):
        return fresh


def _entries(value: Any) -> list[Any]:
    if value is None:  # not written: none
        return []
    if not isinstance(value, list):
        raise ValueError("not a list")
    return value[-MAX_ENTRIES:]


def _pairs(value: Any, now: float, low: int, high: int) -> list[tuple[float, int]]:
    pairs = []
    for entry in _entries(value):
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], int):
            raise ValueError("not a [time, count] pair")
        pairs.append((_number(entry[0], 0.0, now), int(_number(entry[1], low, high))))
    return pairs


def _optional(value: Any, low: float, high: float) -> float | None:
    return None if value is None else _number(value, low, high)


def _number(value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("not a number")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise ValueError("out of bounds")
    return number


@dataclass(frozen=True)
class PersistedLoad:
    """LOAD's complete buckets as the annotation's text; THROUGH: where the last of them ends."""

    through: float
    text: str


def load_to_json(load: LoadHistory) -> PersistedLoad | None:
    """The means of LOAD's complete buckets (the one the newest sample falls in is not); None before one."""
    if not load.samples:
        return None
    newest = math.floor(load.samples[-1][0] / LOAD_BUCKET_S)
    sums: dict[int, list[float]] = {}
    for when, rate in load.samples:
        bucket = math.floor(when / LOAD_BUCKET_S)
        if bucket < newest:
            sums.setdefault(bucket, []).append(rate)
    if not sums:
        return None
    first, last = min(sums), max(sums)
    means = [float(f"{sum(r) / len(r):.4g}") if (r := sums.get(b)) else None for b in range(first, last + 1)]
    text = json.dumps({"start": first * LOAD_BUCKET_S, "step": LOAD_BUCKET_S, "rates": means}, separators=(",", ":"))
    return PersistedLoad((last + 1) * LOAD_BUCKET_S, text)


def max_load_buckets(load: LoadHistory) -> int:
    """The most bucket means an annotation may hold for LOAD: its span, and the bucket in progress."""
    return math.ceil(load.keep_s / LOAD_BUCKET_S) + 1


@dataclass(frozen=True)
class ReadLoad:
    """A load history read back, and THROUGH: where the annotation's last bucket ends (-inf: nothing read)."""

    load: LoadHistory
    through: float = -math.inf


def load_from_json(text: str | None, *, now: float, fresh: LoadHistory) -> ReadLoad:
    """FRESH (an empty history, its step and span) holding what TEXT kept: one sample per step at its
    bucket's mean (a bucket without samples leaves a gap), none older than the span keeps or later than
    NOW. FRESH itself when TEXT is missing or anything in it is unreadable.

    Each sample is its bucket's mean, so that the history written again after a restart is the one read:
    a line through the means would move every mean a little at each restart. The forecast reads ratios a
    day and a week back, which a five-minute mean keeps.
    """
    if not text:
        return ReadLoad(fresh)
    try:
        raw = json.loads(text, parse_constant=_no_constant)
        if not isinstance(raw, dict) or raw.get("step") != LOAD_BUCKET_S:
            return ReadLoad(fresh)
        rates = raw.get("rates")
        if not isinstance(rates, list) or len(rates) > max_load_buckets(fresh):
            return ReadLoad(fresh)
        start = _number(raw.get("start"), 0.0, now - len(rates) * LOAD_BUCKET_S)
        if start % LOAD_BUCKET_S:  # the buckets written start on the step: one that does not was not written here
            return ReadLoad(fresh)
        means = [None if r is None else _number(r, 0.0, MAX_RATE) for r in rates]
    except (ValueError, TypeError, RecursionError):
        return ReadLoad(fresh)
    through = start + len(means) * LOAD_BUCKET_S
    samples = []
    when = max(start, now - fresh.keep_s)
    while when < through:
        if (rate := means[min(len(means) - 1, math.floor((when - start) / LOAD_BUCKET_S))]) is not None:
            samples.append((when, rate))
        when += fresh.step_s
    return ReadLoad(replace(fresh, samples=tuple(samples)), through)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")
