"""Periodic checkpoints at the operator's interval, and a last one when the pod is asked to stop."""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType
from typing import NoReturn

from aisched.workload.contract import (
    CHECKPOINTED_EXIT_CODE,
    CheckpointReport,
    ResumePoint,
    WorkerEnvironment,
)

log = logging.getLogger("aisched.workload")

SaveFunction = Callable[[int], str | None]
"""Saves the training state of a step; returns where it went (or None)."""


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
    """

    def __init__(
        self,
        save: SaveFunction,
        *,
        interval_seconds: float | None = None,
        environment: WorkerEnvironment | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._save = save
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
        if self._stop_requested or self._clock() - self._last_checkpoint_at >= self.interval_seconds:
            return self.checkpoint(step)
        return None

    def checkpoint(self, step: int) -> CheckpointReport:
        """Save `step` now and report it; exits afterwards if a stop was requested meanwhile."""
        self._last_step = step
        report = self.last_report
        if report is None or step != self._saved_step:
            report = self._save_and_report(step)
        if self._stop_requested:
            self._exit()
        return report

    def install_sigterm_handler(self) -> None:
        """Turn SIGTERM into "checkpoint at the next step boundary, then exit". Main thread only."""
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _save_and_report(self, step: int) -> CheckpointReport:
        # A SIGTERM while this runs only marks the stop, so the save is always reported.
        self._saving = True
        try:
            started = self._clock()
            path = self._save(step)
            finished = self._clock()
            self.last_report = report_checkpoint(
                step,
                path,
                duration_seconds=finished - started,
                time=self._wall_clock(),
                termination_message_path=self._environment.termination_message_path,
            )
            self._saved_step = step
            self._last_checkpoint_at = finished
        finally:
            self._saving = False
        return self.last_report

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._stop_requested = True
        if not self._saving and self._last_step == self._saved_step:
            self._exit()

    def _exit(self) -> NoReturn:
        log.info("stopping after checkpoint of step %s as asked", self._saved_step)
        sys.exit(CHECKPOINTED_EXIT_CODE)
