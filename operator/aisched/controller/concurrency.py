"""Awaiting many API calls at once, with none left behind.

A plain `asyncio.gather` raises at the first failure and leaves the other calls running with no
one to hear how they end: a pod creation refused in a namespace being deleted then surfaces
as an unretrieved task exception, and kopf re-raises such stray tasks' errors when the operator
stops. Every call made here is awaited to its end before the first failure is raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def all_done(*calls: Awaitable[T]) -> list[T]:
    """Await CALLS concurrently, each to its end; then raise the first failure, if any."""
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes  # type: ignore[return-value]  # no exception among them, checked above


async def at_most(limit: int, calls: Sequence[Callable[[], Awaitable[object]]]) -> None:
    """Make and await CALLS concurrently, at most LIMIT at a time.

    Each coroutine is made when its turn comes, not when it is queued: a cycle cancelled before
    then (the operator stopping) leaves none behind unawaited.
    """
    slots = asyncio.Semaphore(limit)

    async def bounded(call: Callable[[], Awaitable[object]]) -> None:
        async with slots:
            await call()

    await all_done(*(bounded(call) for call in calls))
