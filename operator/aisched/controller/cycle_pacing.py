"""Room between scheduling cycles: a cycle waits as long as the one before it took to decide, if that just ended.

Every watch event wakes the loop, and in a burst the next cycle began the moment the last one ended:
the workloads benchmark ran 1,188 cycles for 400 Jobs, its event loop in cycles 55% of the time, and
the watch events and pod placements that share that loop waited behind them. Waiting out the last
cycle's own deciding time (its writes left out: the loop is free while they are awaited) keeps
deciding to at most half the loop's time, however large the cluster makes a cycle, and each cycle
then decides at once what arrived meanwhile. A quiet cluster's cycle is never delayed: the wait
counts from the end of the last one.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_WAIT_SECONDS = 1.0
"""However long a cycle took, the next waits no longer than this."""


@dataclass
class CyclePacing:
    _ended_at: float | None = None
    _took: float = 0.0

    def wait(self, now: float) -> float:
        """Seconds the next cycle waits, at monotonic time NOW."""
        if self._ended_at is None:
            return 0.0
        return max(0.0, self._ended_at + min(self._took, MAX_WAIT_SECONDS) - now)

    def ran(self, deciding_seconds: float, ended: float) -> None:
        """A cycle that took DECIDING_SECONDS to decide ended at monotonic time ENDED."""
        self._ended_at, self._took = ended, max(0.0, deciding_seconds)
