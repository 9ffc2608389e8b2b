"""Data-parallel training under torchrun on CPU (gloo), checkpointed with torch.distributed.checkpoint.

A small network fitted to synthetic data with DDP, SGD with momentum and a step LR
schedule. Deterministic from its seed: each rank's minibatch of a step comes from a
generator seeded by (seed, rank, step), the initial weights from the seed, and gloo's
all-reduce of two ranks adds the same two numbers on both; so a run that is stopped,
saved and resumed, on other nodes, ends with exactly the weights of an uninterrupted run.

    torchrun train.py --steps 300 --seed 7 [--step-seconds 0.1] [--output-dir DIR]

Under the operator torchrun takes its options from the PET_* variables (docs/torchrun.md);
by hand, `torchrun --standalone --nproc-per-node 2 train.py --output-dir /tmp/run`.
The ranks agree every step on when to save and to stop (aisched.workload.distributed), so
on a spot notice the gang saves one step together, reports it and exits 75. Checkpoints go
to $AISCHED_CHECKPOINT_DIR (or --output-dir) as step-NNNNNNNNN/; at the end rank 0 writes
final.json there: the last step, its loss, the SHA-256 of the weights and where it resumed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from aisched.workload.distributed import (
    TrainingState,
    distributed_checkpointer,
    load_training_state,
    save_training_state,
)

log = logging.getLogger("train")

FEATURES, HIDDEN, BATCH, LEARNING_RATE = 16, 32, 64, 0.05


def step_generator(seed: int, rank: int, step: int) -> torch.Generator:
    """A generator of its own for each (seed, rank, step): a resumed run draws the very same batches."""
    key = hashlib.sha256(f"{seed}/{rank}/{step}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))


def batch(seed: int, rank: int, step: int, truth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    generator = step_generator(seed, rank, step)
    inputs = torch.randn(BATCH, FEATURES, generator=generator)
    targets = torch.tanh(inputs @ truth) + 0.05 * torch.randn(BATCH, 1, generator=generator)
    return inputs, targets


def digest(model: torch.nn.Module) -> str:
    sha = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        sha.update(name.encode())
        sha.update(bytes(tensor.detach().contiguous().view(torch.uint8).flatten().tolist()))
    return sha.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pause per step, to make a run last")
    parser.add_argument("--output-dir", help="default: $AISCHED_CHECKPOINT_DIR")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    directory = args.output_dir or os.environ.get("AISCHED_CHECKPOINT_DIR")
    if not directory:
        parser.error("no checkpoint directory: set AISCHED_CHECKPOINT_DIR or --output-dir")
    os.makedirs(directory, exist_ok=True)

    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR/PORT from torchrun
    rank = dist.get_rank()
    model = DistributedDataParallel(make_model(args.seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)
    truth = torch.randn(FEATURES, 1, generator=step_generator(args.seed, -1, -1))

    state = TrainingState(model, optimizer, scheduler)
    resumed = load_training_state(state, directory)  # the operator's resume point, or the newest checkpoint
    start = 0 if resumed is None else resumed + 1
    if resumed is not None:
        log.info("rank %d resumed from step %d", rank, resumed)
    checkpointer = distributed_checkpointer(lambda step: save_training_state(state, step, directory))
    checkpointer.install_sigterm_handler()

    loss = torch.tensor(float("nan"))
    for step in range(start, args.steps):
        inputs, targets = batch(args.seed, rank, step, truth)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        scheduler.step()
        log.info("step %d loss %.6f", step, loss.item())
        if args.step_seconds:
            time.sleep(args.step_seconds)
        checkpointer.maybe_checkpoint(step)  # a collective: every rank, every step

    if rank == 0:
        result = {
            "step": args.steps - 1,
            "loss": loss.item(),
            "weightsSha256": digest(model.module),
            "resumedFrom": start - 1,
            "worldSize": dist.get_world_size(),
        }
        Path(directory, "final.json").write_text(json.dumps(result) + "\n")
        log.info("finished: %s", json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
