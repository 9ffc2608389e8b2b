"""The circuit breaker of outside sources, on a clock the test moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aisched.policy.circuit import Breaker, Circuit, after_failure, after_success, allows

T0 = datetime(2026, 11, 23, 12, tzinfo=UTC)
BREAKER = Breaker(threshold=3, open_for=timedelta(seconds=60), max_open_for=timedelta(seconds=200))


def failed(times: int, circuit: Circuit | None = None, now: datetime = T0) -> Circuit:
    circuit = circuit or Circuit()
    for _ in range(times):
        circuit = after_failure(circuit, BREAKER, now)
    return circuit


def test_the_circuit_stays_closed_below_the_threshold() -> None:
    circuit = failed(2)
    assert not circuit.is_open and allows(circuit, T0)


def test_the_threshold_opens_it_for_a_while_then_lets_one_trial_through() -> None:
    circuit = failed(3)
    assert circuit.is_open
    assert not allows(circuit, T0 + timedelta(seconds=59))
    assert allows(circuit, T0 + timedelta(seconds=60))


def test_a_failed_trial_doubles_the_wait_up_to_the_cap() -> None:
    circuit = failed(3)
    waits = []
    for trial in range(4):
        now = circuit.reopens_at()
        assert now is not None
        circuit = after_failure(circuit, BREAKER, now)
        waits.append(circuit.open_for.total_seconds())
        assert not allows(circuit, now), trial
    assert waits == [120.0, 200.0, 200.0, 200.0]


def test_a_success_closes_it_and_forgets_the_failures() -> None:
    circuit = after_success(failed(5))
    assert circuit == Circuit() and allows(circuit, T0)
    assert not failed(2, circuit).is_open
