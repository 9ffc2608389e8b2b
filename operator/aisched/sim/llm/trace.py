"""The Azure LLM inference traces (2023; code and conversation), read by path: arrival times and token counts.

Each row is TIMESTAMP, ContextTokens, GeneratedTokens. Times become seconds from the first row.
The traces are a sample of a larger service (about 2.4 and 5.4 requests per second), light enough for
one H100 to serve; `scale` replays each request SCALE times (copies spread over the next second,
seeded), which multiplies the rate while keeping its shape: its bursts and its lulls.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


def read_azure_trace(path: Path) -> list[TraceRequest]:
    """The trace's requests in arrival order, times relative to the first (a row that does not parse is an error)."""
    rows: list[tuple[datetime, int, int]] = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            stamp = datetime.fromisoformat(row["TIMESTAMP"].strip()[:26])
            rows.append((stamp, max(1, int(row["ContextTokens"])), max(1, int(row["GeneratedTokens"]))))
    rows.sort(key=lambda row: row[0])
    start = rows[0][0]
    return [TraceRequest((stamp - start).total_seconds(), prompt, output) for stamp, prompt, output in rows]


def scale_trace(requests: list[TraceRequest], scale: int, seed: int = 0) -> list[TraceRequest]:
    """Each request SCALE times, the copies at uniform offsets within the following second."""
    rng = random.Random(seed)
    out = [request for request in requests]
    for request in requests:
        for _ in range(scale - 1):
            out.append(TraceRequest(request.arrival_s + rng.random(), request.prompt_tokens, request.output_tokens))
    out.sort(key=lambda request: request.arrival_s)
    return out


def window(requests: list[TraceRequest], start_s: float, end_s: float) -> list[TraceRequest]:
    """The requests arriving in [START_S, END_S), times shifted so that START_S is 0."""
    return [
        TraceRequest(r.arrival_s - start_s, r.prompt_tokens, r.output_tokens)
        for r in requests
        if start_s <= r.arrival_s < end_s
    ]
