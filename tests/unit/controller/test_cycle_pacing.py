"""A cycle waits as long as the last one took to decide, counted from its end, and never more than a second."""

from __future__ import annotations

from aisched.controller.cycle_pacing import MAX_WAIT_SECONDS, CyclePacing


def test_the_first_cycle_and_one_after_a_quiet_spell_wait_nothing() -> None:
    pacing = CyclePacing()
    assert pacing.wait(100.0) == 0.0
    pacing.ran(0.05, ended=100.0)
    assert pacing.wait(100.2) == 0.0


def test_a_cycle_right_after_another_waits_out_its_deciding_time_up_to_the_bound() -> None:
    pacing = CyclePacing()
    pacing.ran(0.04, ended=10.0)
    assert abs(pacing.wait(10.01) - 0.03) < 1e-9
    pacing.ran(30.0, ended=50.0)  # a cycle of a huge backlog
    assert pacing.wait(50.0) == MAX_WAIT_SECONDS
