from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from aisched.kube.events import EventRecorder, TokenBucket

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "aisched.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
    }


def test_bucket_allows_a_burst_then_the_rate() -> None:
    bucket = TokenBucket(per_second=2.0, burst=3)
    assert [bucket.wait(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.wait(0.0) == pytest.approx(0.5)
    assert bucket.wait(0.5) == 0.0  # half a second buys one token
    assert bucket.wait(0.5) == pytest.approx(0.5)
    assert [bucket.wait(100.0) for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.5)]  # never above the burst


def test_a_repeated_event_still_queued_is_sent_once_with_its_count() -> None:
    recorder = EventRecorder(post=_never, wall_clock=lambda: NOW)
    for _ in range(3):
        recorder.record(_job("a"), "Warning", "BindFailed", "re-placing")
    recorder.record(_job("b"), "Warning", "BindFailed", "re-placing")
    assert recorder.pending() == 2
    first = next(iter(recorder._queued.values()))
    assert first["count"] == 3
    assert first["involvedObject"]["uid"] == "uid-a"
    assert first["metadata"] == {"generateName": "a.", "namespace": "team"}


def test_past_the_limit_the_oldest_events_go() -> None:
    recorder = EventRecorder(post=_never, max_queued=2, wall_clock=lambda: NOW)
    for name in ("a", "b", "c"):
        recorder.record(_job(name), "Normal", "Admitted", "placed")
    assert [e["involvedObject"]["name"] for e in recorder._queued.values()] == ["b", "c"]
    assert recorder.dropped == 1


def test_events_are_sent_in_order_and_a_failed_post_does_not_stop_the_rest() -> None:
    sent: list[str] = []

    async def post(event: dict[str, Any]) -> None:
        if event["involvedObject"]["name"] == "b":
            raise ConnectionError("API server away")
        sent.append(event["involvedObject"]["name"])

    async def scenario() -> None:
        recorder = EventRecorder(post=post, per_second=1000.0, burst=2, wall_clock=lambda: NOW)
        sender = asyncio.create_task(recorder.run())
        for name in ("a", "b", "c", "d"):
            recorder.record(_job(name), "Normal", "Admitted", "placed")
        for _ in range(100):
            await asyncio.sleep(0.001)
            if recorder.pending() == 0 and len(sent) == 3:
                break
        sender.cancel()

    asyncio.run(scenario())
    assert sent == ["a", "c", "d"]


async def _never(event: dict[str, Any]) -> None:
    raise AssertionError("nothing is sent in this test")
