"""policy.llm_scaling.persisted: the scaling memory through a tenant-writable annotation and back."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.llm_scaling import ColdStartEstimate, ScalingMemory
from aisched.policy.llm_scaling.persisted import MAX_ENTRIES, memory_from_json, memory_to_json

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
