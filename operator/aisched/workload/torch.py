"""Optional PyTorch helpers: save and restore model and optimizer state by step.

torch is imported on first use, never when aisched.workload is imported, so the
SDK stays usable in images without it. In data-parallel training, call
`save_state` on one rank (RANK 0) and `load_latest` on every rank.
"""

from __future__ import annotations

import importlib
import os
import re
from typing import Any

from aisched.workload.contract import ResumePoint, WorkerEnvironment

_CHECKPOINT_NAME = re.compile(r"^step-(\d+)\.pt$")


def checkpoint_path(directory: str, step: int) -> str:
    return os.path.join(directory, f"step-{step:09d}.pt")


def latest_checkpoint(directory: str) -> str | None:
    """The checkpoint of the highest step in `directory`; None when there is none."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    steps = {int(match.group(1)): name for name in names if (match := _CHECKPOINT_NAME.match(name))}
    return os.path.join(directory, steps[max(steps)]) if steps else None


def save_state(model: Any, optimizer: Any, step: int, directory: str | None = None) -> str:
    """Save model and optimizer state as `<directory>/step-NNNNNNNNN.pt`; returns the path.

    The directory defaults to AISCHED_CHECKPOINT_DIR. The file is written under a
    temporary name and renamed, so a save cut short by SIGKILL never leaves a
    torn checkpoint that `latest_checkpoint` would pick.
    """
    target_dir = _directory(directory)
    torch = _torch()
    os.makedirs(target_dir, exist_ok=True)
    path = checkpoint_path(target_dir, step)
    partial = path + ".partial"
    state = {"step": step, "model": model.state_dict()}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    torch.save(state, partial)
    os.replace(partial, path)
    return path


def load_latest(
    model: Any,
    optimizer: Any,
    directory: str | None = None,
    *,
    resume: ResumePoint | None = None,
    map_location: str = "cpu",
) -> int | None:
    """Restore the operator's resume point, else the newest checkpoint in the directory.

    Returns the restored step, or None when there is nothing to restore (a fresh start).
    """
    resume = resume if resume is not None else ResumePoint.from_env()
    path = resume.path if resume is not None and resume.path else latest_checkpoint(_directory(directory))
    if path is None:
        return None
    # weights_only refuses to unpickle arbitrary objects from a shared volume.
    state = _torch().load(path, map_location=map_location, weights_only=True)
    model.load_state_dict(state["model"])
    if optimizer is not None and "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def _directory(directory: str | None) -> str:
    chosen = directory or WorkerEnvironment.from_env().checkpoint_dir
    if not chosen:
        raise ValueError("no checkpoint directory: pass one or set AISCHED_CHECKPOINT_DIR")
    return chosen


def _torch() -> Any:
    return importlib.import_module("torch")
