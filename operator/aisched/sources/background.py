"""Reads of outside sources beside the loop: one fetch per key at a time, under a deadline, behind a circuit.

The controllers' loops must never wait on a carbon API or a Prometheus: a source that hangs,
or drips its answer a byte at a time (which resets every per-read timeout), would hold up
admission and spot handling with it. So a caller starts a fetch here and goes on with what it
already has; the fetch runs as its own task, bounded as a whole by `deadline_seconds` (its
retries included), and hands its value to the caller's `keep` when it succeeds. Failures count
towards the circuit (`aisched.policy.circuit`), which, open, keeps the source from being asked
at all for a while.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from datetime import datetime

from aisched.policy.circuit import Breaker, Circuit, after_failure, after_success, allows

log = logging.getLogger(__name__)


class FetchTimeoutError(TimeoutError):
    """A fetch that took longer than its deadline, retries and all."""


class BackgroundFetcher:
    def __init__(
        self,
        name: str,
        *,
        deadline_seconds: float,
        breaker: Breaker,
        clock: Callable[[], datetime],
    ) -> None:
        self.name = name
        self.deadline_seconds = deadline_seconds
        self.breaker = breaker
        self.clock = clock
        self.circuit = Circuit()
        self.last_error: Exception | None = None
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}

    def fetching(self, key: Hashable) -> bool:
        task = self._tasks.get(key)
        return task is not None and not task.done()

    def start(self, key: Hashable, fetch: Callable[[], Awaitable[object]], keep: Callable[[object], None]) -> bool:
        """Fetch for `key` unless a fetch for it runs already or the circuit is open; True if this started one.

        Only the caller that started a fetch should wait for it: the others go on at once, so
        however many passes or jobs ask meanwhile, a hung source costs the loop one wait per fetch.
        """
        if self.fetching(key) or not allows(self.circuit, self.clock()):
            return False
        self._tasks[key] = asyncio.create_task(self._run(fetch, keep), name=f"{self.name}-fetch")
        return True

    async def wait(self, key: Hashable, seconds: float) -> None:
        """Wait up to `seconds` for the fetch of `key` to end (it goes on if it does not)."""
        task = self._tasks.get(key)
        if task is not None and not task.done() and seconds > 0:
            await asyncio.wait({task}, timeout=seconds)

    async def settle(self) -> None:
        """Wait for every fetch under way to end (tests; shutdown)."""
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def cancel(self) -> None:
        for task in self._tasks.values():
            task.cancel()

    async def _run(self, fetch: Callable[[], Awaitable[object]], keep: Callable[[object], None]) -> None:
        try:
            async with asyncio.timeout(self.deadline_seconds):  # wait_for may swallow a cancellation on 3.11
                value = await fetch()
        except TimeoutError:
            self._failed(FetchTimeoutError(f"no answer within {self.deadline_seconds:g} s"))
        except Exception as error:  # whatever the source raised: counted, kept for the caller to report
            self._failed(error)
        else:
            self.circuit = after_success(self.circuit)
            self.last_error = None
            keep(value)

    def _failed(self, error: Exception) -> None:
        was_open = self.circuit.is_open
        self.circuit = after_failure(self.circuit, self.breaker, self.clock())
        self.last_error = error
        if self.circuit.is_open and not was_open:
            log.warning(
                "%s failed %d times in a row (%s); not asking it again for %s",
                self.name,
                self.circuit.failures,
                error,
                self.circuit.open_for,
            )
        else:
            log.warning("%s failed: %s", self.name, error)
