"""Lightning: checkpoints at the operator's interval and on its stop, through `Trainer.save_checkpoint`.

Needs `lightning` (it imports it); nothing else in aisched.workload does. Use::

    from aisched.workload.lightning import OperatorCheckpoint, resume_checkpoint

    trainer = lightning.Trainer(callbacks=[OperatorCheckpoint()], ...)
    trainer.fit(model, ckpt_path=resume_checkpoint())

Lightning catches SIGTERM itself (`trainer.received_sigterm`); this callback reads that flag
after each batch, the ranks agree on it (and on the interval) in one all-reduce, all of them
save the same step with `trainer.save_checkpoint` (a collective under FSDP and DeepSpeed),
report it, and exit with CHECKPOINTED_EXIT_CODE before Lightning's own SIGTERM handling stops
the fit without a checkpoint. Lightning's checkpoint holds the optimizer, LR schedulers and
the loops' progress, so `ckpt_path` resumes mid-epoch.
"""

from __future__ import annotations

import os
import re
from typing import Any

from lightning.pytorch.callbacks import Callback

from aisched.workload.checkpointer import Checkpointer
from aisched.workload.contract import ResumePoint, WorkerEnvironment
from aisched.workload.distributed import any_rank

_CHECKPOINT_NAME = re.compile(r"^step-(\d+)\.ckpt$")


def lightning_checkpoint_path(directory: str, step: int) -> str:
    return os.path.join(directory, f"step-{step:09d}.ckpt")


def resume_checkpoint(directory: str | None = None, *, resume: ResumePoint | None = None) -> str | None:
    """What to pass as `Trainer.fit(ckpt_path=...)`: the operator's resume point, else the newest here."""
    resume = resume if resume is not None else ResumePoint.from_env()
    if resume is not None and resume.path:
        return resume.path
    chosen = directory or WorkerEnvironment.from_env().checkpoint_dir
    if not chosen or not os.path.isdir(chosen):
        return None
    steps = {int(m.group(1)): name for name in os.listdir(chosen) if (m := _CHECKPOINT_NAME.match(name))}
    return os.path.join(chosen, steps[max(steps)]) if steps else None


class OperatorCheckpoint(Callback):  # type: ignore[misc]  # lightning is not type-checked here
    """Save every AISCHED_CHECKPOINT_INTERVAL_SECONDS and when the operator stops the pod."""

    def __init__(
        self,
        directory: str | None = None,
        *,
        agree_every_steps: int = 1,
        environment: WorkerEnvironment | None = None,
    ) -> None:
        self._environment = environment if environment is not None else WorkerEnvironment.from_env()
        chosen = directory or self._environment.checkpoint_dir
        if not chosen:
            raise ValueError("no checkpoint directory: pass one or set AISCHED_CHECKPOINT_DIR")
        self.directory = chosen
        self._agree_every_steps = agree_every_steps
        self._trainer: Any = None
        self.checkpointer: Checkpointer | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._trainer = trainer
        self.checkpointer = Checkpointer(
            self._save,
            environment=self._environment,
            agree=any_rank if trainer.world_size > 1 else None,
            agree_every_steps=self._agree_every_steps,
        )

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.checkpointer is None:
            return
        if getattr(trainer, "received_sigterm", False):
            self.checkpointer.request_stop()
        self.checkpointer.maybe_checkpoint(trainer.global_step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()

    def _save(self, step: int) -> str:
        path = lightning_checkpoint_path(self.directory, step)
        self._trainer.save_checkpoint(path)
        return path
