"""The Lightning and Hugging Face Trainer callbacks, driven by the real libraries on CPU.

A SIGTERM mid-fit saves that step, reports it and exits with CHECKPOINTED_EXIT_CODE; a new
fit resumes from what was reported. Skipped where the libraries are not installed.
"""

from __future__ import annotations

import importlib.util
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from aisched.workload import CHECKPOINTED_EXIT_CODE, ResumePoint, WorkerEnvironment, parse_checkpoint_report

# The operator reads the reports later than they were written, whatever clock wrote them.
READ_AT = datetime(2100, 1, 1, tzinfo=UTC)

SIGTERM_AT = 3  # the batch during which the pod is asked to stop
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning")


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def _environment(tmp_path: Path) -> WorkerEnvironment:
    return WorkerEnvironment(
        checkpoint_interval_seconds=1e9, termination_message_path=str(tmp_path / "termination-log")
    )


def _reported(tmp_path: Path) -> tuple[int, str | None]:
    report = parse_checkpoint_report((tmp_path / "termination-log").read_text(), now=READ_AT)
    assert report is not None
    return report.step, report.path


@pytest.mark.skipif(not _installed("lightning"), reason="lightning is not installed")
def test_lightning_saves_the_step_sigterm_interrupted_and_resumes_from_it(
    tmp_path: Path, sigterm_restored: None
) -> None:
    import lightning
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from aisched.workload.lightning import OperatorCheckpoint, resume_checkpoint

    class Tiny(lightning.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            inputs, targets = batch
            return torch.nn.functional.mse_loss(self.layer(inputs), targets)

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)]

    class Stop(lightning.Callback):  # type: ignore[misc]
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == SIGTERM_AT:
                os.kill(os.getpid(), signal.SIGTERM)

    class FirstStep(lightning.Callback):  # type: ignore[misc]
        seen: list[int] = []

        def on_train_start(self, trainer: Any, module: Any) -> None:
            self.seen.append(trainer.global_step)

    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=generator), torch.randn(64, 1, generator=generator))
    directory = str(tmp_path / "ckpt")

    def trainer(*callbacks: Any, **kwargs: Any) -> Any:
        return lightning.Trainer(
            accelerator="cpu",
            devices=1,
            callbacks=[*callbacks, OperatorCheckpoint(directory, environment=_environment(tmp_path))],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            **kwargs,
        )

    with pytest.raises(SystemExit) as stopped:
        trainer(Stop(), max_epochs=1).fit(Tiny(), DataLoader(data, batch_size=4))
    assert stopped.value.code == CHECKPOINTED_EXIT_CODE
    step, path = _reported(tmp_path)
    assert step == SIGTERM_AT + 1  # the interrupted batch finished, then saved
    assert path is not None and os.path.isfile(path)
    resumed = trainer(FirstStep(), max_steps=step + 2)
    resumed.fit(Tiny(), DataLoader(data, batch_size=4), ckpt_path=resume_checkpoint(resume=ResumePoint(step, path)))
    assert (FirstStep.seen, resumed.global_step) == ([step], step + 2)
    assert resume_checkpoint(directory, resume=None) == path


@pytest.mark.skipif(not _installed("transformers"), reason="transformers is not installed")
def test_hugging_face_trainer_saves_on_sigterm_and_resumes(
    tmp_path: Path, sigterm_restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from aisched.workload.hf import OperatorCallback, resume_checkpoint

    monkeypatch.setenv("WANDB_DISABLED", "true")

    class Tiny(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x: Any, labels: Any) -> dict[str, Any]:
            out = self.layer(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Stop(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == SIGTERM_AT:
                os.kill(os.getpid(), signal.SIGTERM)

    generator = torch.Generator().manual_seed(0)
    data = [
        {"x": torch.randn(4, generator=generator), "labels": torch.randn(1, generator=generator)} for _ in range(64)
    ]
    output_dir = str(tmp_path / "out")

    def trainer(max_steps: int, *callbacks: Any) -> Any:
        args = TrainingArguments(
            output_dir=output_dir,
            per_device_train_batch_size=4,
            max_steps=max_steps,
            save_strategy="no",
            logging_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            remove_unused_columns=False,
        )
        callback = OperatorCallback(environment=_environment(tmp_path))
        return Trainer(model=Tiny(), args=args, train_dataset=data, callbacks=[*callbacks, callback])

    with pytest.raises(SystemExit) as stopped:
        trainer(10, Stop()).train()
    assert stopped.value.code == CHECKPOINTED_EXIT_CODE
    step, path = _reported(tmp_path)
    assert step == SIGTERM_AT + 1
    assert path == os.path.join(output_dir, f"checkpoint-{step}") and os.path.isdir(path)
    assert resume_checkpoint(output_dir, resume=None) == path
    resumed = trainer(step + 2)
    resumed.train(resume_from_checkpoint=resume_checkpoint(output_dir, resume=ResumePoint(step, path)))
    assert resumed.state.global_step == step + 2
