"""The distributed SDK with real torch: two gloo ranks on CPU stop together and save a loadable checkpoint.

Processes, so not the unit tier; skipped where torch is not installed (the `torch` extra).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import random
import signal
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from aisched.workload import CHECKPOINTED_EXIT_CODE, ResumePoint, WorkerEnvironment, parse_checkpoint_report

# The operator reads the reports later than they were written, whatever clock wrote them.
READ_AT = datetime(2100, 1, 1, tzinfo=UTC)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

WORLD = 2
STOP_RANK, STOP_STEP = 1, 3  # only this rank is asked to stop, at this step
JOIN_TIMEOUT_S = 180  # two CPU ranks train a few steps of a tiny model; far more than needed


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def _worker(rank: int, port: int, root: str, asynchronous: bool) -> None:
    """One rank: DDP on gloo, checkpoints through the SDK, SIGTERM on STOP_RANK before STOP_STEP's boundary."""
    import torch
    import torch.distributed as dist

    from aisched.workload.distributed import TrainingState, distributed_checkpointer, save_training_state

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    saver_group = dist.new_group(backend="gloo") if asynchronous else None
    model = torch.nn.parallel.DistributedDataParallel(_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    state = TrainingState(model, optimizer, scheduler)
    directory = os.path.join(root, "ckpt")

    def save(step: int) -> Any:
        torch.save(model.module.state_dict(), os.path.join(root, f"weights-rank{rank}-step{step}.pt"))
        return save_training_state(state, step, directory, asynchronous=asynchronous, process_group=saver_group)

    environment = WorkerEnvironment(
        checkpoint_interval_seconds=1e9, termination_message_path=os.path.join(root, f"report-{rank}")
    )
    checkpointer = distributed_checkpointer(save, environment=environment)  # leaves its groups before exiting
    checkpointer.install_sigterm_handler()
    generator = torch.Generator().manual_seed(rank)
    for step in range(100):
        inputs = torch.randn(16, 4, generator=generator)
        loss = model(inputs).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        state.progress.update(epoch=0, batch=step + 1)
        if step == 1 and asynchronous:
            checkpointer.checkpoint(step)  # one async save under way when the stop comes
        if rank == STOP_RANK and step == STOP_STEP:
            os.kill(os.getpid(), signal.SIGTERM)
        checkpointer.maybe_checkpoint(step)  # exits with CHECKPOINTED_EXIT_CODE once both agree
    raise SystemExit(1)  # never reached: the stop was not agreed


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_gang(root: Path, asynchronous: bool) -> list[int | None]:
    context = multiprocessing.get_context("spawn")
    port = _free_port()
    workers = [context.Process(target=_worker, args=(r, port, str(root), asynchronous)) for r in range(WORLD)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(JOIN_TIMEOUT_S)
        if worker.is_alive():
            worker.kill()
    return [worker.exitcode for worker in workers]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["save", "async_save"])
def test_ranks_stop_at_the_same_step_and_the_checkpoint_loads_into_a_fresh_model(
    tmp_path: Path, asynchronous: bool
) -> None:
    import torch

    from aisched.workload.distributed import TrainingState, latest_sharded_checkpoint, load_training_state

    assert _run_gang(tmp_path, asynchronous) == [CHECKPOINTED_EXIT_CODE] * WORLD
    reports = [parse_checkpoint_report((tmp_path / f"report-{rank}").read_text(), now=READ_AT) for rank in range(WORLD)]
    assert [r.step if r else None for r in reports] == [STOP_STEP] * WORLD  # the rank not signalled too
    checkpoint = str(tmp_path / "ckpt" / f"step-{STOP_STEP:09d}")
    assert {r.path for r in reports if r} == {checkpoint}
    assert latest_sharded_checkpoint(str(tmp_path / "ckpt")) == checkpoint
    assert sorted(p.name for p in Path(checkpoint).glob("rng-*")) == ["rng-rank00000.pt", "rng-rank00001.pt"]

    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    state = TrainingState(fresh, optimizer, scheduler)
    assert load_training_state(state, str(tmp_path / "ckpt"), resume=ResumePoint(STOP_STEP, checkpoint)) == STOP_STEP
    saved = torch.load(tmp_path / f"weights-rank0-step{STOP_STEP}.pt", weights_only=True)
    assert saved.keys() == fresh.state_dict().keys()
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    assert state.progress == {"step": STOP_STEP, "epoch": 0, "batch": STOP_STEP + 1}
    assert scheduler.last_epoch == STOP_STEP + 1
    assert all(group["momentum_buffer"] is not None for group in optimizer.state.values())


def test_random_number_generators_come_back_as_saved(tmp_path: Path) -> None:
    import numpy
    import torch

    from aisched.workload.distributed import rng_state, set_rng_state

    random.seed(1), numpy.random.seed(2), torch.manual_seed(3)
    torch.save(rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), float(numpy.random.rand()), float(torch.rand(1)))
    random.seed(9), numpy.random.seed(9), torch.manual_seed(9)
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), float(numpy.random.rand()), float(torch.rand(1))) == expected


def test_alone_the_agreement_is_the_flags_themselves() -> None:
    from aisched.workload.distributed import any_rank

    assert any_rank([True, False]) == [True, False]
