"""One work queue per controller kind, with client-go's semantics.

Watch handlers mark keys dirty; the controller's loop takes the dirty keys in
batches and reconciles them. The rules are those of client-go's workqueue and
delaying queue, which every Kubernetes controller relies on:

- a key is queued once however often it is added, so a burst of watch events
  for one object costs one reconcile;
- a key added while it is being reconciled is reconciled again in the next
  batch, so no change is lost;
- one pending wake-up per key: asking again for a later time keeps the earlier
  one, so a controller that re-plans every pass does not pile up timers;
- a key whose reconcile fails is retried with exponential backoff and never
  stops the other keys; a success resets its backoff;
- every `resync_seconds` every key is reconciled, whatever the watches said:
  the safety net for an event a watch dropped;
- a batch holds at most `max_batch` keys, the longest-dirty first: a backlog of
  thousands is worked through in passes, and whatever the controller does after
  each pass (the scheduling cycle) keeps happening meanwhile.

Timers run on the event loop's clock (`loop.call_later`), so a test drives
them with a fake loop clock instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)


class RefusedError(Exception):
    """A reconcile the API server refused for the object's own content, which its status now says:
    retried with backoff like any failure, and logged in one line (no traceback to read)."""


class FailureBackoff(Generic[K]):
    """client-go's per-item exponential backoff: base, 2 x base, 4 x base, ... up to the maximum.

    `failed` counts a key's failure and returns how long it should wait; `waiting` says
    whether that wait is still running, on the event loop's clock; `succeeded` starts
    the key over. The work queue backs off failed reconciles with one; a stage that goes
    over every key (the scheduling cycle) keeps its own, so that a key failing there
    waits out its backoff even while its reconciles succeed.
    """

    def __init__(self, *, base_seconds: float = 1.0, max_seconds: float = 300.0) -> None:
        self.base_seconds = base_seconds
        self.max_seconds = max_seconds
        self._failures: dict[K, int] = {}
        """Consecutive failures per key: the exponent of its backoff."""
        self._due: dict[K, float] = {}
        """Loop time at which each failed key's wait is over."""

    def failed(self, key: K) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # Capped before the power so that a key failing for days cannot overflow the float.
        delay = min(self.max_seconds, self.base_seconds * 2.0 ** min(failures, 64))
        self._due[key] = asyncio.get_running_loop().time() + delay
        return delay

    def waiting(self, key: K) -> bool:
        due = self._due.get(key)
        return due is not None and asyncio.get_running_loop().time() < due

    def succeeded(self, key: K) -> None:
        self._failures.pop(key, None)
        self._due.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)


class WorkQueue(Generic[K]):
    """Dirty keys, per-key wake-up timers, backoff on failure and a periodic resync."""

    def __init__(
        self,
        *,
        name: str,
        resync_seconds: float,
        base_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 300.0,
        max_batch: int | None = None,
    ) -> None:
        self.name = name
        self.resync_seconds = resync_seconds
        self.max_batch = max_batch
        self.base_backoff_seconds = base_backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self._dirty: dict[K, None] = {}
        """Dirty keys in the order they were first marked (a dict: an ordered set)."""
        self._wake = asyncio.Event()
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        """Per key: the loop time its wake-up is due, and the handle that fires it."""
        self._backoff: FailureBackoff[K] = FailureBackoff(
            base_seconds=base_backoff_seconds, max_seconds=max_backoff_seconds
        )
        """Consecutive failed reconciles per key, and how long each waits."""
        self._next_resync: float | None = None
        """Loop time of the next resync; the first is one period after the loop first waits."""

    # -- marking keys -----------------------------------------------------------

    def add(self, key: K) -> None:
        """Mark KEY dirty and wake the loop; a key already dirty keeps its place."""
        self._dirty.setdefault(key)
        self._wake.set()

    def add_after(self, key: K, delay_seconds: float) -> None:
        """Add KEY in DELAY_SECONDS, unless an earlier wake-up for it is pending already."""
        if delay_seconds <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay_seconds
        pending = self._timers.get(key)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        self._timers[key] = (due, loop.call_later(delay_seconds, self._fire, key))

    def wake(self) -> None:
        """Wake the loop with no key: something cluster-wide changed and the controller looks for itself."""
        self._wake.set()

    def forget(self, key: K) -> None:
        """KEY is gone: it is no longer dirty, its wake-up never fires and its backoff starts over."""
        self._dirty.pop(key, None)
        pending = self._timers.pop(key, None)
        if pending is not None:
            pending[1].cancel()
        self._backoff.succeeded(key)

    def pending_timers(self) -> int:
        return len(self._timers)

    def depth(self) -> int:
        """Keys marked and not yet taken by the loop."""
        return len(self._dirty)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    # -- the loop's side ----------------------------------------------------------

    # TIMEOUT is no deadline for the call but one more reason to wake (the caller's own timers): not ASYNC109's case.
    async def next_batch(
        self,
        all_keys: Callable[[], Iterable[K]],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> set[K]:
        """Wait for work, then return the dirty keys and clear them.

        Returns when a key is added, `wake()` is called, TIMEOUT seconds pass
        (the caller's own timers) or the resync is due; at the resync every key
        of ALL_KEYS() is dirty, but those waiting out a failure's backoff. The set
        may be empty after a bare wake or timeout.
        """
        loop = asyncio.get_running_loop()
        if self._next_resync is None:
            self._next_resync = loop.time() + self.resync_seconds
        # However busy the watches keep the loop, the resync keeps its time.
        wait = self._next_resync - loop.time()
        if timeout is not None:
            wait = min(wait, timeout)
        if not self._wake.is_set() and wait > 0:
            # Not wait_for: on 3.11 it swallows a cancellation that comes as the wake does, and a
            # controller told to stop would run on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()
        self._wake.clear()
        if loop.time() >= self._next_resync:
            for key in all_keys():
                # One waiting out a failure's backoff has its retry timer: the resync would retry it
                # every period (a poison object's traceback every 15 s), whatever its backoff says.
                if not self._backoff.waiting(key):
                    self._dirty.setdefault(key)
            self._next_resync = loop.time() + self.resync_seconds
        if self.max_batch is None or len(self._dirty) <= self.max_batch:
            batch, self._dirty = set(self._dirty), {}
            return batch
        batch = set(itertools.islice(self._dirty, self.max_batch))
        for key in batch:
            del self._dirty[key]
        self._wake.set()  # the rest are the next batch's, without waiting
        return batch

    async def process(
        self,
        keys: Iterable[K],
        reconcile: Callable[[K], Awaitable[None]],
        *,
        concurrency: int,
        on_done: Callable[[K, float, bool], None] | None = None,
    ) -> None:
        """Reconcile KEYS, at most CONCURRENCY at once, in sorted order when the keys sort.

        A failing key is logged, retried after its backoff and never stops the
        others; this never raises but for cancellation. ON_DONE(key, seconds,
        failed) is told of each reconcile, for a metric.
        """
        try:
            ordered: list[K] = sorted(keys)  # type: ignore[type-var]
        except TypeError:
            ordered = list(keys)
        slots = asyncio.Semaphore(max(1, concurrency))

        async def one(key: K) -> None:
            async with slots:
                started = time.perf_counter()
                failed = False
                try:
                    await reconcile(key)
                except RefusedError as refusal:
                    failed = True
                    delay = self._backoff.failed(key)
                    log.warning("%s %s: %s; retrying in %.3g s", self.name, _describe(key), refusal, delay)
                    self.add_after(key, delay)
                except Exception:
                    failed = True
                    delay = self._backoff.failed(key)
                    log.exception("reconciling %s %s failed; retrying in %.3g s", self.name, _describe(key), delay)
                    self.add_after(key, delay)
                else:
                    self._backoff.succeeded(key)
                if on_done is not None:
                    try:
                        on_done(key, time.perf_counter() - started, failed)
                    except Exception:
                        log.exception("recording the reconcile of %s %s failed", self.name, _describe(key))

        await asyncio.gather(*(one(key) for key in ordered))


def _describe(key: Hashable) -> str:
    """(namespace, name) reads as namespace/name in logs; any other key as itself."""
    if isinstance(key, tuple) and all(isinstance(part, str) for part in key):
        return "/".join(key)
    return str(key)
