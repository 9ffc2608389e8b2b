"""Run a source against the scripted server with a fresh client and tiny timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx

from aisched.sources.carbon import HttpPolicy

S = TypeVar("S")
T = TypeVar("T")

# Timeouts far below the server's scripted delays, and backoff too short to matter.
FAST = HttpPolicy(timeout_seconds=0.2, retries=2, backoff_seconds=0.001, backoff_max_seconds=0.01)


def call(make_source: Callable[[httpx.AsyncClient], S], action: Callable[[S], Awaitable[T]]) -> T:
    async def go() -> T:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await action(make_source(client))

    return asyncio.run(go())
