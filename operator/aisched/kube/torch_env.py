"""The environment a worker pod gets so that `torchrun train.py` and `python train.py` run unchanged.

torchrun reads its launcher options from `PET_<OPTION>` variables (torch's
`argparse_util.env` action), which is how Kubeflow Trainer v2's torch plugin
configures it; we set the same ones. `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and
`LOCAL_WORLD_SIZE` mean what torch means by them: processes, not pods. torchrun
overwrites them for each of its children, so they only matter to a job that
runs one process per pod without a launcher, and only there can a pod-wide
`RANK` be true. docs/torchrun.md is the table of every variable.
"""

from __future__ import annotations

from dataclasses import dataclass

# torchrun's default --master-port. An elastic job's c10d rendezvous store listens on it too:
# the static master port is unused then, and the headless Service needs no second port.
TORCH_PORT = 29500
# torchrun's kill delay after it forwards SIGTERM to its workers when nothing sets it.
TORCHRUN_DEFAULT_SHUTDOWN_SECONDS = 30

PET_NNODES = "PET_NNODES"
PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
PET_NODE_RANK = "PET_NODE_RANK"
PET_MASTER_ADDR = "PET_MASTER_ADDR"
PET_MASTER_PORT = "PET_MASTER_PORT"
PET_RDZV_BACKEND = "PET_RDZV_BACKEND"
PET_RDZV_ENDPOINT = "PET_RDZV_ENDPOINT"
PET_RDZV_ID = "PET_RDZV_ID"
PET_RDZV_CONF = "PET_RDZV_CONF"
PET_SHUTDOWN_TIMEOUT = "PET_SHUTDOWN_TIMEOUT"
# The same delay for launchers built on torch.distributed.launcher.api (elastic_launch).
TORCH_ELASTIC_SHUTDOWN_TIMEOUT = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"


@dataclass(frozen=True)
class TorchTopology:
    """One worker pod's place in its gang, in the terms torch launches processes by."""

    master_addr: str
    nnodes: int
    nproc_per_node: int
    node_rank: int
    # Elastic jobs (minReplicas/maxReplicas) rendezvous through c10d under this id; None: static.
    rendezvous_id: str | None = None
    # The longest termination grace the operator gives the pod when it stops it.
    shutdown_grace_seconds: int = TORCHRUN_DEFAULT_SHUTDOWN_SECONDS

    def __post_init__(self) -> None:
        if self.nnodes < 1 or self.nproc_per_node < 1 or not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"no such worker: node {self.node_rank} of {self.nnodes} x {self.nproc_per_node}")


def torch_environment(topology: TorchTopology) -> dict[str, str]:
    """The variables torchrun, torch.distributed's env:// init and Lightning read, for one pod."""
    t = topology
    env = {
        PET_NNODES: str(t.nnodes),
        PET_NPROC_PER_NODE: str(t.nproc_per_node),
        PET_NODE_RANK: str(t.node_rank),
        PET_MASTER_ADDR: t.master_addr,
        PET_MASTER_PORT: str(TORCH_PORT),
        # torchrun forwards SIGTERM to its workers and SIGKILLs them this long after; never
        # before the kubelet would, so a worker saving on SIGTERM keeps the whole grace.
        PET_SHUTDOWN_TIMEOUT: str(t.shutdown_grace_seconds),
        TORCH_ELASTIC_SHUTDOWN_TIMEOUT: str(t.shutdown_grace_seconds),
        "MASTER_ADDR": t.master_addr,
        "MASTER_PORT": str(TORCH_PORT),
        "WORLD_SIZE": str(t.nnodes * t.nproc_per_node),
        "LOCAL_WORLD_SIZE": str(t.nproc_per_node),
        # Lightning's and most hand-written launchers' name for the pod's index.
        "NODE_RANK": str(t.node_rank),
    }
    if t.nproc_per_node == 1:
        # One process per pod: the pod's rank is the process's. With more, each process's
        # rank is its launcher's to set, and a wrong pod-wide one would be worse than none
        # (init_process_group then says RANK is missing instead of joining twice as rank 3).
        env["RANK"] = str(t.node_rank)
        env["LOCAL_RANK"] = "0"
    if t.rendezvous_id is not None:
        # The operator resizes an elastic job by restarting its gang at the new size, so each
        # generation's rendezvous closes when that generation's nnodes have joined: an
        # explicit `--nnodes=1:8` still works, it only waits longer for the last ones.
        env[PET_RDZV_BACKEND] = "c10d"
        env[PET_RDZV_ENDPOINT] = f"{t.master_addr}:{TORCH_PORT}"
        env[PET_RDZV_ID] = t.rendezvous_id
        # The pod behind the endpoint hosts the rendezvous store; saying so spares torch
        # guessing it from DNS, which a pod whose own name does not resolve yet gets wrong.
        env[PET_RDZV_CONF] = f"is_host={'true' if t.node_rank == 0 else 'false'}"
    return env


def rendezvous_id(job_uid: str, generation: int) -> str:
    """The c10d run id of one gang generation: the job's uid, and the generation.

    c10d keeps the rendezvous in a store the rank-0 agent hosts, so it dies with the gang
    and a job's id could stay the same. It does not, because an old generation's pods may
    still be saving (their termination grace) while the next one starts under the same host
    names: with one id, a new agent that reached the old store would join the old
    rendezvous and make its agents restart their workers in the middle of that save.
    """
    return f"{job_uid}-g{generation}"
