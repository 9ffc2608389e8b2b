"""A small training job for the real nodes: a two-layer network fitted to synthetic data with numpy.

Deterministic from its seed: the data, the initial weights and every minibatch
come from generators seeded by (seed, rank) and (seed, rank, step), so a run
that is stopped and resumed from a checkpoint ends with the very weights of an
uninterrupted run. Checkpoints go through aisched.workload (periodic, at the
interval the operator passes, and one on SIGTERM); each step's loss is logged.

    python3 train.py --steps 400 --seed 7 [--step-seconds 0.05] [--output-dir DIR]

Checkpoints go to $AISCHED_CHECKPOINT_DIR/rank-<RANK>/ (or --output-dir), and
the finished run writes final.json there: its step, loss and the SHA-256 of
its weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import time
from pathlib import Path

import numpy as np

from aisched.workload import Checkpointer

log = logging.getLogger("train")

FEATURES, HIDDEN, SAMPLES, BATCH, LEARNING_RATE = 16, 32, 2048, 64, 0.05
_CHECKPOINT = re.compile(r"step-(\d{9})\.npz")


def make_data(seed: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, rank, 0])
    inputs = rng.standard_normal((SAMPLES, FEATURES))
    truth = rng.standard_normal(FEATURES)
    targets = np.tanh(inputs @ truth)[:, None] + 0.05 * rng.standard_normal((SAMPLES, 1))
    return inputs, targets


def init_weights(seed: int, rank: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, rank, 1])
    return {
        "w1": rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES),
        "b1": np.zeros(HIDDEN),
        "w2": rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN),
        "b2": np.zeros(1),
    }


def train_step(weights: dict[str, np.ndarray], inputs: np.ndarray, targets: np.ndarray) -> float:
    """One SGD step on a minibatch; updates `weights` in place and returns the loss before it."""
    hidden = np.tanh(inputs @ weights["w1"] + weights["b1"])
    error = hidden @ weights["w2"] + weights["b2"] - targets
    loss = float(np.mean(error**2))
    grad_out = 2.0 * error / len(inputs)
    grad_hidden = (grad_out @ weights["w2"].T) * (1.0 - hidden**2)
    weights["w2"] -= LEARNING_RATE * hidden.T @ grad_out
    weights["b2"] -= LEARNING_RATE * grad_out.sum(axis=0)
    weights["w1"] -= LEARNING_RATE * inputs.T @ grad_hidden
    weights["b1"] -= LEARNING_RATE * grad_hidden.sum(axis=0)
    return loss


def digest(weights: dict[str, np.ndarray]) -> str:
    sha = hashlib.sha256()
    for name in sorted(weights):
        sha.update(np.ascontiguousarray(weights[name]).tobytes())
    return sha.hexdigest()


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"step-{step:09d}.npz"


def own_resume_step(directory: Path, gang_step: int) -> int:
    """The first step at or after GANG_STEP that this rank saved.

    The operator resumes a gang from the oldest step all its workers saved.
    Ranks that synchronise every step (an all-reduce) all saved that very
    step; these ranks train independently, so one may have saved a later step
    on SIGTERM, and it continues from there to stay on its own trajectory.
    """
    saved = sorted(int(m.group(1)) for p in directory.iterdir() if (m := _CHECKPOINT.fullmatch(p.name)))
    later = [step for step in saved if step >= gang_step]
    if not later:
        raise SystemExit(f"no checkpoint at or after step {gang_step} in {directory}")
    return later[0]


def save(directory: Path, step: int, weights: dict[str, np.ndarray]) -> str:
    """Write atomically, so a SIGKILL mid-write never leaves a torn checkpoint under the final name."""
    path = checkpoint_path(directory, step)
    partial = path.with_suffix(".partial.npz")
    np.savez(partial, **weights)
    os.replace(partial, path)
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pause per step, to make a run last")
    parser.add_argument("--output-dir", help="default: $AISCHED_CHECKPOINT_DIR")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    rank = int(os.environ.get("RANK", "0"))
    root = args.output_dir or os.environ.get("AISCHED_CHECKPOINT_DIR")
    if not root:
        parser.error("no checkpoint directory: set AISCHED_CHECKPOINT_DIR or --output-dir")
    directory = Path(root) / f"rank-{rank}"
    directory.mkdir(parents=True, exist_ok=True)

    inputs, targets = make_data(args.seed, rank)
    weights = init_weights(args.seed, rank)
    checkpointer = Checkpointer(save=lambda step: save(directory, step, weights))
    checkpointer.install_sigterm_handler()
    start = 0
    if checkpointer.resume is not None:
        resumed = own_resume_step(directory, checkpointer.resume.step)
        with np.load(checkpoint_path(directory, resumed)) as saved:
            weights.update({name: saved[name].copy() for name in weights})
        start = resumed + 1
        log.info("resumed from step %d (the gang's: %d)", resumed, checkpointer.resume.step)

    loss = float("nan")
    for step in range(start, args.steps):
        batch = np.random.default_rng([args.seed, rank, 2, step]).integers(0, SAMPLES, BATCH)
        loss = train_step(weights, inputs[batch], targets[batch])
        log.info("step %d loss %.6f", step, loss)
        if args.step_seconds:
            time.sleep(args.step_seconds)
        checkpointer.maybe_checkpoint(step)

    result = {"step": args.steps - 1, "loss": loss, "weightsSha256": digest(weights), "resumedFrom": start - 1}
    (directory / "final.json").write_text(json.dumps(result) + "\n")
    log.info("finished: %s", json.dumps(result))


if __name__ == "__main__":
    main()
