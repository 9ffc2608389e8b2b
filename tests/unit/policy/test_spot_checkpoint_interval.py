"""The Young/Daly checkpoint interval and the lost-work accounting."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisched.policy.spot import (
    MAX_CHECKPOINT_INTERVAL_S,
    MIN_CHECKPOINT_INTERVAL_S,
    SLACK_AT_RISK,
    daly_interval,
    losing_interruption_share,
    lost_work_seconds,
    optimal_checkpoint_interval,
    spot_checkpoint_interval,
    young_interval,
)

HOUR = 3600.0
costs = st.floats(min_value=1.0, max_value=1800.0)
mtbis = st.floats(min_value=60.0, max_value=30 * 86400.0)


def test_young_known_value() -> None:
    assert young_interval(100.0, 5000.0) == pytest.approx(1000.0)  # sqrt(2 * 100 * 5000)


def test_daly_known_value() -> None:
    # C / 2M = 0.01: sqrt(2CM) * (1 + 0.1/3 + 0.01/9) - C
    assert daly_interval(100.0, 5000.0) == pytest.approx(1000.0 * (1 + 0.1 / 3 + 0.01 / 9) - 100.0)


def test_daly_is_the_mean_time_between_interruptions_when_checkpoints_cost_more_than_twice_it() -> None:
    assert daly_interval(300.0, 100.0) == 100.0


def test_a_typical_spot_gpu_checkpoints_about_every_38_minutes() -> None:
    # A 2-minute checkpoint and one interruption every 6 hours (the AWS V100 traces).
    interval = optimal_checkpoint_interval(120.0, 1 / (6 * HOUR))
    assert interval == pytest.approx(daly_interval(120.0, 6 * HOUR))
    assert 35 * 60 < interval < 40 * 60


@given(cost=costs, mtbi=mtbis)
def test_daly_agrees_with_young_when_checkpoints_are_cheap(cost: float, mtbi: float) -> None:
    if cost < mtbi / 1000:
        assert daly_interval(cost, mtbi) == pytest.approx(young_interval(cost, mtbi), rel=0.02)


@given(cost=costs, mtbi=mtbis, factor=st.floats(min_value=1.0, max_value=100.0))
def test_rarer_interruptions_never_mean_more_frequent_checkpoints(cost: float, mtbi: float, factor: float) -> None:
    if cost <= mtbi:  # outside that, spot is hopeless and Daly's regime changes
        assert optimal_checkpoint_interval(cost, 1 / (mtbi * factor)) >= optimal_checkpoint_interval(cost, 1 / mtbi)


@given(cost=costs, mtbi=mtbis, factor=st.floats(min_value=1.0, max_value=10.0))
def test_dearer_checkpoints_never_mean_more_frequent_checkpoints(cost: float, mtbi: float, factor: float) -> None:
    if cost * factor <= mtbi:
        assert optimal_checkpoint_interval(cost * factor, 1 / mtbi) >= optimal_checkpoint_interval(cost, 1 / mtbi)


@given(cost=costs, rate=st.floats(min_value=0.0, max_value=1.0))
def test_the_interval_stays_within_its_bounds(cost: float, rate: float) -> None:
    assert MIN_CHECKPOINT_INTERVAL_S <= optimal_checkpoint_interval(cost, rate) <= MAX_CHECKPOINT_INTERVAL_S


def test_no_interruptions_means_the_longest_interval() -> None:
    assert optimal_checkpoint_interval(60.0, 0.0) == MAX_CHECKPOINT_INTERVAL_S
    assert optimal_checkpoint_interval(60.0, 0.0, max_s=7200.0) == 7200.0


def test_a_storm_of_interruptions_is_floored() -> None:
    assert optimal_checkpoint_interval(10.0, 1 / 30.0) == MIN_CHECKPOINT_INTERVAL_S


@pytest.mark.parametrize(
    ("cost", "rate"), [(0.0, 1e-4), (-1.0, 1e-4), (math.nan, 1e-4), (60.0, -1e-4), (60.0, math.inf)]
)
def test_nonsense_inputs_are_refused(cost: float, rate: float) -> None:
    with pytest.raises(ValueError, match=r"checkpoint cost|interruption rate"):
        optimal_checkpoint_interval(cost, rate)


T0 = datetime(2025, 1, 1, tzinfo=UTC)


def test_lost_work_is_the_time_since_the_last_checkpoint() -> None:
    assert lost_work_seconds(T0, T0 + timedelta(minutes=25)) == 1500.0


def test_a_checkpoint_from_an_earlier_run_counts_from_the_restart() -> None:
    restart = T0 + timedelta(hours=1)
    assert lost_work_seconds(T0, restart + timedelta(minutes=10), gang_start_time=restart) == 600.0


def test_no_lost_work_when_the_interruption_comes_right_after_a_checkpoint() -> None:
    assert lost_work_seconds(T0 + timedelta(seconds=5), T0) == 0.0


def test_lost_work_needs_some_reference_time() -> None:
    with pytest.raises(ValueError, match="start time"):
        lost_work_seconds(None, T0)


# -- periodic checkpoints on spot, when the SIGTERM save may land in the notice ----------------

counts = st.integers(min_value=0, max_value=50)


@given(counts, counts)
def test_every_notice_save_that_lands_thins_the_losing_share_and_every_miss_thickens_it(
    interruptions: int, saved: int
) -> None:
    saved = min(saved, interruptions)
    share = losing_interruption_share(
        checkpoint_cost_s=60, notice_s=120, interruptions=interruptions, saved_on_notice=saved
    )
    assert 0 < share <= 1
    after_a_save = losing_interruption_share(
        checkpoint_cost_s=60, notice_s=120, interruptions=interruptions + 1, saved_on_notice=saved + 1
    )
    after_a_miss = losing_interruption_share(
        checkpoint_cost_s=60, notice_s=120, interruptions=interruptions + 1, saved_on_notice=saved
    )
    assert after_a_save < share < after_a_miss


def test_a_checkpoint_longer_than_the_notice_never_fits_so_every_interruption_loses_work() -> None:
    assert losing_interruption_share(checkpoint_cost_s=200, notice_s=120, interruptions=9, saved_on_notice=0) == 1.0
    assert spot_checkpoint_interval(200.0, 1 / (6 * HOUR), notice_s=120) == optimal_checkpoint_interval(
        200.0, 1 / (6 * HOUR)
    )


def test_more_saves_than_interruptions_is_refused() -> None:
    with pytest.raises(ValueError, match="saved_on_notice"):
        losing_interruption_share(checkpoint_cost_s=60, notice_s=120, interruptions=1, saved_on_notice=2)


def test_a_job_whose_notice_saves_land_checkpoints_less_often() -> None:
    rate = 1 / (6 * HOUR)
    untried = spot_checkpoint_interval(120.0, rate, notice_s=120)
    proven = spot_checkpoint_interval(120.0, rate, notice_s=120, interruptions=6, saved_on_notice=6)
    failing = spot_checkpoint_interval(120.0, rate, notice_s=120, interruptions=6, saved_on_notice=0)
    assert failing < untried < proven
    assert failing == pytest.approx(optimal_checkpoint_interval(120.0, rate * 7 / 10))


@given(costs, mtbis, st.floats(min_value=0, max_value=7 * 86400.0), counts)
def test_the_interval_never_risks_more_than_its_share_of_the_slack(
    cost: float, mtbi: float, slack: float, saved: int
) -> None:
    interval = spot_checkpoint_interval(
        cost, 1 / mtbi, notice_s=120, interruptions=saved, saved_on_notice=saved, slack_s=slack
    )
    assert MIN_CHECKPOINT_INTERVAL_S <= interval <= max(MIN_CHECKPOINT_INTERVAL_S, SLACK_AT_RISK * slack)
