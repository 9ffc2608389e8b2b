"""Events on our objects, sent from a queue at a bounded rate.

Events tell a job's story in `kubectl describe`; they must never hold up the writes that
run it. Like client-go's recorder, `record` returns at once and never fails: a sender
task posts the queued events, `burst` at once and then `per_second`, so the hundreds of
"Admitted" events of a burst of submissions do not compete with those jobs' pod creates
for the API server. An event still queued when the same one comes again is sent once
with its count raised, and past `max_queued` the oldest are dropped (events are best effort
in Kubernetes too).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)
EventKey = tuple[str, str, str, str]  # involved object uid (or name), type, reason, message


@dataclass
class TokenBucket:
    """`burst` tokens, refilled at `per_second`; time is passed in."""

    per_second: float
    burst: int
    tokens: float = field(init=False)
    updated: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def wait(self, now: float) -> float:
        """Seconds until a token is free (0 when one is); takes it when free."""
        if self.updated is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.per_second)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.per_second


def build_event(obj: dict[str, Any], event_type: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    metadata = obj["metadata"]
    stamp = now.isoformat()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{metadata['name']}.", "namespace": metadata.get("namespace") or "default"},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": metadata["name"],
            "namespace": metadata.get("namespace"),
            "uid": metadata.get("uid"),
            "resourceVersion": metadata.get("resourceVersion"),
        },
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": "aisched"},
        "reportingComponent": "aisched.io/operator",
        "reportingInstance": "aisched",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


@dataclass
class EventRecorder:
    post: Callable[[dict[str, Any]], Awaitable[None]]  # sends one Event; failures are its to log
    per_second: float = 10.0
    burst: int = 50
    max_queued: int = 1000
    monotonic: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    dropped: int = 0
    _queued: OrderedDict[EventKey, dict[str, Any]] = field(default_factory=OrderedDict)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    def record(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        metadata = obj["metadata"]
        key = (str(metadata.get("uid") or metadata["name"]), event_type, reason, message)
        if (queued := self._queued.get(key)) is not None:
            queued["count"] += 1
            queued["lastTimestamp"] = self.wall_clock().isoformat()
            return
        if len(self._queued) >= self.max_queued:
            self._queued.popitem(last=False)
            if self.dropped == 0:
                log.warning("more than %d events waiting to be sent: dropping the oldest", self.max_queued)
            self.dropped += 1
        self._queued[key] = build_event(obj, event_type, reason, message, self.wall_clock())
        self._ready.set()

    def pending(self) -> int:
        return len(self._queued)

    async def run(self) -> None:
        """Send queued events forever, within the rate."""
        bucket = TokenBucket(self.per_second, self.burst)
        while True:
            await self._ready.wait()
            while self._queued:
                if (delay := bucket.wait(self.monotonic())) > 0:
                    await asyncio.sleep(delay)
                    continue
                _, event = self._queued.popitem(last=False)
                try:
                    await self.post(event)
                except Exception:  # the API server away: this event is lost, the next may go
                    log.exception("could not post event %s", event["reason"])
            self._ready.clear()
