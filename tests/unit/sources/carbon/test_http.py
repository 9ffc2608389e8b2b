"""The shared GET: retries what may pass, gives up at once on what will not, waits as told."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import httpx
import pytest

from aisched.sources.carbon import (
    CarbonSourceDataError,
    CarbonSourceError,
    CarbonSourceHTTPError,
    CarbonSourceTimeoutError,
    HttpPolicy,
)
from aisched.sources.carbon.base import get_json
from tests.unit.sources.carbon.conftest import Reply, ScriptedServer
from tests.unit.sources.carbon.running import FAST

pytestmark = pytest.mark.loopback  # a server on 127.0.0.1 (tests/unit/conftest.py)


def top_jitter() -> float:
    """The jitter at its top: waits are the whole doubled backoff."""
    return 1.0


def fetch(server: ScriptedServer | str, policy: HttpPolicy = FAST, waits: list[float] | None = None) -> object:
    base = server if isinstance(server, str) else server.url

    async def record(seconds: float) -> None:
        if waits is not None:
            waits.append(seconds)

    async def go() -> object:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await get_json(
                client, f"{base}/thing", source="test", what="get a thing", policy=replace(policy, sleep=record)
            )

    return asyncio.run(go())


def test_server_errors_are_retried_with_doubling_backoff(server: ScriptedServer) -> None:
    server.reply("/thing", Reply("busy", status=503), Reply("busy", status=502), Reply({"ok": 1}))
    waits: list[float] = []
    policy = HttpPolicy(
        timeout_seconds=0.5, retries=3, backoff_seconds=1.0, backoff_max_seconds=10.0, jitter=top_jitter
    )
    assert fetch(server, policy, waits) == {"ok": 1}
    assert waits == [1.0, 2.0]
    assert len(server.asked("/thing")) == 3


def test_backoff_is_jittered_between_half_and_all_of_the_doubled_wait() -> None:
    policy = HttpPolicy(backoff_seconds=1.0, backoff_max_seconds=10.0)
    assert replace(policy, jitter=lambda: 0.0).delay(2, None) == 2.0
    assert replace(policy, jitter=top_jitter).delay(2, None) == 4.0
    assert all(2.0 <= policy.delay(2, None) <= 4.0 for _ in range(100))
    # A Retry-After is a floor the jitter never cuts.
    assert replace(policy, jitter=lambda: 0.0).delay(0, "7") == 7.0


def test_retry_after_is_honoured_within_the_cap(server: ScriptedServer) -> None:
    server.reply("/thing", Reply("slow down", status=429, headers={"Retry-After": "7"}), Reply([1, 2]))
    waits: list[float] = []
    policy = HttpPolicy(timeout_seconds=0.5, retries=1, backoff_seconds=1.0, backoff_max_seconds=5.0, jitter=top_jitter)
    assert fetch(server, policy, waits) == [1, 2]
    assert waits == [5.0]


def test_client_errors_are_not_retried(server: ScriptedServer) -> None:
    server.reply("/thing", Reply({"message": "zone not found"}, status=404))
    with pytest.raises(CarbonSourceHTTPError) as raised:
        fetch(server)
    assert raised.value.status == 404
    assert "zone not found" in str(raised.value)
    assert "test: get a thing: HTTP 404" in str(raised.value)
    assert len(server.asked("/thing")) == 1


def test_persistent_server_errors_give_up_after_the_retries(server: ScriptedServer) -> None:
    server.reply("/thing", Reply("<html>Bad gateway</html>", status=502))
    # A timeout generous enough that no attempt times out on a loaded machine: each must be a 502.
    patient = HttpPolicy(timeout_seconds=10.0, retries=FAST.retries, backoff_seconds=0.001, backoff_max_seconds=0.01)
    with pytest.raises(CarbonSourceHTTPError) as raised:
        fetch(server, patient)
    assert raised.value.status == 502
    assert len(server.asked("/thing")) == FAST.retries + 1


def test_a_server_slower_than_the_timeout_is_a_timeout_error(server: ScriptedServer) -> None:
    server.reply("/thing", Reply({"ok": 1}, delay_s=2.0))
    with pytest.raises(CarbonSourceTimeoutError, match=r"no answer within 0\.2 s"):
        fetch(server)
    assert len(server.asked("/thing")) == FAST.retries + 1


def test_a_slow_first_answer_is_retried_into_a_good_one(server: ScriptedServer) -> None:
    server.reply("/thing", Reply({"late": 1}, delay_s=2.0), Reply({"ok": 1}))
    assert fetch(server) == {"ok": 1}


def test_garbage_is_a_data_error(server: ScriptedServer) -> None:
    server.reply("/thing", Reply(b"\x89PNG\r\n\x1a\n\x00\x00garbage"))
    with pytest.raises(CarbonSourceDataError, match="not JSON"):
        fetch(server)


def test_nobody_listening_is_a_source_error() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago refuses connections
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(CarbonSourceError, match="cannot reach"):
        fetch(f"http://127.0.0.1:{port}")
