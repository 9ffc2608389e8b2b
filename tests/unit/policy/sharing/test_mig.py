"""MIG layout rules as data: valid placements, no overlap, at most 7 compute slices; aisched's layout choice."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.sharing.mig import (
    COMPUTE_SLICES,
    KINDS,
    MIG_MODELS,
    SLOTS,
    STATIC_LAYOUTS,
    free_start,
    is_valid,
    layout_for,
    maximal_layouts,
    named,
    occupied,
)

models = st.sampled_from(sorted(MIG_MODELS))
instances = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, SLOTS - 1)), max_size=8)


@settings(max_examples=150)
@given(models, instances)
def test_a_valid_layout_places_each_instance_at_an_allowed_start_without_overlap(
    model: str, layout: list[tuple[str, int]]
) -> None:
    profiles = MIG_MODELS[model]
    if not is_valid(tuple(layout), profiles):
        return
    slots = [slot for kind, start in layout for slot in range(start, start + profiles[kind].size)]
    assert len(slots) == len(set(slots)) and all(0 <= slot < SLOTS for slot in slots)
    assert all(start in profiles[kind].starts for kind, start in layout)
    assert sum(profiles[kind].compute for kind, _ in layout) <= COMPUTE_SLICES


@given(models, st.sampled_from(KINDS))
def test_a_profile_off_its_allowed_starts_is_refused(model: str, kind: str) -> None:
    profile = MIG_MODELS[model][kind]
    for start in set(range(SLOTS)) - set(profile.starts):
        with pytest.raises(ValueError, match="cannot start"):
            occupied(((kind, start),), MIG_MODELS[model])


@pytest.mark.parametrize("model", sorted(MIG_MODELS))
def test_every_maximal_layout_is_valid_and_full(model: str) -> None:
    layouts = maximal_layouts(model)
    assert (("7g", 0),) in layouts and STATIC_LAYOUTS["all_1g"] in layouts
    for layout in layouts:
        assert is_valid(layout, MIG_MODELS[model])
        assert all(free_start(layout, kind, MIG_MODELS[model]) is None for kind in KINDS)


@pytest.mark.parametrize("model", sorted(MIG_MODELS))
def test_known_layouts_from_nvidias_tables(model: str) -> None:
    profiles = MIG_MODELS[model]
    assert is_valid((("4g", 0), ("3g", 4)), profiles)
    assert not is_valid((("3g", 0), ("4g", 4)), profiles)  # a 4g instance only starts at slot 0
    assert not is_valid((("3g", 0), ("3g", 4), ("1g", 6)), profiles)  # overlaps the second 3g
    assert all(is_valid(layout, profiles) for layout in STATIC_LAYOUTS.values())


@given(models, st.sampled_from(KINDS), st.dictionaries(st.sampled_from(KINDS), st.floats(0, 100)))
def test_the_layout_asked_for_holds_the_profile_that_triggered_it(
    model: str, kind: str, demand: dict[str, float]
) -> None:
    layout = layout_for(model, kind, demand)
    assert is_valid(layout, MIG_MODELS[model]) and kind in {k for k, _ in layout}


def test_the_layout_follows_the_demand_and_names_the_models_profiles() -> None:
    assert layout_for("H100-80GB", "1g", {"1g": 1.0}) == STATIC_LAYOUTS["all_1g"]
    assert sorted(k for k, _ in layout_for("A100-40GB", "3g", {"3g": 1.0})) == ["3g", "3g"]
    assert named((("3g", 0), ("4g", 4)), "H100-80GB") == ["3g.40gb", "4g.40gb"]
