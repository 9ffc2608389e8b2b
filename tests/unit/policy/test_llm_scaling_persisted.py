"""policy.llm_scaling.persisted: the scaling memory through a tenant-writable annotation and back."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.llm_scaling import ColdStartEstimate, ScalingMemory
from aisched.policy.llm_scaling.history import LoadHistory
from aisched.policy.llm_scaling.persisted import (
    LOAD_BUCKET_S,
    MAX_ENTRIES,
    MAX_RATE,
    ReadLoad,
    load_from_json,
    load_to_json,
    memory_from_json,
    memory_to_json,
)

NOW = 1_000_000.0
FRESH = ScalingMemory(cold_start=ColdStartEstimate(prior_s=90.0))

times = st.floats(0, NOW)
memories = st.builds(
    ScalingMemory,
    recommendations=st.lists(st.tuples(times, st.integers(0, 1000)), max_size=20).map(tuple),
    changes=st.lists(st.tuples(times, st.integers(-50, 50)), max_size=5).map(tuple),
    rate_per_replica=st.one_of(st.none(), st.floats(0.01, 1e4)),
    last_arrival_at=st.one_of(st.none(), times),
)


@settings(max_examples=200, deadline=None)
@given(memories)
def test_what_is_written_is_read_back_but_the_load_history_and_boots(memory: ScalingMemory) -> None:
    read = memory_from_json(memory_to_json(memory), now=NOW, fresh=FRESH)
    assert read == ScalingMemory(
        memory.recommendations,
        FRESH.load,
        FRESH.cold_start,
        memory.rate_per_replica,
        memory.last_arrival_at,
        memory.changes,
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=15), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(("recommendations", "changes", "ratePerReplica", "lastArrivalAt")), json_values))
def test_whatever_a_tenant_writes_reads_as_a_memory_of_finite_past_bounded_entries(raw: dict[str, object]) -> None:
    read = memory_from_json(json.dumps(raw), now=NOW, fresh=FRESH)
    for entries in (read.recommendations, read.changes):
        assert len(entries) <= MAX_ENTRIES
        assert all(math.isfinite(t) and 0 <= t <= NOW and isinstance(n, int) for t, n in entries)
    assert read.rate_per_replica is None or (math.isfinite(read.rate_per_replica) and read.rate_per_replica > 0)
    assert read.last_arrival_at is None or 0 <= read.last_arrival_at <= NOW
    assert read.cold_start == FRESH.cold_start and read.load == FRESH.load


def test_a_long_list_is_read_to_its_newest_entries() -> None:
    raw = {"recommendations": [[float(t), 1] for t in range(500)]}
    read = memory_from_json(json.dumps(raw), now=NOW, fresh=FRESH)
    assert [t for t, _ in read.recommendations] == [float(t) for t in range(500 - MAX_ENTRIES, 500)]


DAY = 86_400.0


def diurnal(when: float) -> float:
    """A service's requests per second: a daily swing, busier on weekdays, a little noise."""
    weekday = 1.0 if (when // DAY) % 7 < 5 else 0.6
    return weekday * (20 + 15 * math.sin(2 * math.pi * when / DAY)) + 0.5 * math.sin(when / 97)


def a_week_of_load(now: float) -> LoadHistory:
    history = LoadHistory()
    when = now - 8 * DAY
    while when <= now:
        history = history.record(when, diurnal(when))
        when += 60.0
    return history


def test_a_restarted_operator_forecasts_from_the_history_it_wrote_as_it_did_before() -> None:
    now = 30 * DAY + 3_600.0
    live = a_week_of_load(now)
    persisted = load_to_json(live)
    assert persisted is not None and persisted.through <= now
    assert len(persisted.text) < 32 * 1024  # of the 256 KiB the API server allows all annotations together
    read = load_from_json(persisted.text, now=now, fresh=LoadHistory()).load
    assert len(read.samples) > 0.99 * 8 * DAY / 60 - 5
    # Over the day after the restart (nothing new recorded), forecasting a large model's 30-minute cold
    # start ahead: as close to the rate that came as the operator that never restarted, and far closer
    # than one with no history, whose forecast has no season.
    horizon = 1_800.0

    def error(history: LoadHistory) -> float:
        moments = [now + minute * 60.0 for minute in range(0, 24 * 60, 7)]
        return sum(abs(history.forecast(at, diurnal(at), horizon) - diurnal(at + horizon)) for at in moments)

    assert error(read) <= 1.1 * error(live)
    assert error(read) < 0.2 * error(LoadHistory())


def test_the_bucket_in_progress_is_not_written() -> None:
    history = LoadHistory().record(0.0, 1.0).record(60.0, 1.0).record(LOAD_BUCKET_S + 10, 9.0)
    persisted = load_to_json(history)
    assert persisted is not None and persisted.through == LOAD_BUCKET_S
    assert json.loads(persisted.text)["rates"] == [1.0]
    assert load_to_json(LoadHistory().record(10.0, 1.0)) is None


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(("start", "step", "rates")),
        json_values | st.lists(st.one_of(st.none(), st.floats(), st.integers()), max_size=50),
    )
)
def test_whatever_a_tenant_writes_as_load_reads_as_a_bounded_finite_past(raw: dict[str, object]) -> None:
    fresh = LoadHistory()
    read = load_from_json(json.dumps(raw), now=NOW, fresh=fresh).load
    assert (read.step_s, read.keep_s) == (fresh.step_s, fresh.keep_s)
    assert len(read.samples) <= fresh.keep_s / fresh.step_s + 1
    for when, rate in read.samples:
        assert math.isfinite(when) and NOW - fresh.keep_s <= when <= NOW
        assert math.isfinite(rate) and 0 <= rate <= MAX_RATE


def test_a_history_read_back_is_written_again_as_it_was_restart_after_restart() -> None:
    now = 30 * DAY + 3_600.0
    persisted = load_to_json(a_week_of_load(now))
    assert persisted is not None
    text, through = persisted.text, persisted.through
    for restart in range(3):
        read = load_from_json(text, now=now + restart, fresh=LoadHistory())
        assert read.through == through
        # The first sample after the restart falls in the bucket that was in progress: the last one read
        # is complete now, and written again with the means it had.
        again = load_to_json(read.load.record(through + read.load.step_s, 99.0))
        assert again is not None and again.through == through
        assert json.loads(again.text)["rates"] == json.loads(text)["rates"][-len(json.loads(again.text)["rates"]) :]
        text = again.text


# On the step and within the span: each case below is refused for what is wrong in it alone.
START = math.floor(NOW / LOAD_BUCKET_S) * LOAD_BUCKET_S - 10 * LOAD_BUCKET_S


@pytest.mark.parametrize(
    "kept",
    [
        f'{{"start": {START}, "step": 300, "rates": [NaN]}}',
        f'{{"start": {START}, "step": 300, "rates": [-1]}}',
        f'{{"start": {START + 9 * LOAD_BUCKET_S}, "step": 300, "rates": [1, 1]}}',  # ends after now
        f'{{"start": {START}, "step": 60, "rates": [1]}}',
        f'{{"start": {START}, "step": 300, "rates": [true]}}',
        f'{{"start": {START + 1}, "step": 300, "rates": [1]}}',
        f'{{"start": {START}, "step": 300, "rates": [' + ",".join(["1"] * 5_000) + "]}",
    ],
    ids=["not_a_number", "negative", "from_the_future", "another_step", "not_a_rate", "off_the_step", "too_long"],
)
def test_a_forged_load_history_gives_a_fresh_one(kept: str) -> None:
    assert load_from_json(kept, now=NOW, fresh=LoadHistory()) == ReadLoad(LoadHistory())


def test_the_same_history_well_formed_is_read() -> None:
    """The forged cases' control: each refused for what is wrong in it, not for where it starts."""
    read = load_from_json(f'{{"start": {START}, "step": 300, "rates": [1, 2]}}', now=NOW, fresh=LoadHistory())
    assert {rate for _, rate in read.load.samples} == {1.0, 2.0}
    assert read.through == START + 2 * LOAD_BUCKET_S
