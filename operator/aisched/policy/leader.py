"""Who may hold the leader Lease, judged as client-go's leaderelection judges it.

Two rules keep two replicas from acting at once whatever their clocks say:

- A standby never compares the holder's `renewTime` with its own wall clock (two machines'
  clocks disagree by any amount). It notes, on its own monotonic clock, when it *first saw*
  the record as it is now; the record is expired only once it has stayed unchanged for the
  lease's duration since then. A holder that renews changes the record, which starts the
  count again.
- The leader stops writing `renew_deadline` after the start of its last successful renewal.
  Any standby saw that renewal no earlier than it was sent, so it cannot take over before
  `lease_duration` after it; `renew_deadline < lease_duration` leaves the leader that margin
  to have stopped (and its last writes to have landed) before anyone else may start.

Times named `now`, `seen_at` and `renewed_at` are seconds on one replica's monotonic clock;
`wall` is only what gets written into the record for people and other tools to read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class LeaseRecord:
    """The leader-election fields of a coordination.k8s.io Lease's spec."""

    holder: str = ""
    duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0


@dataclass(frozen=True)
class Observation:
    """A record, and when this replica first saw it as it is."""

    record: LeaseRecord
    seen_at: float


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """The observation after reading `record` at `now`: unchanged records keep their first sighting."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def held_by_another(observation: Observation, identity: str, now: float, default_duration: float) -> bool:
    """True while someone else holds the lease: they are named in it and it has not gone unrenewed long enough.

    The duration the holder wrote counts (it may differ from ours during a rolling change of
    settings); a record without one gets ours.
    """
    record = observation.record
    if not record.holder or record.holder == identity:
        return False
    duration = record.duration_seconds if record.duration_seconds > 0 else default_duration
    return now < observation.seen_at + duration


def claim(current: LeaseRecord | None, identity: str, duration_seconds: int, wall: str) -> LeaseRecord:
    """The record to write to take or renew the lease, `wall` being this replica's time as a MicroTime."""
    if current is None:
        return LeaseRecord(identity, duration_seconds, acquire_time=wall, renew_time=wall, transitions=0)
    if current.holder == identity:
        return replace(current, duration_seconds=duration_seconds, renew_time=wall)
    return LeaseRecord(
        identity,
        duration_seconds,
        acquire_time=wall,
        renew_time=wall,
        transitions=current.transitions + 1 if current.holder else current.transitions,
    )


def released(current: LeaseRecord, wall: str) -> LeaseRecord:
    """The record a leader that stops writes as it goes: no holder, so a standby takes it at its
    next attempt rather than after a whole lease (client-go's ReleaseOnCancel)."""
    return LeaseRecord("", 1, acquire_time=wall, renew_time=wall, transitions=current.transitions)


def may_write(renewed_at: float | None, renew_deadline: float, now: float) -> bool:
    """Whether the leader may still write: its last renewal began less than the renew deadline ago."""
    return renewed_at is not None and now < renewed_at + renew_deadline


def renewal_budget(renewed_at: float, renew_deadline: float, now: float) -> float:
    """Seconds left for renewing before the leader must stop (0 when already too late)."""
    return max(0.0, renewed_at + renew_deadline - now)
