"""Finding the members of a batch a computation fails on, by halving: singles and pairs."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from aisched.policy.culprits import culprits


class Failing:
    """Fails on a batch holding any bad single, or both members of any bad pair; counts its calls."""

    def __init__(self, singles: set[int], pairs: set[frozenset[int]]) -> None:
        self.singles, self.pairs, self.calls = singles, pairs, 0

    def __call__(self, batch: Sequence[int]) -> Exception | None:
        self.calls += 1
        members = set(batch)
        if members & self.singles or any(pair <= members for pair in self.pairs):
            return ValueError(sorted(members))
        return None

    def involved(self, item: int) -> bool:
        return item in self.singles or any(item in pair for pair in self.pairs)


def test_one_bad_job_among_a_thousand_costs_a_few_decisions_not_a_thousand() -> None:
    fails = Failing({613}, set())
    found = culprits([], list(range(1024)), fails)
    assert [item for item, _ in found] == [613]
    assert fails.calls <= 2 * math.log2(1024) + 1


def test_a_pair_split_across_the_halves_is_broken() -> None:
    fails = Failing(set(), {frozenset({3, 900})})
    found = culprits([], list(range(1024)), fails)
    assert [item for item, _ in found] == [900]
    assert fails.calls <= 4 * math.log2(1024)


def test_a_failure_that_needs_the_fixed_members_blames_the_candidate() -> None:
    fails = Failing(set(), {frozenset({-1, 7})})
    found = culprits([-1, -2], list(range(10)), fails)
    assert [item for item, _ in found] == [7]


def test_nothing_to_blame_when_the_batch_passes() -> None:
    fails = Failing(set(), set())
    assert culprits([], list(range(10)), fails) == []
    assert fails.calls == 1


@given(
    size=st.integers(1, 60),
    singles=st.sets(st.integers(0, 59), max_size=4),
    pairs=st.sets(st.frozensets(st.integers(0, 59), min_size=2, max_size=2), max_size=4),
)
def test_setting_aside_what_is_found_round_after_round_ends_the_failures(
    size: int, singles: set[int], pairs: set[frozenset[int]]
) -> None:
    fails = Failing(singles, pairs)
    remaining = list(range(size))
    for _ in range(len(singles) + len(pairs) + 1):
        if fails(remaining) is None:
            break
        found = culprits([], remaining, fails)
        assert found, "a batch that fails through singles or pairs always has a culprit"
        assert all(fails.involved(item) for item, _ in found)
        remaining = [item for item in remaining if item not in {item for item, _ in found}]
    assert fails(remaining) is None
