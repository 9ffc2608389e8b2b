"""A training worker torchrun starts in test_torchrun_stop: DDP on gloo, the SDK's agreed stop, a slow save.

Run as `torchrun -m tests.tools.torchrun_worker ROOT SAVE_SECONDS`; writes ROOT/ready-<rank>
once training, and its checkpoint report to ROOT/report-<rank>.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(root: Path, save_seconds: float) -> None:
    import torch
    import torch.distributed as dist

    from aisched.workload.distributed import ShardedSave, TrainingState, distributed_checkpointer, save_training_state

    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_* from torchrun
    rank = dist.get_rank()
    os.environ["AISCHED_TERMINATION_MESSAGE_PATH"] = str(root / f"report-{rank}")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    state = TrainingState(model, optimizer)

    def save(step: int) -> str | ShardedSave:
        time.sleep(save_seconds)  # a big model's save: longer than torchrun's default 30 s
        return save_training_state(state, step, str(root / "ckpt"))

    checkpointer = distributed_checkpointer(save)
    checkpointer.install_sigterm_handler()
    for step in range(100_000):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 2:
            (root / f"ready-{rank}").write_text(str(os.getpid()))
        time.sleep(0.05)
        checkpointer.maybe_checkpoint(step)
    raise SystemExit(1)  # never reached: the stop was not seen


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]))
