"""Hugging Face Trainer: saves at the operator's interval and on its stop, reported to the operator.

Needs `transformers` (it imports it). Use with `output_dir` set to the checkpoint directory::

    from aisched.workload.hf import OperatorCallback, resume_checkpoint

    args = TrainingArguments(output_dir=os.environ["AISCHED_CHECKPOINT_DIR"], ...)
    trainer = Trainer(model=model, args=args, callbacks=[OperatorCallback()], ...)
    trainer.train(resume_from_checkpoint=resume_checkpoint(args.output_dir))

The Trainer saves (`checkpoint-<global step>`: model, optimizer, scheduler, RNG states and
the data position) after the step in which a callback sets `control.should_save`; this one
sets it when the interval is up or a SIGTERM came, on every rank at the same step (one
all-reduce a step), then reports each save the Trainer makes, and after a save asked by a
stop exits with CHECKPOINTED_EXIT_CODE instead of letting `train()` return as if finished.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from aisched.workload.checkpointer import report_checkpoint
from aisched.workload.contract import CHECKPOINTED_EXIT_CODE, ResumePoint, WorkerEnvironment
from aisched.workload.distributed import any_rank

log = logging.getLogger("aisched.workload")


def resume_checkpoint(output_dir: str, *, resume: ResumePoint | None = None) -> str | None:
    """What to pass as `Trainer.train(resume_from_checkpoint=...)`: the operator's point, else the newest."""
    resume = resume if resume is not None else ResumePoint.from_env()
    if resume is not None and resume.path:
        return resume.path
    if not os.path.isdir(output_dir):
        return None
    last: str | None = get_last_checkpoint(output_dir)
    return last


class OperatorCallback(TrainerCallback):  # type: ignore[misc]  # transformers is not type-checked here
    """Ask the Trainer to save every AISCHED_CHECKPOINT_INTERVAL_SECONDS and on SIGTERM; report its saves."""

    def __init__(
        self,
        *,
        interval_seconds: float | None = None,
        environment: WorkerEnvironment | None = None,
        clock: Callable[[], float] = time.monotonic,
        install_sigterm_handler: bool = True,
    ) -> None:
        self._environment = environment if environment is not None else WorkerEnvironment.from_env()
        self.interval_seconds = (
            self._environment.checkpoint_interval_seconds if interval_seconds is None else interval_seconds
        )
        self._clock = clock
        self._install = install_sigterm_handler
        self._last_save_at = clock()
        self._asked_at: float | None = None
        self.stop_requested = False
        self._stopping = False

    def request_stop(self) -> None:
        """Save after the current step and exit, as a SIGTERM does."""
        self.stop_requested = True

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._last_save_at = self._clock()
        if self._install:
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        due = self._clock() - self._last_save_at >= self.interval_seconds
        due, stop = any_rank((due, self.stop_requested))
        if due or stop:
            control.should_save = True
            self._asked_at = self._clock()
        if stop:
            self._stopping = True
            control.should_training_stop = True

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = self._clock()
        started = self._asked_at if self._asked_at is not None else now
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        report_checkpoint(
            state.global_step,
            path,
            duration_seconds=now - started,
            termination_message_path=self._environment.termination_message_path,
        )
        self._last_save_at, self._asked_at = now, None
        if self._stopping:
            log.info("stopping after checkpoint of step %s as asked", state.global_step)
            sys.exit(CHECKPOINTED_EXIT_CODE)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.stop_requested = True
