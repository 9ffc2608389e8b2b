"""Checkpointer in a gang: ranks decide together when to save and stop; async saves are reported once written."""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path

import pytest

from aisched.workload import CHECKPOINTED_EXIT_CODE, Checkpointer, WorkerEnvironment, parse_checkpoint_report

# The operator reads the reports later than they were written, whatever clock wrote them.
WRITTEN_AT = datetime(2099, 12, 31, 23, tzinfo=UTC)
READ_AT = datetime(2100, 1, 1, tzinfo=UTC)


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def _checkpointer(tmp_path: Path, save: object, agree: object, **kwargs: object) -> Checkpointer:
    environment = WorkerEnvironment(
        checkpoint_interval_seconds=100.0, termination_message_path=str(tmp_path / "termination-log")
    )
    kwargs.setdefault("wall_clock", lambda: WRITTEN_AT)
    return Checkpointer(save, environment=environment, clock=lambda: 0.0, agree=agree, **kwargs)  # type: ignore[arg-type]


def test_a_stop_asked_of_another_rank_saves_this_step_and_exits(tmp_path: Path) -> None:
    saved: list[int] = []
    others_stop = [(False, False), (False, True)]  # the other rank: nothing, then "stop" at step 1
    rounds = iter(others_stop)

    def agree(flags: Sequence[bool]) -> list[bool]:
        other = next(rounds)
        return [a or b for a, b in zip(flags, other, strict=True)]

    def save(step: int) -> str:
        saved.append(step)
        return f"/ckpt/{step}"

    checkpointer = _checkpointer(tmp_path, save, agree)
    assert checkpointer.maybe_checkpoint(0) is None
    with pytest.raises(SystemExit) as stopped:
        checkpointer.maybe_checkpoint(1)
    assert stopped.value.code == CHECKPOINTED_EXIT_CODE
    assert saved == [1]
    report = parse_checkpoint_report((tmp_path / "termination-log").read_text(), now=READ_AT)
    assert report is not None and report.step == 1


def test_an_interval_up_on_one_rank_saves_on_all(tmp_path: Path) -> None:
    saved: list[int] = []
    checkpointer = _checkpointer(tmp_path, saved.append, lambda flags: [True, False])
    checkpointer.maybe_checkpoint(7)
    assert saved == [7]


def test_ranks_agree_only_every_n_steps(tmp_path: Path) -> None:
    calls: list[int] = []

    def agree(flags: Sequence[bool]) -> list[bool]:
        calls.append(1)
        return list(flags)

    checkpointer = _checkpointer(tmp_path, lambda step: None, agree, agree_every_steps=4)
    for step in range(10):
        checkpointer.maybe_checkpoint(step)
    assert len(calls) == 3  # steps 0, 4, 8: every rank counts the same steps, so they call it together


def test_in_a_gang_sigterm_never_exits_from_the_handler(tmp_path: Path, sigterm_restored: None) -> None:
    checkpointer = _checkpointer(tmp_path, lambda step: None, list)
    checkpointer.install_sigterm_handler()
    signal.raise_signal(signal.SIGTERM)  # nothing new to save, but the others must hear of it first
    assert checkpointer.stop_requested


def test_an_async_save_is_reported_once_written_and_a_stop_waits_for_it(tmp_path: Path) -> None:
    futures: dict[int, Future[str]] = {}

    def save(step: int) -> Future[str]:
        futures[step] = Future()
        return futures[step]

    checkpointer = _checkpointer(tmp_path, save, None)
    assert checkpointer.checkpoint(5) is None
    assert not (tmp_path / "termination-log").exists()  # not written yet: nothing to resume from
    futures[5].set_result("/ckpt/step-5")
    checkpointer.maybe_checkpoint(6)
    report = parse_checkpoint_report((tmp_path / "termination-log").read_text(), now=READ_AT)
    assert report is not None and (report.step, report.path) == (5, "/ckpt/step-5")


class SlowSave:
    """An async save that is never done by itself: only waiting for it (result) finishes it."""

    def __init__(self, step: int, waited: list[int]) -> None:
        self.step, self.waited = step, waited

    def done(self) -> bool:
        return False

    def result(self, timeout: float | None = None) -> str:
        self.waited.append(self.step)
        return f"/ckpt/step-{self.step}"


def test_a_stop_waits_for_the_save_under_way_then_saves_its_own_step(tmp_path: Path, sigterm_restored: None) -> None:
    waited: list[int] = []
    checkpointer = _checkpointer(tmp_path, lambda step: SlowSave(step, waited), list)
    checkpointer.install_sigterm_handler()
    checkpointer.checkpoint(5)
    signal.raise_signal(signal.SIGTERM)
    with pytest.raises(SystemExit):
        checkpointer.maybe_checkpoint(6)
    assert waited == [5, 6]  # the earlier save written and reported first; the stop's own before exiting
    report = parse_checkpoint_report((tmp_path / "termination-log").read_text(), now=READ_AT)
    assert report is not None and report.step == 6


def test_a_failed_async_save_is_never_reported(tmp_path: Path) -> None:
    failed: Future[str] = Future()
    failed.set_exception(OSError("disk full"))
    checkpointer = _checkpointer(tmp_path, lambda step: failed, None)
    checkpointer.checkpoint(5)
    checkpointer.close()
    assert not (tmp_path / "termination-log").exists()
    assert checkpointer.last_report is None


def test_a_second_async_save_waits_for_the_first_so_both_are_reported(tmp_path: Path) -> None:
    waited: list[int] = []
    checkpointer = _checkpointer(tmp_path, lambda step: SlowSave(step, waited), None)
    checkpointer.checkpoint(5)
    checkpointer.checkpoint(9)
    assert waited == [5]
    assert checkpointer.last_report is not None and checkpointer.last_report.step == 5
    checkpointer.close()
    assert waited == [5, 9]


@pytest.mark.parametrize("cleanup_fails", [False, True], ids=["cleanup", "failing_cleanup"])
def test_a_stop_cleans_up_after_its_report_and_still_exits_checkpointed(tmp_path: Path, cleanup_fails: bool) -> None:
    reported_before_cleanup: list[bool] = []

    def before_exit() -> None:
        reported_before_cleanup.append((tmp_path / "termination-log").exists())
        if cleanup_fails:
            raise RuntimeError("the process group is gone already")

    checkpointer = _checkpointer(
        tmp_path, lambda step: f"/ckpt/{step}", lambda flags: [False, True], before_exit=before_exit
    )
    with pytest.raises(SystemExit) as stopped:
        checkpointer.maybe_checkpoint(4)
    assert stopped.value.code == CHECKPOINTED_EXIT_CODE
    assert reported_before_cleanup == [True]
