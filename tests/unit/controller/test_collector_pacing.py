"""Full collections freeze their survivors, a periodic full scan reclaims what they kept, and pauses are told."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from aisched.controller.collector_pacing import CollectorPacing

PERIOD_S = 60.0


class Cycle:
    """Garbage only the collector can free: an object that refers to itself."""

    def __init__(self) -> None:
        self.me = self


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def paced() -> Iterator[tuple[CollectorPacing, Clock, list[tuple[int, float]]]]:
    pauses: list[tuple[int, float]] = []
    clock = Clock()
    pacing = CollectorPacing(
        lambda generation, seconds: pauses.append((generation, seconds)), full_scan_period_s=PERIOD_S, clock=clock
    )
    gc.collect()
    pacing.install()
    try:
        yield pacing, clock, pauses
    finally:
        pacing.uninstall()


def test_every_collection_reports_its_generation_and_pause(
    paced: tuple[CollectorPacing, Clock, list[tuple[int, float]]],
) -> None:
    _, _, pauses = paced
    gc.collect(0)
    gc.collect(1)
    gc.collect(2)
    assert [generation for generation, _ in pauses][-3:] == [0, 1, 2]
    assert all(seconds >= 0 for _, seconds in pauses)


def test_survivors_of_a_full_collection_are_frozen_until_the_periodic_full_scan(
    paced: tuple[CollectorPacing, Clock, list[tuple[int, float]]],
) -> None:
    _, clock, _ = paced
    young = gc.collect(0)  # a young collection freezes nothing
    assert gc.get_freeze_count() == 0 and young >= 0
    survivor = Cycle()
    gone = weakref.ref(survivor)
    gc.collect()
    assert gc.get_freeze_count() > 0  # the survivor among them
    del survivor
    gc.collect()
    assert gone() is not None  # frozen: a full collection no longer walks it

    clock.now += PERIOD_S
    gc.collect()  # the period is over: this one thaws what was frozen ...
    assert gc.get_freeze_count() == 0
    gc.collect()  # ... so the next walks everything, and the cycle goes
    assert gone() is None
    assert gc.get_freeze_count() > 0  # and freezing goes on from there
