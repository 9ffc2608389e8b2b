"""Full garbage collections that walk what is new, not the operator's whole state, and their pauses measured.

A full collection walks every container object the process holds, holding the event loop (and
every API thread) while it does: with ten thousand jobs, hundreds of thousands of objects and
up to a second, landing in whatever the loop was doing, a scheduling cycle as often as not.
Nearly everything that survives one is the operator's long-lived state (jobs, nodes, pods and
the client's pools), and when it is replaced, reference counting frees it, frozen or not. So
the survivors of each full collection are frozen (`gc.freeze`), and the next one walks only
what came after them.

What freezing would keep is garbage in reference cycles that was alive at a freeze and died
later; there is little (a scheduling cycle makes none), but a process that lives for months
must not keep it: once every `full_scan_period_s` the frozen objects are thawed, so that one
full collection walks everything again.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

FULL_SCAN_PERIOD_S = 3600.0
FULL = 2  # the oldest generation: a collection of it walks every object not frozen


class CollectorPacing:
    """Installed once in the operator's process: freezes full collections' survivors, reports every pause."""

    def __init__(
        self,
        record_pause: Callable[[int, float], None],
        *,
        full_scan_period_s: float = FULL_SCAN_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._record_pause = record_pause
        self._period = full_scan_period_s
        self._clock = clock
        self._started = 0.0
        self._last_full_scan = clock()

    def install(self) -> None:
        gc.callbacks.append(self._on_collection)

    def uninstall(self) -> None:
        """Stop, and thaw what was frozen (for tests, which share their process)."""
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        gc.unfreeze()

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        # Collections never overlap (the collector holds the GIL and runs one at a time): one start suffices.
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = int(info["generation"])
        self._record_pause(generation, time.perf_counter() - self._started)
        if generation != FULL:
            return
        now = self._clock()
        if now - self._last_full_scan >= self._period:
            gc.unfreeze()  # the next full collection walks everything, the long-frozen included
            self._last_full_scan = now
        else:
            gc.freeze()
