"""An LLM service's scaling memory across an operator's restart: kept in an annotation on its object.

What is kept: the recent recommendations (the scale-down window), the changes of the last minute (the
per-minute caps), the learned capacity per replica and the last arrival. Not kept: the load history
behind the forecast (a week of one-minute samples, too much to write every decision), which a restarted
operator gathers again, and the boots seen, which it counts again from the ready replicas it finds.

The annotation is on the tenant's own object, so it is read as untrusted input: anything unreadable
gives a fresh memory, and each entry must be finite, within bounds and no later than now (an entry from
the future would stay in every window). What a forged memory can do is limited to the tenant's own
service, within its max and its queue's quota: the learned capacity is kept within half and all of the
spec's load-tested figure by the policy itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, Final

from aisched.policy.llm_scaling.decide import ScalingMemory

MAX_ENTRIES: Final = 64
"""Entries of each list read: the window and the minute hold a few dozen at a decision every few seconds."""
MAX_REPLICAS: Final = 100_000


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
