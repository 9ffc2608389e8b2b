"""policy.regions.choose_region: where a job goes among several clusters, and when it starts there."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.carbon import Forecast
from aisched.policy.regions import ChoiceReason, RegionJob, RegionOffer, RegionSettings, choose_region

NOW = datetime(2020, 3, 2, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


def flat(value: float, hours: int = 48) -> Forecast:
    return Forecast("r", NOW, HOUR, (value,) * hours)


def job(
    hours: float = 2,
    deadline_h: float | None = None,
    *,
    data: frozenset[str] = frozenset(),
    move: float = 0.0,
    reserve: timedelta = timedelta(0),
) -> RegionJob:
    deadline = NOW + timedelta(hours=deadline_h) if deadline_h is not None else None
    return RegionJob(1, timedelta(hours=hours), 300.0, NOW, deadline, data, move, reserve)


def test_of_regions_that_cost_the_same_the_cleanest_wins() -> None:
    offers = [RegionOffer("gb", NOW, 3.0, flat(200)), RegionOffer("fr", NOW, 3.0, flat(50))]
    choice = choose_region(job(), offers, NOW)
    assert choice is not None and choice.region == "fr" and choice.reason == ChoiceReason.CLEANEST
    assert choice.chosen.grams is not None and abs(choice.chosen.grams - 0.3 * 2 * 50) < 1e-6


def test_a_cleaner_region_is_paid_for_only_within_the_cost_slack() -> None:
    offers = [RegionOffer("gb", NOW, 3.0, flat(200)), RegionOffer("fr", NOW, 3.12, flat(50))]  # 4% more
    assert choose_region(job(), offers, NOW).region == "gb"  # type: ignore[union-attr]
    slack = RegionSettings(cost_slack=0.05)
    assert choose_region(job(), offers, NOW, slack).region == "fr"  # type: ignore[union-attr]
    assert choose_region(job(), offers, NOW, RegionSettings(cost_slack=0.03)).region == "gb"  # type: ignore[union-attr]


def test_moving_the_data_counts_in_the_cost() -> None:
    offers = [RegionOffer("gb", NOW, 1.0, flat(200)), RegionOffer("fr", NOW, 1.0, flat(50))]
    at_home = job(data=frozenset({"gb"}), move=5.0)
    assert choose_region(at_home, offers, NOW).region == "gb"  # type: ignore[union-attr]
    cheap_move = job(data=frozenset({"gb"}), move=0.0)
    assert choose_region(cheap_move, offers, NOW).region == "fr"  # type: ignore[union-attr]


def test_a_region_that_would_miss_the_deadline_loses_to_one_that_meets_it() -> None:
    later = NOW + 5 * HOUR
    offers = [RegionOffer("fr", later, 1.0, flat(10)), RegionOffer("gb", NOW, 3.0, flat(400))]
    choice = choose_region(job(hours=2, deadline_h=4), offers, NOW)
    assert choice is not None and choice.region == "gb" and choice.chosen.end <= NOW + 4 * HOUR


def test_when_every_region_is_late_the_one_that_finishes_first_wins() -> None:
    offers = [RegionOffer("fr", NOW + 9 * HOUR, 1.0, flat(10)), RegionOffer("gb", NOW + 6 * HOUR, 3.0, flat(400))]
    choice = choose_region(job(hours=2, deadline_h=4), offers, NOW)
    assert choice is not None and choice.region == "gb" and choice.reason == ChoiceReason.LATE_EVERYWHERE


def test_a_job_that_may_not_wait_goes_where_it_starts_soonest() -> None:
    offers = [RegionOffer("fr", NOW + 3 * HOUR, 3.0, flat(10)), RegionOffer("gb", NOW, 3.0, flat(400))]
    choice = choose_region(job(), offers, NOW)
    assert choice is not None and choice.region == "gb" and choice.start == NOW


def test_a_deferral_is_taken_only_when_it_saves_enough() -> None:
    dirty_now = Forecast("r", NOW, HOUR, (400, 400, 400, 100, 100, 100, 100, 100))
    offers = [RegionOffer("gb", NOW, 3.0, dirty_now)]
    choice = choose_region(job(hours=2, deadline_h=8), offers, NOW)
    assert choice is not None and choice.start == NOW + 3 * HOUR and choice.chosen.plan is not None
    mild = Forecast("r", NOW, HOUR, (110, 110, 110, 100, 100, 100, 100, 100))  # 9% saved: under the 25% bar
    choice = choose_region(job(hours=2, deadline_h=8), [RegionOffer("gb", NOW, 3.0, mild)], NOW)
    assert choice is not None and choice.start == NOW
    space_only = RegionSettings(shift_in_time=False)
    assert choose_region(job(hours=2, deadline_h=8), offers, NOW, space_only).start == NOW  # type: ignore[union-attr]


def test_a_deferral_that_spends_the_slack_spot_needs_is_priced_on_demand() -> None:
    dirty_now = Forecast("r", NOW, HOUR, (400, 400, 400, 400, 400, 400, 100, 100))
    spot = RegionOffer("gb", NOW, 3.0, dirty_now, spot_gpu_hour_price=1.0)
    reserve = timedelta(minutes=35)
    choice = choose_region(job(hours=2, deadline_h=8, reserve=reserve), [spot], NOW)
    # Waiting to 18:00 ends at the deadline: no room for an interruption, so on-demand: three times the price.
    assert choice is not None and choice.start == NOW and choice.chosen.spot
    priced = {(e.start, e.spot): e.cost for e in choice.considered}
    assert priced[(NOW, True)] == 2.0 and priced[(NOW + 6 * HOUR, False)] == 6.0


def test_no_offer_no_choice() -> None:
    assert choose_region(job(), [], NOW) is None


offer_lists = st.lists(
    st.tuples(
        st.integers(0, 12),  # hours until the gang fits
        st.floats(0.5, 5.0),  # price
        st.lists(st.floats(0, 600), min_size=30, max_size=30),  # forecast
        st.booleans(),  # spot to be had
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(offer_lists, st.floats(0.5, 6), st.one_of(st.none(), st.floats(1, 24)), st.floats(0, 0.2))
def test_the_choice_meets_the_deadline_where_any_region_can_and_never_pays_beyond_the_slack(
    specs: list[tuple[int, float, list[float], bool]], hours: float, deadline_h: float | None, slack: float
) -> None:
    offers = [
        RegionOffer(
            f"r{i}", NOW + fits * HOUR, price, Forecast("r", NOW, HOUR, tuple(values)), price / 3 if spot else None
        )
        for i, (fits, price, values, spot) in enumerate(specs)
    ]
    the_job = job(hours=hours, deadline_h=deadline_h, reserve=timedelta(minutes=35))
    choice = choose_region(the_job, offers, NOW, RegionSettings(cost_slack=slack))
    assert choice is not None
    starts_now = [e for e in choice.considered if e.plan is None]
    if the_job.deadline is not None and any(e.end <= the_job.deadline for e in starts_now):
        assert choice.chosen.end <= the_job.deadline
        floor = min(e.cost for e in starts_now if e.end <= the_job.deadline)
        assert choice.chosen.cost <= floor * (1 + slack) + 1e-6
    if the_job.deadline is None:
        assert choice.start == min(e.start for e in starts_now)
