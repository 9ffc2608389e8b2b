"""Charged == held: what the scheduler charges a queue for one worker (JobRequest) is what the worker's pod,
once built, holds as the inventory reads it, for whole GPUs, fractions (DRA claims) and MIG instances."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aisched.api.common import CapacityType
from aisched.api.sharing import ALL_MIG_PROFILES, GpuShare
from aisched.api.training_job import TrainingJob
from aisched.kube.claims import PodShare, share_memory_mib, with_mig_slice, with_share_claim
from aisched.kube.inventory import Inventory
from aisched.kube.records import read_pod
from aisched.policy.scheduler import JobRequest
from aisched.policy.sharing.charge import share_milli
from aisched.settings import Settings
from tests.builders import a_training_job
from tests.unit.kube.claim_objects import share_claim_of
from tests.unit.kube.test_inventory import node, pod

OURS = {"aisched.io/kind": "TrainingJob", "aisched.io/job-name": "job"}
GPU_MEMORY = st.integers(1_000, 200_000)


def _request(job: dict[str, Any], gpu_memory: int) -> JobRequest:
    return JobRequest.from_training_job(
        TrainingJob.model_validate(job), capacity_types=(CapacityType.ON_DEMAND,), gpu_memory_mib=gpu_memory
    )


def _held(obj: dict[str, Any]) -> int:
    obj["spec"]["initContainers"] = []
    return read_pod(obj, "nvidia.com/gpu").gpu_milli


@given(gpus=st.integers(1, 8))
def test_whole_gpus(gpus: int) -> None:
    charged = _request(a_training_job().gpus(gpus).obj(), 80_000).replica_milli
    assert charged == _held(pod("w", "n1", gpus, labels=OURS)) == gpus * 1000


@given(
    compute=st.one_of(st.none(), st.integers(1, 99)),
    memory=st.one_of(st.none(), st.integers(1, 200_000)),
    gpu_memory=GPU_MEMORY,
)
def test_a_fraction_held_through_its_dra_claim(compute: int | None, memory: int | None, gpu_memory: int) -> None:
    if compute is None and memory is None:
        return
    share = {k: v for k, v in (("computePercent", compute), ("memoryMiB", memory)) if v is not None}
    charged = _request(a_training_job().gpu_share(**share).obj(), gpu_memory).replica_milli
    # What the controller writes on the pod on a GPU of that memory (controller.sharing.GpuShares.assign).
    gpu_share = GpuShare.model_validate(share)
    milli = share_milli(gpu_share, gpu_memory)
    given_share = PodShare("gpu-0", milli, share_memory_mib(gpu_share, milli, gpu_memory))
    # What it holds once kube-scheduler allocated its claim (the inventory reads the claim, not the annotation).
    shared, claim = share_claim_of(with_share_claim(pod("w", "n1", 0, labels=OURS), "w", given_share))
    shared["spec"]["initContainers"] = []
    inventory = Inventory(Settings())
    inventory.replace_nodes([node("n1")])
    inventory.upsert_claim(claim)
    held = inventory.upsert_pod(shared)
    assert held is not None and charged == held.gpu_milli


def test_a_memory_share_on_gpus_of_unknown_memory_is_charged_whole_never_less() -> None:
    assert _request(a_training_job().gpu_share(memoryMiB=10).obj(), 0).replica_milli == 1000


@given(profile=st.sampled_from(ALL_MIG_PROFILES))
def test_a_mig_instance(profile: str) -> None:
    charged = _request(a_training_job().gpu_share(migProfile=profile).obj(), 80_000).replica_milli
    assert charged == _held(with_mig_slice(pod("w", "n1", 0, labels=OURS), profile))
