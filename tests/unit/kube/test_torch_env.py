"""Worker pods speak torchrun's language: PET_* for the launcher, RANK/WORLD_SIZE as torch means them."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisched.api import TrainingJob
from aisched.kube.builders import GangLaunch, WorkerSlot, build_worker_pod
from aisched.kube.torch_env import TorchTopology, rendezvous_id, torch_environment
from tests.builders import a_training_job

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


def _job(replicas: int = 2, gpus: int = 8, *, elastic: bool = False, grace: int | None = None) -> TrainingJob:
    builder = a_training_job("llm").replicas(replicas).gpus(gpus).namespace("team")
    if elastic:
        builder.set("minReplicas", 1).set("maxReplicas", 8)
    if grace is not None:
        builder.set("template.spec.terminationGracePeriodSeconds", grace)
    obj = builder.obj()
    obj["metadata"]["uid"] = "uid-1"
    return TrainingJob.model_validate(obj)


def _launch(world_size: int, generation: int = 3, **changes: Any) -> GangLaunch:
    slots = tuple(WorkerSlot(rank, f"n{rank}") for rank in range(world_size))
    return GangLaunch(generation=generation, world_size=world_size, slots=slots, **changes)


def _env(job: TrainingJob, launch: GangLaunch, rank: int) -> dict[str, str]:
    pod = build_worker_pod(job, launch, launch.slots[rank])
    return {item["name"]: item["value"] for item in pod["spec"]["containers"][0]["env"]}


def test_a_gang_of_eight_gpu_pods_is_sixteen_processes_on_two_nodes() -> None:
    env = _env(_job(), _launch(2), 1)
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_NODE_RANK"]) == ("2", "8", "1")
    assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == ("llm-worker-0.llm", "29500")
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["NODE_RANK"]) == ("16", "8", "1")
    # Eight processes share the pod: each one's rank is torchrun's to give.
    assert "RANK" not in env and "LOCAL_RANK" not in env
    assert "PET_RDZV_BACKEND" not in env  # a fixed-size gang: torchrun's static rendezvous


def test_one_process_per_pod_gets_its_rank_for_plain_python() -> None:
    env = _env(_job(replicas=3, gpus=1), _launch(3), 2)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("2", "0", "3", "1")


def test_an_elastic_job_rendezvous_through_c10d_on_the_rank_zero_worker() -> None:
    job, launch = _job(replicas=4, elastic=True), _launch(4, generation=5)
    envs = [_env(job, launch, rank) for rank in range(4)]
    assert {e["PET_RDZV_BACKEND"] for e in envs} == {"c10d"}
    assert {e["PET_RDZV_ENDPOINT"] for e in envs} == {"llm-worker-0.llm:29500"}
    assert {e["PET_RDZV_ID"] for e in envs} == {"uid-1-g5"}
    assert [e["PET_RDZV_CONF"] for e in envs] == ["is_host=true"] + ["is_host=false"] * 3
    assert {e["PET_NNODES"] for e in envs} == {"4"}  # this generation's gang, which the operator restarts to resize


def test_the_rendezvous_id_is_the_job_and_its_generation() -> None:
    assert rendezvous_id("uid-1", 5) != rendezvous_id("uid-1", 6)
    assert rendezvous_id("uid-1", 5) != rendezvous_id("uid-2", 5)


def test_a_lone_elastic_worker_hosts_its_own_rendezvous() -> None:
    env = _env(_job(replicas=1, elastic=True), _launch(1), 0)
    assert env["PET_RDZV_ENDPOINT"] == "localhost:29500"
    assert env["PET_MASTER_ADDR"] == "localhost"


def test_torchrun_waits_as_long_as_the_longest_grace_before_killing_its_workers() -> None:
    assert _env(_job(), _launch(2), 0)["PET_SHUTDOWN_TIMEOUT"] == "30"  # Kubernetes' default grace
    assert _env(_job(grace=300), _launch(2, stop_grace_seconds=110), 0)["PET_SHUTDOWN_TIMEOUT"] == "300"
    env = _env(_job(), _launch(2, termination_grace_seconds=110, stop_grace_seconds=110), 0)
    assert env["PET_SHUTDOWN_TIMEOUT"] == env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == "110"


def test_the_environment_the_template_sets_for_torch_is_overridden() -> None:
    job = _job()
    job.spec.template["spec"]["containers"][0]["env"] = [{"name": "WORLD_SIZE", "value": "99"}]
    env = _env(job, _launch(2), 0)
    assert env["WORLD_SIZE"] == "16"


@given(
    nnodes=st.integers(1, 64),
    nproc=st.integers(1, 16),
    data=st.data(),
)
def test_world_size_counts_processes_and_rank_is_set_only_when_it_is_the_pods(
    nnodes: int, nproc: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, nnodes - 1))
    env = torch_environment(TorchTopology("m", nnodes, nproc, rank))
    assert int(env["WORLD_SIZE"]) == nnodes * nproc
    assert ("RANK" in env) == (nproc == 1)
    assert int(env.get("RANK", rank)) == rank


def test_a_rank_outside_the_gang_is_refused() -> None:
    with pytest.raises(ValueError, match="node 2 of 2"):
        TorchTopology("m", 2, 1, 2)


# -- what torch's own launcher makes of it -----------------------------------------------------


def _torchrun_config(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *argv: str) -> Any:
    """torchrun's LaunchConfig for ARGV under ENV, through torch's parser (which reads PET_* when built)."""
    from torch.distributed.run import config_from_args, get_args_parser

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # config_from_args sets it otherwise
    args = get_args_parser().parse_args([*argv, "train.py"])
    config, _, _ = config_from_args(args)
    return config


@needs_torch
def test_torchrun_reads_a_static_gang_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _torchrun_config(monkeypatch, _env(_job(), _launch(2), 1))
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (2, 2, 8)
    assert config.rdzv_backend == "static"
    assert config.rdzv_endpoint == "llm-worker-0.llm:29500"
    assert config.rdzv_configs["rank"] == 1
    assert config.shutdown_timeout == 30


@needs_torch
def test_torchrun_reads_an_elastic_gang_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    job, launch = _job(replicas=4, elastic=True), _launch(4, generation=5, stop_grace_seconds=110)
    config = _torchrun_config(monkeypatch, _env(job, launch, 2))
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (4, 4, 8)
    assert (config.rdzv_backend, config.rdzv_endpoint, config.run_id) == ("c10d", "llm-worker-0.llm:29500", "uid-1-g5")
    assert config.rdzv_configs["is_host"] == "false"
    assert config.shutdown_timeout == 110


@needs_torch
def test_an_explicit_nnodes_range_still_rendezvous_through_the_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's `torchrun --nnodes=1:8 train.py`: before, a static rendezvous on 127.0.0.1."""
    job = _job(replicas=4, elastic=True)
    config = _torchrun_config(monkeypatch, _env(job, _launch(4), 3), "--nnodes=1:8")
    assert (config.min_nodes, config.max_nodes) == (1, 8)
    assert (config.rdzv_backend, config.rdzv_endpoint) == ("c10d", "llm-worker-0.llm:29500")
