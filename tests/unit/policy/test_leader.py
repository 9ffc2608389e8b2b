"""The leader election's judgement: expiry by locally observed time, and the leader's write fence."""

from __future__ import annotations

from aisched.policy.leader import (
    LeaseRecord,
    Observation,
    claim,
    held_by_another,
    may_write,
    observe,
    renewal_budget,
)

OTHER = LeaseRecord("other", 15, acquire_time="2026-01-01T00:00:00.000000Z", renew_time="2026-01-01T00:00:00.000000Z")


def test_an_unchanged_record_keeps_its_first_sighting() -> None:
    first = observe(None, OTHER, now=100.0)
    assert observe(first, OTHER, now=110.0) == Observation(OTHER, 100.0)


def test_a_renewed_record_starts_the_count_again() -> None:
    first = observe(None, OTHER, now=100.0)
    renewed = LeaseRecord("other", 15, OTHER.acquire_time, "2026-01-01T00:00:02.000000Z")
    assert observe(first, renewed, now=110.0) == Observation(renewed, 110.0)


def test_the_holder_holds_until_the_record_went_unchanged_for_its_duration() -> None:
    seen = Observation(OTHER, 100.0)
    assert held_by_another(seen, "me", now=114.9, default_duration=10)
    assert not held_by_another(seen, "me", now=115.0, default_duration=10)


def test_the_holders_renew_time_is_never_compared_with_our_clock() -> None:
    # A holder whose clock is a year behind (or ahead) writes a renewTime that means nothing here:
    # what counts is that the record changed, and when we saw it change.
    ancient = LeaseRecord("other", 15, renew_time="2025-01-01T00:00:00.000000Z")
    future = LeaseRecord("other", 15, renew_time="2027-01-01T00:00:00.000000Z")
    for record in (ancient, future):
        seen = observe(None, record, now=500.0)
        assert held_by_another(seen, "me", now=514.0, default_duration=15)
        assert not held_by_another(seen, "me", now=515.0, default_duration=15)


def test_a_replica_just_started_waits_a_whole_lease_even_for_a_long_dead_holder() -> None:
    # It cannot know how long the record has gone unrenewed; it only knows since when it has watched.
    seen = observe(None, OTHER, now=0.0)
    assert held_by_another(seen, "me", now=14.0, default_duration=15)


def test_nobody_holds_an_empty_or_our_own_record() -> None:
    assert not held_by_another(Observation(LeaseRecord(), 100.0), "me", now=100.0, default_duration=15)
    assert not held_by_another(Observation(LeaseRecord("me", 15), 100.0), "me", now=100.0, default_duration=15)


def test_a_record_without_a_duration_gets_ours() -> None:
    seen = Observation(LeaseRecord("other", 0), 100.0)
    assert held_by_another(seen, "me", now=109.0, default_duration=10)
    assert not held_by_another(seen, "me", now=110.0, default_duration=10)


def test_claiming_counts_transitions_and_keeps_the_acquire_time_on_renewal() -> None:
    created = claim(None, "me", 15, "t0")
    assert created == LeaseRecord("me", 15, acquire_time="t0", renew_time="t0", transitions=0)
    renewed = claim(created, "me", 15, "t1")
    assert (renewed.acquire_time, renewed.renew_time, renewed.transitions) == ("t0", "t1", 0)
    taken = claim(renewed, "you", 20, "t2")
    assert taken == LeaseRecord("you", 20, acquire_time="t2", renew_time="t2", transitions=1)
    released = LeaseRecord("", 15, transitions=4)
    assert claim(released, "me", 15, "t3").transitions == 4  # nobody held it: no transition


def test_the_leader_stops_writing_at_the_renew_deadline_before_anyone_may_take_over() -> None:
    renewed_at, deadline, lease = 100.0, 10.0, 15.0
    assert not may_write(None, deadline, now=0.0)
    assert may_write(renewed_at, deadline, now=109.9)
    assert not may_write(renewed_at, deadline, now=110.0)
    # A standby saw the renewal no earlier than it was sent, so the earliest it may take over is
    # renewed_at + lease: strictly after the leader stopped writing.
    standby = Observation(LeaseRecord("leader", int(lease)), seen_at=renewed_at)
    assert held_by_another(standby, "standby", now=renewed_at + deadline, default_duration=lease)


def test_the_renewal_budget_is_what_is_left_of_the_deadline() -> None:
    assert renewal_budget(100.0, 10.0, now=104.0) == 6.0
    assert renewal_budget(100.0, 10.0, now=120.0) == 0.0
