"""A training script that survives spot interruptions with aisched.workload.

It fits y = 3x - 2 by stochastic gradient descent, in plain Python so that it
runs in any image that has the aisched package (nothing else is needed). What
matters is the shape of the loop, which is the same for a real model:

1. resume from the checkpoint the operator names (AISCHED_RESUME_STEP/PATH), else start fresh;
2. call `maybe_checkpoint(step)` after every step: it saves at the interval the
   operator chose (AISCHED_CHECKPOINT_INTERVAL_SECONDS) and, after a SIGTERM,
   saves once more, reports the checkpoint and exits for the operator to resume it elsewhere.

Each step's data is drawn from a generator seeded by the step number, so a run
that was interrupted and resumed ends with exactly the weights of one that was not.

    AISCHED_CHECKPOINT_DIR=/tmp/ckpt python train_with_checkpoints.py --steps 2000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

from aisched.workload import Checkpointer, WorkerEnvironment

LEARNING_RATE = 0.05
BATCH = 16


def train_step(weights: list[float], step: int) -> list[float]:
    """One SGD step on a batch of y = 3x - 2 + noise; the batch depends only on the step."""
    rng = random.Random(step)
    slope, intercept = weights
    grad_slope = grad_intercept = 0.0
    for _ in range(BATCH):
        x = rng.uniform(-1.0, 1.0)
        error = slope * x + intercept - (3.0 * x - 2.0 + rng.gauss(0.0, 0.1))
        grad_slope += 2.0 * error * x / BATCH
        grad_intercept += 2.0 * error / BATCH
    return [slope - LEARNING_RATE * grad_slope, intercept - LEARNING_RATE * grad_intercept]


def save(directory: str, step: int, weights: list[float]) -> str:
    """Write the state of `step`; the rename makes a save cut short by SIGKILL invisible."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"step-{step:09d}.json")
    with open(path + ".partial", "w", encoding="utf-8") as partial:
        json.dump({"step": step, "weights": weights}, partial)
    os.replace(path + ".partial", path)
    return path


def load(path: str) -> tuple[int, list[float]]:
    with open(path, encoding="utf-8") as state:
        document = json.load(state)
    return int(document["step"]), [float(value) for value in document["weights"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=2000, help="train until this many steps are done")
    parser.add_argument("--step-seconds", type=float, default=0.01, help="pretend each step takes this long")
    args = parser.parse_args()

    environment = WorkerEnvironment.from_env()
    directory = environment.checkpoint_dir or "checkpoints"
    weights, first_step = [0.0, 0.0], 0
    if environment.resume is not None and environment.resume.path:
        done, weights = load(environment.resume.path)
        first_step = done + 1
        print(f"resuming after step {done} (gang generation {environment.gang_generation})", flush=True)

    checkpointer = Checkpointer(lambda step: save(directory, step, weights), environment=environment)
    checkpointer.install_sigterm_handler()
    for step in range(first_step, args.steps):
        weights = train_step(weights, step)
        time.sleep(args.step_seconds)
        checkpointer.maybe_checkpoint(step)
        if step % 100 == 0:
            print(f"step {step}: slope {weights[0]:.3f} intercept {weights[1]:.3f}", flush=True)
    final = save(directory, args.steps - 1, weights) if args.steps > first_step else None
    print(f"done: slope {weights[0]:.4f} intercept {weights[1]:.4f} saved to {final}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
