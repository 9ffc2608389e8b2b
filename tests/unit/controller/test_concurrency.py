"""Many API calls at once: none is left running unowned, none is made after its caller stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from aisched.controller.concurrency import all_done, at_most

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]


async def test_a_failed_call_is_raised_once_every_other_call_has_ended() -> None:
    # A pod refused in a namespace being deleted while its gang's other pods are still being
    # created: those creations end before the refusal reaches the caller, so none is left to fail
    # unheard (kopf re-raised such a stray failure when the operator stopped).
    ended: list[str] = []

    async def refused() -> None:
        raise PermissionError("namespace is being terminated")

    async def slow(name: str) -> str:
        await asyncio.sleep(5)
        ended.append(name)
        return name

    with pytest.raises(PermissionError):
        await all_done(refused(), slow("w1"), slow("w2"))
    assert sorted(ended) == ["w1", "w2"]
    assert await all_done(slow("w3"), slow("w4")) == ["w3", "w4"]


async def test_a_cycle_stopped_mid_writes_leaves_no_write_made_and_unawaited() -> None:
    # The operator stopping cancels a cycle among its writes: those not begun are never made, so no
    # coroutine is left for the garbage collector to warn of (it did, in a later test of the tier).
    begun: list[str] = []
    first_begun, release = asyncio.Event(), asyncio.Event()

    def write(name: str) -> Callable[[], Awaitable[bool]]:
        async def made() -> bool:
            begun.append(name)
            first_begun.set()
            await release.wait()
            return True

        return made

    cycle = asyncio.create_task(at_most(1, [write("first"), write("second")]))
    await first_begun.wait()
    cycle.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cycle
    assert begun == ["first"]
