"""Periodic checkpoints at the operator's interval, and a last one when the pod is asked to stop."""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import FrameType
from typing import NoReturn, Protocol, runtime_checkable

from aisched.workload.contract import (
    CHECKPOINTED_EXIT_CODE,
    CheckpointReport,
    ResumePoint,
    WorkerEnvironment,
)

log = logging.getLogger("aisched.workload")


@runtime_checkable
class PendingSave(Protocol):
    """A save still being written in the background (concurrent.futures.Future is one)."""

    def done(self) -> bool: ...
    def result(self, timeout: float | None = None) -> str | None: ...


SaveFunction = Callable[[int], "str | PendingSave | None"]
"""Saves the training state of a step; returns where it went (or None), or a save still under way."""

Agreement = Callable[[Sequence[bool]], Sequence[bool]]
"""Each flag true on any rank, on every rank: a collective every rank calls at the same step."""


def report_checkpoint(
    step: int,
    path: str | None,
    *,
    duration_seconds: float,
    time: datetime | None = None,
    termination_message_path: str | None = None,
) -> CheckpointReport:
    """Tell the operator about a checkpoint by writing it to the container's termination message.

    The file is overwritten each time, so it always holds the newest checkpoint
    whenever the container ends, even when SIGKILL cuts the last save short.
    Failing to write (no such file outside Kubernetes) is logged, never raised:
    training must not stop because its report has nowhere to go.
    """
    report = CheckpointReport(step=step, path=path, time=time or datetime.now(UTC), duration_seconds=duration_seconds)
    destination = termination_message_path or WorkerEnvironment.from_env().termination_message_path
    try:
        with open(destination, "w", encoding="utf-8") as message:
            message.write(report.to_json())
    except OSError as error:
        log.warning("could not write the checkpoint report to %s: %s", destination, error)
    return report


class Checkpointer:
    """Saves through the caller's function every `interval_seconds` of training and on SIGTERM.

    The training loop calls `maybe_checkpoint(step)` after every completed step.
    A SIGTERM (the operator's request to stop, sent within the spot notice)
    does not save from inside the signal handler: that could catch the model
    half-way through an optimizer update. It marks the stop, and the next step
    boundary saves that step, reports it and exits with CHECKPOINTED_EXIT_CODE.
    If nothing new has been trained since the last save, the handler exits at
    once. A step must therefore be shorter than the notice minus one save;
    when it is not, the kubelet's SIGKILL ends the pod and the operator resumes
    from the last periodic checkpoint, whose report is already in place.

    In distributed training pass `agree` (`aisched.workload.distributed.any_rank`):
    every `agree_every_steps` steps the ranks then decide together whether to save
    (the interval is up on one of them) and whether to stop (one was asked to), so
    all of them save the same step and stop after it, and a collective save never
    waits for a rank that went on training. A SIGTERM then never exits at once.

    A save function may return a `PendingSave` (an async save): it is reported once
    written, at a later step boundary, and a stop waits for it before its own save.
    `before_exit` runs just before a stop exits (a distributed run leaves its process
    groups there: see `aisched.workload.distributed.distributed_checkpointer`).
    """

    def __init__(
        self,
        save: SaveFunction,
        *,
        interval_seconds: float | None = None,
        environment: WorkerEnvironment | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] | None = None,
        agree: Agreement | None = None,
        agree_every_steps: int = 1,
        before_exit: Callable[[], None] | None = None,
    ) -> None:
        if agree_every_steps < 1:
            raise ValueError(f"agree_every_steps must be at least 1, got {agree_every_steps}")
        self._save = save
        self._agree = agree
        self._agree_every_steps = agree_every_steps
        self._before_exit = before_exit
        self._pending: tuple[int, float, PendingSave] | None = None
        self._environment = environment if environment is not None else WorkerEnvironment.from_env()
        self.interval_seconds = (
            self._environment.checkpoint_interval_seconds if interval_seconds is None else interval_seconds
        )
        if self.interval_seconds <= 0:
            raise ValueError(f"interval_seconds must be positive, got {self.interval_seconds}")
        self._clock = clock
        self._wall_clock = wall_clock or (lambda: datetime.now(UTC))
        self._last_checkpoint_at = clock()
        resume = self._environment.resume
        self._saved_step: int | None = resume.step if resume is not None else None
        self._last_step: int | None = self._saved_step
        self._saving = False
        self._stop_requested = False
        self.last_report: CheckpointReport | None = None

    @property
    def resume(self) -> ResumePoint | None:
        """Where this worker starts from: the operator's resume point, or None on a fresh start."""
        return self._environment.resume

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def maybe_checkpoint(self, step: int) -> CheckpointReport | None:
        """Call after each completed step: saves when the interval is up, or when a stop was requested."""
        self._last_step = step
        self._report_finished_save()
        due = self._clock() - self._last_checkpoint_at >= self.interval_seconds
        stop = self._stop_requested
        if self._agree is not None:
            if step % self._agree_every_steps:
                return None
            due, stop = (bool(flag) for flag in self._agree((due, stop)))
            self._stop_requested = self._stop_requested or stop
        if stop or due:
            return self.checkpoint(step)
        return None

    def checkpoint(self, step: int) -> CheckpointReport | None:
        """Save `step` now and report it; exits afterwards if a stop was requested meanwhile.

        Returns None while an async save of it is still being written.
        """
        self._last_step = step
        if self._stop_requested:
            self._wait_for_pending_save()
        report = self.last_report
        already = self._pending is not None and self._pending[0] == step
        if not already and (report is None or step != self._saved_step):
            report = self._save_and_report(step)
        if self._stop_requested:
            self._wait_for_pending_save()  # a stop never leaves with its own save unwritten
            self._exit()
        return report

    def close(self) -> None:
        """Wait for a save still being written, and report it: call once training is over."""
        self._wait_for_pending_save()

    def request_stop(self) -> None:
        """Stop at the next step boundary, as a SIGTERM would: for frameworks that catch SIGTERM themselves."""
        self._stop_requested = True

    def install_sigterm_handler(self) -> None:
        """Turn SIGTERM into "checkpoint at the next step boundary, then exit". Main thread only."""
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _save_and_report(self, step: int) -> CheckpointReport | None:
        # One background save at a time: the next waits for (and reports) the one before.
        self._wait_for_pending_save()
        # A SIGTERM while this runs only marks the stop, so the save is always reported.
        self._saving = True
        try:
            started = self._clock()
            saved = self._save(step)
            self._last_checkpoint_at = self._clock()
            if isinstance(saved, PendingSave):
                self._pending = (step, started, saved)
                return None
            return self._report(step, saved, started)
        finally:
            self._saving = False

    def _report(self, step: int, path: str | None, started: float) -> CheckpointReport:
        self.last_report = report_checkpoint(
            step,
            path,
            duration_seconds=self._clock() - started,
            time=self._wall_clock(),
            termination_message_path=self._environment.termination_message_path,
        )
        self._saved_step = step
        return self.last_report

    def _report_finished_save(self) -> None:
        if self._pending is not None and self._pending[2].done():
            self._wait_for_pending_save()

    def _wait_for_pending_save(self) -> None:
        """Report the async save under way once written; one that failed is logged, never reported."""
        if self._pending is None:
            return
        step, started, pending = self._pending
        self._saving = True
        try:
            path = pending.result()
        except Exception:
            log.exception("the background save of step %s failed; it is not reported", step)
        else:
            self._report(step, path, started)
        finally:
            self._pending = None
            self._saving = False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._stop_requested = True
        # Alone, a worker with nothing new to save may go at once; in a gang it must first tell
        # the others at the next step boundary, or they would wait for it in a collective.
        if self._agree is None and not self._saving and self._pending is None and self._last_step == self._saved_step:
            self._exit()

    def _exit(self) -> NoReturn:
        log.info("stopping after checkpoint of step %s as asked", self._saved_step)
        if self._before_exit is not None:
            try:
                self._before_exit()
            except Exception:  # the checkpoint is written and reported: the exit code must still say so
                log.exception("cleaning up before the exit failed")
        sys.exit(CHECKPOINTED_EXIT_CODE)
