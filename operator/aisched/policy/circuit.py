"""A circuit breaker for an outside source, time passed in.

After `threshold` failures in a row the circuit opens: nobody asks the source for `open_for`.
Then one trial goes through (half-open); its success closes the circuit, its failure opens it
again for twice as long, up to `max_open_for`. A source that is down is asked a few times an
hour instead of on every pass, and one that comes back is noticed within `open_for`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Breaker:
    threshold: int = 3
    open_for: timedelta = timedelta(seconds=60)
    max_open_for: timedelta = timedelta(minutes=15)


@dataclass(frozen=True)
class Circuit:
    failures: int = 0
    """Failures in a row."""
    opened_at: datetime | None = None
    open_for: timedelta = timedelta(0)

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None

    def reopens_at(self) -> datetime | None:
        return None if self.opened_at is None else self.opened_at + self.open_for


def allows(circuit: Circuit, now: datetime) -> bool:
    """Whether the source may be asked now: closed, or open long enough for a trial."""
    reopens = circuit.reopens_at()
    return reopens is None or now >= reopens


def after_success(circuit: Circuit) -> Circuit:
    return Circuit()


def after_failure(circuit: Circuit, breaker: Breaker, now: datetime) -> Circuit:
    failures = circuit.failures + 1
    if circuit.is_open:  # the trial failed: stay away longer
        return Circuit(failures, now, min(breaker.max_open_for, circuit.open_for * 2))
    if failures >= breaker.threshold:
        return Circuit(failures, now, breaker.open_for)
    return Circuit(failures)
