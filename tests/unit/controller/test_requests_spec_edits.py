"""A running gang is charged what it was admitted with, never less than its pods hold, whatever its spec
says later: the attacks of issue 37 (8 GPUs lowered to 1, a share added to whole GPUs) with the API
server's rules off (`aisched.api.running_shape`), through the cycle's requests and the scheduler."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.api import CapacityType, TrainingJob, TrainingJobPhase
from aisched.api.sharing import GpuShare
from aisched.controller.training.requests import GangHolds, RequestBook
from aisched.kube.records import PodRecord
from aisched.policy.cluster import ClusterSnapshot, local_node
from aisched.policy.job_status import placed
from aisched.policy.placement import Placement
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import JobRequest, schedule
from aisched.policy.sharing.charge import replica_milli
from aisched.policy.topology import LOCAL_TOPOLOGY
from tests.builders import a_training_job

NOW = datetime(2026, 1, 1, tzinfo=UTC)
KEY = ("team", "big")
H100 = "NVIDIA-H100-80GB-HBM3"


def cluster() -> ClusterSnapshot:
    return ClusterSnapshot([local_node(name, 8, rack="r1", zone="z") for name in ("a", "b")])


def admitted(spec: dict[str, Any], nodes: tuple[str, ...], snapshot: ClusterSnapshot) -> dict[str, Any]:
    """A job of SPEC as the cycle writes it once placed on NODES (`job_status.placed`), Running."""
    obj = a_training_job(KEY[1]).namespace(KEY[0]).queue("team").replicas(len(nodes)).obj()
    obj["spec"].update(copy.deepcopy(spec))
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00+00:00"
    job = TrainingJob.model_validate(obj)
    placement = Placement.of_nodes(nodes, job.spec.gpus_per_replica, snapshot)
    status = placed(
        job,
        placement,
        reason="Admitted",
        message="placed",
        selector="s",
        checkpoint_interval_seconds=None,
        capacity=None,
        now=NOW,
    )
    status.phase = TrainingJobPhase.RUNNING
    obj["status"] = status.to_wire()
    return obj


def edited(obj: dict[str, Any], **spec: Any) -> tuple[dict[str, Any], TrainingJob]:
    """OBJ with its spec edited as a tenant would, had the API server let the edit through."""
    obj = copy.deepcopy(obj)
    for field, value in spec.items():
        if value is None:
            obj["spec"].pop(field, None)
        else:
            obj["spec"][field] = value
    return obj, TrainingJob.model_validate(obj)


def worker(rank: int, node: str, gpus: int = 0, mig_milli: int = 0) -> PodRecord:
    return PodRecord(
        "team", f"big-w{rank}", node, gpus, "Running", {}, terminating=False, gated=False, disruption_target=False,
        mig_milli=mig_milli,
    )  # fmt: skip


def running_request(obj: dict[str, Any], job: TrainingJob, snapshot: ClusterSnapshot, *pods: PodRecord) -> JobRequest:
    book = RequestBook()
    book.begin_cycle()
    return book.running(KEY, obj, job, snapshot, node_generation=1, excluded=frozenset(), holds=GangHolds.of((), pods))


def test_lowering_gpus_per_replica_under_a_running_gang_leaves_its_charge_and_the_quota_holds() -> None:
    snapshot = cluster()
    obj = admitted({"gpusPerReplica": 8}, ("a",), snapshot)
    snapshot.allocate({"a": 8})  # its pod holds 8 GPUs of node a
    obj, job = edited(obj, gpusPerReplica=1)
    # Charged what it was admitted with before the watch shows its pod, and never less than the pod holds.
    assert running_request(obj, job, snapshot).held_milli == 8000
    running = running_request(obj, job, snapshot, worker(0, "a", gpus=8))
    assert (running.gpus_per_replica, running.held_milli) == (8, 8000)
    assert running.placement is not None and running.placement.gpus_by_node() == {"a": 8}
    # A 7-GPU job of the same queue (8 GPUs): node b has room for it, the quota has none.
    waiting_obj = a_training_job("next").namespace("team").queue("team").gpus(7).obj()
    waiting_obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:01+00:00"
    waiting = JobRequest.from_training_job(
        TrainingJob.model_validate(waiting_obj), capacity_types=(CapacityType.ON_DEMAND,), topology=LOCAL_TOPOLOGY
    )
    result = schedule(snapshot, [running, waiting], [QueueQuota("team", 8)], NOW)
    assert [a.key for a in result.admitted] == []
    assert [w.key for w in result.waiting] == ["team/next"]


def test_a_share_added_to_a_running_whole_gpu_gang_leaves_it_charged_whole_gpus() -> None:
    snapshot = cluster()
    obj = admitted({"gpusPerReplica": 1}, ("a", "b"), snapshot)
    snapshot.allocate({"a": 1, "b": 1})
    obj, job = edited(obj, gpuShare={"computePercent": 1})
    running = running_request(obj, job, snapshot, worker(0, "a", gpus=1), worker(1, "b", gpus=1))
    assert running.share is None and running.milli_per_replica is None
    assert running.held_milli == 2000
    assert running.placement is not None and running.placement.gpus_by_node() == {"a": 1, "b": 1}


def test_a_mig_profile_or_gpu_count_edited_under_a_mig_gang_leaves_its_instances_charged() -> None:
    snapshot = cluster()
    obj = admitted({"gpusPerReplica": 1, "gpuType": H100, "gpuShare": {"migProfile": "3g.40gb"}}, ("a",), snapshot)
    obj, job = edited(obj, gpuShare={"migProfile": "1g.10gb"})
    running = running_request(obj, job, snapshot, worker(0, "a", mig_milli=429))
    assert running.share is not None and running.share.mig_profile == "3g.40gb"
    assert running.held_milli == 429
    assert running.placement is not None and running.placement.mig_profile == "3g.40gb"


def test_a_gang_placed_before_its_shape_was_recorded_is_charged_the_gpus_its_status_says_it_holds() -> None:
    snapshot = cluster()
    obj = admitted({"gpusPerReplica": 8}, ("a", "b"), snapshot)
    for field in ("gpusPerReplica", "gpuShare"):
        obj["status"]["placement"].pop(field, None)
    obj, job = edited(obj, gpusPerReplica=1)
    assert running_request(obj, job, snapshot).held_milli == 16_000  # status.gpus 16 over 2 workers


def test_pods_that_hold_more_than_was_admitted_are_charged_what_they_hold() -> None:
    # An edit that landed between the cycle's decision and its status write: the pods were made from it.
    snapshot = cluster()
    obj = admitted({"gpusPerReplica": 1}, ("a",), snapshot)
    obj, job = edited(obj, gpusPerReplica=8)
    assert running_request(obj, job, snapshot, worker(0, "a", gpus=8)).held_milli == 8000
    # A pod that has finished holds nothing.
    done = PodRecord("team", "big-w0", "a", 8, "Succeeded", {}, terminating=False, gated=False, disruption_target=False)
    assert running_request(obj, job, snapshot, done).held_milli == 1000


def test_a_waiting_job_is_charged_its_spec_as_edited() -> None:
    snapshot = cluster()
    obj = admitted({"gpusPerReplica": 8}, ("a",), snapshot)
    obj["status"] = {"phase": "Queued"}
    obj, job = edited(obj, gpusPerReplica=2)
    book = RequestBook()
    book.begin_cycle()
    waiting = book.waiting(KEY, obj, job, (CapacityType.ON_DEMAND,), frozenset(), topology=LOCAL_TOPOLOGY)
    assert waiting.charge(1) == 2000


def test_new_pods_make_the_request_again() -> None:
    snapshot = cluster()
    obj = admitted({"gpusPerReplica": 1}, ("a",), snapshot)
    job = TrainingJob.model_validate(obj)
    book = RequestBook()
    book.begin_cycle()
    first = book.running(KEY, obj, job, snapshot, node_generation=1, excluded=frozenset())
    book.begin_cycle()
    holds = GangHolds.of((), [worker(0, "a", gpus=4)])
    again = book.running(KEY, obj, job, snapshot, node_generation=1, excluded=frozenset(), holds=holds)
    assert (first.held_milli, again.held_milli) == (1000, 4000)


SHAPES: list[dict[str, Any]] = [
    {"gpusPerReplica": 8},
    {"gpusPerReplica": 1},
    {"gpusPerReplica": 2, "gpuType": "NVIDIA-L4"},
    {"gpusPerReplica": 1, "gpuShare": {"computePercent": 1}},
    {"gpusPerReplica": 1, "gpuShare": {"computePercent": 60}},
    {"gpusPerReplica": 1, "gpuType": H100, "gpuShare": {"migProfile": "1g.10gb"}},
    {"gpusPerReplica": 1, "gpuType": H100, "gpuShare": {"migProfile": "7g.80gb"}},
]


def _milli(shape: dict[str, Any]) -> int:
    share = GpuShare.model_validate(shape["gpuShare"]) if "gpuShare" in shape else None
    return replica_milli(share, shape["gpusPerReplica"])


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(SHAPES),
    st.sampled_from(SHAPES),
    st.integers(min_value=1, max_value=2),
    st.lists(st.integers(min_value=0, max_value=8), max_size=2),
)
def test_no_spec_edit_lowers_a_running_gangs_charge_below_what_it_was_admitted_with_or_its_pods_hold(
    before: dict[str, Any], after: dict[str, Any], replicas: int, pod_gpus: list[int]
) -> None:
    snapshot = cluster()
    nodes = ("a", "b")[:replicas]
    obj = admitted(before, nodes, snapshot)
    obj, job = edited(obj, **{"gpuShare": None, "gpuType": None, **after})
    pods = [worker(rank, nodes[rank % replicas], gpus=gpus) for rank, gpus in enumerate(pod_gpus)]
    request = running_request(obj, job, snapshot, *pods)
    floor = max([_milli(before), *(gpus * 1000 for gpus in pod_gpus)])
    assert request.held_milli == replicas * floor
