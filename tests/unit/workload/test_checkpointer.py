"""Checkpointer: periodic saves on an injected clock, and SIGTERM handling (real processes: tests/tools)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aisched.workload import (
    CHECKPOINTED_EXIT_CODE,
    Checkpointer,
    ResumePoint,
    WorkerEnvironment,
    parse_checkpoint_report,
)

NOON = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Saves:
    """A save function that records what it saved and takes `cost` seconds of the fake clock."""

    def __init__(self, clock: FakeClock, cost: float = 0.0) -> None:
        self.clock, self.cost, self.steps = clock, cost, list[int]()

    def __call__(self, step: int) -> str:
        self.clock.now += self.cost
        self.steps.append(step)
        return f"/ckpt/step-{step}"


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def make(
    tmp_path: Path, clock: FakeClock, saves: Saves, interval: float = 100.0, resume: ResumePoint | None = None
) -> Checkpointer:
    environment = WorkerEnvironment(
        checkpoint_interval_seconds=interval,
        resume=resume,
        termination_message_path=str(tmp_path / "termination-log"),
    )
    return Checkpointer(saves, environment=environment, clock=clock, wall_clock=lambda: NOON)


def test_saves_once_per_interval_of_training(tmp_path: Path) -> None:
    clock = FakeClock()
    saves = Saves(clock, cost=5.0)
    checkpointer = make(tmp_path, clock, saves)
    for step in range(1, 31):
        clock.now += 10.0  # each step takes 10 s
        checkpointer.maybe_checkpoint(step)
    # The interval counts from the end of the previous save, so each save's own 5 s do not count.
    assert saves.steps == [10, 20, 30]


def test_each_save_is_reported_to_the_termination_message(tmp_path: Path) -> None:
    clock = FakeClock()
    checkpointer = make(tmp_path, clock, Saves(clock, cost=4.0), interval=10.0)
    clock.now = 10.0
    report = checkpointer.maybe_checkpoint(3)
    message = (tmp_path / "termination-log").read_text()
    assert report is not None
    assert parse_checkpoint_report(message, now=NOON) == report
    assert (report.step, report.path, report.duration_seconds, report.time) == (3, "/ckpt/step-3", 4.0, NOON)


def test_interval_comes_from_the_operator_unless_given(tmp_path: Path) -> None:
    clock = FakeClock()
    assert make(tmp_path, clock, Saves(clock), interval=321.0).interval_seconds == 321.0
    explicit = Checkpointer(Saves(clock), interval_seconds=5.0, environment=WorkerEnvironment(), clock=clock)
    assert explicit.interval_seconds == 5.0


def test_a_report_that_cannot_be_written_does_not_stop_training(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    environment = WorkerEnvironment(termination_message_path=str(tmp_path / "missing-dir" / "log"))
    checkpointer = Checkpointer(
        Saves(clock), interval_seconds=1.0, environment=environment, clock=clock, wall_clock=lambda: NOON
    )
    clock.now = 1.0
    assert checkpointer.maybe_checkpoint(1) is not None
    assert "could not write the checkpoint report" in caplog.text


def test_sigterm_mid_step_saves_at_the_next_step_boundary_then_exits(tmp_path: Path, sigterm_restored: None) -> None:
    clock = FakeClock()
    saves = Saves(clock)
    checkpointer = make(tmp_path, clock, saves)
    checkpointer.install_sigterm_handler()
    checkpointer.maybe_checkpoint(1)
    os.kill(os.getpid(), signal.SIGTERM)  # arrives during step 2: nothing is saved from the handler
    assert checkpointer.stop_requested
    assert saves.steps == []
    with pytest.raises(SystemExit) as exited:
        checkpointer.maybe_checkpoint(2)
    assert exited.value.code == CHECKPOINTED_EXIT_CODE
    assert saves.steps == [2]
    report = parse_checkpoint_report((tmp_path / "termination-log").read_text(), now=NOON)
    assert report is not None
    assert report.step == 2


def test_sigterm_with_nothing_new_to_save_exits_at_once(tmp_path: Path, sigterm_restored: None) -> None:
    clock = FakeClock()
    saves = Saves(clock)
    checkpointer = make(tmp_path, clock, saves, resume=ResumePoint(40, "/ckpt/step-40"))
    checkpointer.install_sigterm_handler()
    with pytest.raises(SystemExit) as exited:
        os.kill(os.getpid(), signal.SIGTERM)  # before the first step after the resume
    assert exited.value.code == CHECKPOINTED_EXIT_CODE
    assert saves.steps == []


def test_sigterm_during_a_save_lets_it_finish_and_report(tmp_path: Path, sigterm_restored: None) -> None:
    clock = FakeClock()
    checkpointer: Checkpointer

    def save_interrupted_by_sigterm(step: int) -> str:
        os.kill(os.getpid(), signal.SIGTERM)
        return f"/ckpt/step-{step}"

    environment = WorkerEnvironment(termination_message_path=str(tmp_path / "termination-log"))
    checkpointer = Checkpointer(
        save_interrupted_by_sigterm, interval_seconds=1.0, environment=environment, clock=clock, wall_clock=lambda: NOON
    )
    checkpointer.install_sigterm_handler()
    clock.now = 1.0
    with pytest.raises(SystemExit):
        checkpointer.maybe_checkpoint(9)
    report = parse_checkpoint_report((tmp_path / "termination-log").read_text(), now=NOON)
    assert report is not None
    assert (report.step, report.path, report.time) == (9, "/ckpt/step-9", NOON)
