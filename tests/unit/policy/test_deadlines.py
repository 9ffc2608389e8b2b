"""The time a TrainingJob can spare (aisched.policy.deadlines)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aisched.policy.deadlines import checkpoint_grace_seconds, deadline_slack_seconds

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_slack_is_the_time_to_the_deadline_less_the_work_and_each_overhead() -> None:
    deadline = T0 + timedelta(hours=10)
    assert deadline_slack_seconds(deadline, T0, 3600.0) == 9 * 3600.0
    assert deadline_slack_seconds(deadline, T0, 3600.0, 300.0, 15.0) == 9 * 3600.0 - 315.0


def test_a_deadline_that_cannot_be_met_leaves_negative_slack() -> None:
    assert deadline_slack_seconds(T0 + timedelta(minutes=30), T0, 3600.0) == -1800.0


def test_the_slack_is_the_sum_the_controller_used_to_make_to_the_last_bit() -> None:
    # The overheads are taken off one by one, as the inline sum did: the gauges do not move.
    deadline, now = T0 + timedelta(seconds=86_400.1), T0 + timedelta(microseconds=3)
    inline = (deadline - now).total_seconds() - 3600.7 - 0.1 - 0.2
    assert deadline_slack_seconds(deadline, now, 3600.7, 0.1, 0.2) == inline


def test_workers_get_the_notice_window_less_the_teardown_margin_but_never_under_five_seconds() -> None:
    assert checkpoint_grace_seconds(120) == 110
    assert checkpoint_grace_seconds(30) == 20
    assert checkpoint_grace_seconds(12) == 5
    assert checkpoint_grace_seconds(5) == 5
