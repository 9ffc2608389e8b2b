"""Distributed training with torch: ranks that stop at the same step, sharded checkpoints, the whole state.

torch is imported on first use, as in `aisched.workload.torch`. Use in a torchrun job::

    from aisched.workload.distributed import TrainingState, distributed_checkpointer
    from aisched.workload.distributed import load_training_state, save_training_state

    state = TrainingState(model, optimizer, scheduler)  # FSDP/DDP models too
    start = (load_training_state(state) or -1) + 1     # every rank: resume point or newest
    checkpointer = distributed_checkpointer(lambda step: save_training_state(state, step))
    checkpointer.install_sigterm_handler()
    for step in range(start, total_steps):
        train_one_step()
        checkpointer.maybe_checkpoint(step)            # every rank, every step

`maybe_checkpoint` is a collective (a two-flag all-reduce): every rank decides the same
save and the same stop, so a collective save (torch.distributed.checkpoint, FSDP) never
waits for a rank that went on training, and no rank saves a step the others did not reach.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from aisched.workload.checkpointer import Checkpointer, SaveFunction
from aisched.workload.contract import ResumePoint, WorkerEnvironment

_SHARDED_NAME = re.compile(r"^step-(\d+)$")
# torch.distributed.checkpoint's coordinator writes this file last, once every rank's shards are.
_DCP_METADATA = ".metadata"


def any_rank(flags: Sequence[bool], group: Any = None) -> list[bool]:
    """Each flag true on any rank, on every rank (an all-reduce MAX). A lone process: FLAGS as given."""
    torch = _torch()
    dist = torch.distributed
    if not _distributed():
        return [bool(flag) for flag in flags]
    tensor = torch.tensor([int(bool(flag)) for flag in flags], dtype=torch.int32, device=_collective_device(group))
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
    return [bool(value) for value in tensor.tolist()]


def distributed_checkpointer(
    save: SaveFunction,
    *,
    group: Any = None,
    agree_every_steps: int = 1,
    environment: WorkerEnvironment | None = None,
) -> Checkpointer:
    """A Checkpointer whose ranks agree every AGREE_EVERY_STEPS steps on when to save and stop.

    One all-reduce of two integers a step costs microseconds next to a training step; raise
    AGREE_EVERY_STEPS for steps so short that it does not, at the price of a stop noticed that
    many steps later. A stop leaves the process groups before it exits (`leave_process_groups`).
    """
    return Checkpointer(
        save,
        environment=environment,
        agree=lambda flags: any_rank(flags, group),
        agree_every_steps=agree_every_steps,
        before_exit=leave_process_groups,
    )


def leave_process_groups() -> None:
    """Destroy every process group of this rank, if any.

    A rank that exits with its groups alive may die in the interpreter's teardown: gloo's
    worker threads still hold work whose tensors need the interpreter, and the process ends
    on SIGABRT ("terminate called without an active exception") instead of its exit code.
    """
    dist = _torch().distributed
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# -- torch.distributed.checkpoint ----------------------------------------------------------------


def sharded_checkpoint_path(directory: str, step: int) -> str:
    return os.path.join(directory, f"step-{step:09d}")


def latest_sharded_checkpoint(directory: str) -> str | None:
    """The complete sharded checkpoint of the highest step in DIRECTORY; None when there is none.

    One whose save was cut short has no metadata file and is passed over.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    steps = {
        int(match.group(1)): name
        for name in names
        if (match := _SHARDED_NAME.match(name)) and os.path.isfile(os.path.join(directory, name, _DCP_METADATA))
    }
    return os.path.join(directory, steps[max(steps)]) if steps else None


def save_sharded(state: dict[str, Any], step: int, directory: str | None = None, *, process_group: Any = None) -> str:
    """Every rank writes its shards of STATE for STEP (torch.distributed.checkpoint.save); returns the path."""
    path = sharded_checkpoint_path(_directory(directory), step)
    with _alone_is_fine():
        _dcp().save(state, checkpoint_id=path, process_group=process_group, no_dist=not _distributed())
    return path


class ShardedSave:
    """An async sharded save under way: `done()`, and `result()` once written, the checkpoint's path."""

    def __init__(self, future: Any, path: str) -> None:
        self._future, self.path = future, path

    def done(self) -> bool:
        return bool(self._future.done())

    def result(self, timeout: float | None = None) -> str:
        self._future.result(timeout)
        return self.path


def save_sharded_async(
    state: dict[str, Any], step: int, directory: str | None = None, *, process_group: Any = None
) -> ShardedSave:
    """torch.distributed.checkpoint.async_save: returns once STATE is copied, writes in the background.

    Training goes on meanwhile; a Checkpointer reports it when written. The background
    writer runs collectives of its own: pass a gloo PROCESS_GROUP (`dist.new_group(backend=
    "gloo")`) so they never interleave with the training's on the default group.
    """
    path = sharded_checkpoint_path(_directory(directory), step)
    response = _dcp().async_save(state, checkpoint_id=path, process_group=process_group)
    # Newer torch may answer with staging and upload futures; the checkpoint exists after the upload.
    return ShardedSave(getattr(response, "upload_completion", response), path)


def load_sharded(
    state: dict[str, Any],
    directory: str | None = None,
    *,
    resume: ResumePoint | None = None,
    process_group: Any = None,
) -> int | None:
    """Load the operator's resume point, else the newest complete checkpoint, into STATE in place.

    Every rank calls it. Returns the step restored, or None on a fresh start.
    """
    resume = resume if resume is not None else ResumePoint.from_env()
    path = resume.path if resume is not None and resume.path else latest_sharded_checkpoint(_directory(directory))
    if path is None:
        return None
    with _alone_is_fine():
        _dcp().load(state, checkpoint_id=path, process_group=process_group, no_dist=not _distributed())
    match = _SHARDED_NAME.match(os.path.basename(os.path.normpath(path)))
    if match:
        return int(match.group(1))
    return resume.step if resume is not None else None


# -- the whole training state ----------------------------------------------------------------------


class TrainingState:
    """Model, optimizer, LR scheduler and progress, as one torch.distributed.checkpoint Stateful.

    The model's and optimizer's state go through torch's `get_state_dict`/`set_state_dict`,
    which shard FSDP state and strip DDP's wrapper, so a checkpoint loads into a gang of
    another size. `progress` is where the data loader stands: the `step` saved, and the
    `epoch` and `batch` (batches of it already trained) the training loop keeps up to date;
    on resume, call `sampler.set_epoch(epoch)` and skip `batch` batches.
    """

    def __init__(self, model: Any, optimizer: Any = None, scheduler: Any = None) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.progress: dict[str, int] = {"step": -1, "epoch": 0, "batch": 0}

    def state_dict(self) -> dict[str, Any]:
        helpers = importlib.import_module("torch.distributed.checkpoint.state_dict")
        state: dict[str, Any] = {"progress": dict(self.progress)}
        if self.optimizer is None:
            state["model"] = helpers.get_model_state_dict(self.model)
        else:
            state["model"], state["optimizer"] = helpers.get_state_dict(self.model, self.optimizer)
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        helpers = importlib.import_module("torch.distributed.checkpoint.state_dict")
        if self.optimizer is None:
            helpers.set_model_state_dict(self.model, state["model"])
        else:
            helpers.set_state_dict(
                self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
            )
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.progress.update({key: int(value) for key, value in state["progress"].items()})


def save_training_state(
    state: TrainingState,
    step: int,
    directory: str | None = None,
    *,
    asynchronous: bool = False,
    process_group: Any = None,
) -> str | ShardedSave:
    """Save STATE as of STEP on every rank: shards, progress, and this rank's random number generators.

    Each rank's generators go to a file of their own beside the shards, written before them,
    so a checkpoint whose metadata exists has them all. Returns the path, or the save under way.
    """
    state.progress["step"] = step
    path = sharded_checkpoint_path(_directory(directory), step)
    os.makedirs(path, exist_ok=True)
    torch = _torch()
    rng_file = _rng_path(path, _rank())
    torch.save(rng_state(), rng_file + ".partial")
    os.replace(rng_file + ".partial", rng_file)
    save: Callable[..., str | ShardedSave] = save_sharded_async if asynchronous else save_sharded
    return save({"state": state}, step, directory, process_group=process_group)


def load_training_state(
    state: TrainingState,
    directory: str | None = None,
    *,
    resume: ResumePoint | None = None,
    process_group: Any = None,
) -> int | None:
    """Restore STATE (and this rank's generators, when saved by a rank of that number); the step, or None."""
    resume = resume if resume is not None else ResumePoint.from_env()
    step = load_sharded({"state": state}, directory, resume=resume, process_group=process_group)
    if step is None:
        return None
    path = resume.path if resume is not None and resume.path else sharded_checkpoint_path(_directory(directory), step)
    rng_file = _rng_path(path, _rank())
    if os.path.isfile(rng_file):
        set_rng_state(_torch().load(rng_file, weights_only=True))
    return state.progress["step"]


def rng_state() -> dict[str, Any]:
    """The random number generators' states of python, numpy (when installed), torch and its GPUs.

    Only tensors, numbers and tuples: torch.load(weights_only=True) reads them back.
    """
    torch = _torch()
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = _numpy()
    if numpy is not None:
        kind, keys, position, has_gauss, gauss = numpy.random.get_state()
        state["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), int(position), int(has_gauss), float(gauss))
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch = _torch()
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    numpy = _numpy()
    if numpy is not None and "numpy" in state:
        kind, keys, position, has_gauss, gauss = state["numpy"]
        numpy.random.set_state((kind, keys.numpy().astype("uint32"), position, has_gauss, gauss))


def _rng_path(checkpoint: str, rank: int) -> str:
    return os.path.join(checkpoint, f"rng-rank{rank:05d}.pt")


@contextlib.contextmanager
def _alone_is_fine() -> Iterator[None]:
    """A lone process (a one-GPU job, a notebook) saves and loads as one rank, as intended: no warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def _distributed() -> bool:
    dist = _torch().distributed
    return bool(dist.is_available() and dist.is_initialized())


def _rank() -> int:
    return int(_torch().distributed.get_rank()) if _distributed() else 0


def _collective_device(group: Any) -> Any:
    torch = _torch()
    backend = str(torch.distributed.get_backend(group)).lower()
    if "gloo" in backend or not torch.accelerator.is_available():
        return torch.device("cpu")
    accelerator = torch.accelerator.current_accelerator()
    return torch.device(accelerator.type, torch.accelerator.current_device_index())


def _directory(directory: str | None) -> str:
    chosen = directory or WorkerEnvironment.from_env().checkpoint_dir
    if not chosen:
        raise ValueError("no checkpoint directory: pass one or set AISCHED_CHECKPOINT_DIR")
    return chosen


def _torch() -> Any:
    return importlib.import_module("torch")


def _dcp() -> Any:
    return importlib.import_module("torch.distributed.checkpoint")


def _numpy() -> Any:
    try:
        return importlib.import_module("numpy")
    except ImportError:
        return None
