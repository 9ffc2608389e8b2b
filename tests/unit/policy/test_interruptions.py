"""Per-pool interruption rate: prior for pools never seen, history taking over, fading."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisched.api.common import CapacityType
from aisched.policy.interruptions import CapacityPool, InterruptionPrior, PoolHistory, interruption_rate

HOUR = 3600.0
T0 = datetime(2025, 1, 1, tzinfo=UTC)
PRIOR = InterruptionPrior.per_hour(0.1, weight_hours=24)


def test_a_pool_never_seen_gets_the_prior() -> None:
    assert interruption_rate(None, PRIOR) == pytest.approx(0.1 / HOUR)
    assert interruption_rate(PoolHistory(), PRIOR) == pytest.approx(0.1 / HOUR)


def test_a_long_history_outweighs_the_prior() -> None:
    # 1,000 node-hours with 500 interruptions: one every 2 hours.
    history = PoolHistory().observe(T0, exposure_s=1000 * HOUR, interruptions=500)
    assert interruption_rate(history, PRIOR) == pytest.approx((2.4 + 500) / (1024 * HOUR))
    assert interruption_rate(history, PRIOR) == pytest.approx(0.5 / HOUR, rel=0.03)


def test_quiet_exposure_lowers_the_rate_below_the_prior() -> None:
    history = PoolHistory().observe(T0, exposure_s=240 * HOUR)
    assert interruption_rate(history, PRIOR) < PRIOR.rate_per_s / 5


@given(st.lists(st.tuples(st.floats(min_value=0, max_value=1e5), st.integers(min_value=0, max_value=5)), max_size=30))
def test_incremental_updates_equal_one_batch_update(observations: list[tuple[float, int]]) -> None:
    history = PoolHistory()
    for exposure, interruptions in observations:
        history = history.observe(T0, exposure_s=exposure, interruptions=interruptions)
    batch = PoolHistory().observe(
        T0,
        exposure_s=sum(exposure for exposure, _ in observations),
        interruptions=sum(count for _, count in observations),
    )
    assert interruption_rate(history, PRIOR) == pytest.approx(interruption_rate(batch, PRIOR))


def test_old_observations_fade_with_the_half_life() -> None:
    stormy = PoolHistory().observe(T0, exposure_s=100 * HOUR, interruptions=100)
    week_later = stormy.observe(T0 + timedelta(days=7), exposure_s=0.0, half_life_s=7 * 86400.0)
    assert week_later.interruptions == pytest.approx(50)
    assert week_later.exposure_s == pytest.approx(50 * HOUR)
    assert week_later.as_of == T0 + timedelta(days=7)


def test_negative_observations_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        PoolHistory().observe(T0, exposure_s=-1.0)


def test_a_prior_needs_a_positive_weight() -> None:
    with pytest.raises(ValueError, match="weight"):
        InterruptionPrior(rate_per_s=1e-5, weight_s=0.0)


def test_pool_key_is_a_stable_label() -> None:
    pool = CapacityPool("NVIDIA-H100-80GB-HBM3", "us-east-2a", CapacityType.SPOT)
    assert pool.key == "NVIDIA-H100-80GB-HBM3/us-east-2a/Spot"
