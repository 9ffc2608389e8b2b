"""A workload of any kind as one request of the cycle, as a TrainingJob of the same shape would be."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from aisched.api.common import CapacityType
from aisched.policy.placement import Placement
from aisched.policy.shared_room import ShareShape
from aisched.policy.taints import Toleration, TolerationOperator
from aisched.policy.topology import LOCAL_TOPOLOGY, DomainId
from aisched.policy.workloads.model import AdmittedRecord, PodSet, Workload, WorkloadKind
from aisched.policy.workloads.request import as_request

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ANY = Toleration("", TolerationOperator.EXISTS)
SPOT = Toleration("spot", TolerationOperator.EXISTS)


def a_workload(*pod_sets: PodSet, **fields: object) -> Workload:
    base = Workload(WorkloadKind.PYTORCH_JOB, "ml", "llm", "u1", "team-a", 5, T0, pod_sets)
    return replace(base, **fields)  # type: ignore[arg-type]


def test_a_pytorch_job_is_its_gpu_pods_as_replicas() -> None:
    workload = a_workload(
        PodSet("Master", 1, 8, tolerations=(ANY, SPOT), node_selector={"nvidia.com/gpu.product": "H100"}),
        PodSet("Worker", 3, 8, tolerations=(SPOT,), node_selector={"nvidia.com/gpu.product": "H100"}),
        PodSet("Launcher", 1, 0),
        required_level="rack",
        preferred_level="NVLinkDomain",
        capacity_types=(CapacityType.SPOT, CapacityType.ON_DEMAND),
        expected_duration_seconds=600,
    )
    request = as_request(workload, topology=LOCAL_TOPOLOGY, placement=None, excluded_nodes=frozenset({"bad"}))
    assert (request.key, request.queue, request.priority, request.created) == (
        "ml/llm@pytorchjobs.kubeflow.org",
        "team-a",
        5,
        T0,
    )
    assert (request.replicas, request.gpus_per_replica, request.min_replicas, request.max_replicas) == (
        4,
        8,
        None,
        None,
    )
    assert request.gpu_type == "H100"
    assert request.required_level == LOCAL_TOPOLOGY.level("Rack")
    assert request.preferred_level == LOCAL_TOPOLOGY.level("NVLinkDomain")
    assert request.tolerations == (SPOT,)  # what every GPU pod tolerates
    assert request.capacity_types == (CapacityType.SPOT, CapacityType.ON_DEMAND)
    assert request.expected_duration == timedelta(seconds=600)
    assert request.excluded_nodes == frozenset({"bad"})
    assert (request.share, request.milli_per_replica, request.replica_set, request.placement) == (
        None,
        None,
        False,
        None,
    )
    assert request.charge(4) == 32_000


def test_an_elastic_gang_may_start_with_its_sets_least_counts() -> None:
    workload = a_workload(PodSet("Master", 1, 8), PodSet("Worker", 7, 8, min_count=3))
    request = as_request(workload, topology=LOCAL_TOPOLOGY, placement=None)
    assert (request.replicas, request.min_replicas, request.max_replicas) == (8, 4, 8)
    assert request.elastic
    scaled_to_zero = a_workload(PodSet("head", 1, 0), PodSet("gpu-group", 4, 1, min_count=0))
    assert as_request(scaled_to_zero, topology=LOCAL_TOPOLOGY, placement=None).min_replicas == 1


def test_a_mig_instance_is_charged_as_a_trainingjob_s_gpushare_is() -> None:
    workload = a_workload(PodSet("main", 2, 0, mig_profile="1g.10gb"), kind=WorkloadKind.BATCH_JOB)
    request = as_request(workload, topology=LOCAL_TOPOLOGY, placement=None)
    assert (request.gpus_per_replica, request.share, request.milli_per_replica) == (
        1,
        ShareShape(mig_profile="1g.10gb"),
        143,
    )
    assert request.charge(2) == 286


def test_a_running_gang_keeps_its_placement_and_starts_when_it_was_admitted() -> None:
    admitted = AdmittedRecord(("n1", "n2"), 8, None, "team-a", T0 + timedelta(minutes=3))
    workload = a_workload(PodSet("main", 2, 8), admitted=admitted)
    placement = Placement(("n1", "n2"), 8, DomainId(None, ()))
    request = as_request(workload, topology=LOCAL_TOPOLOGY, placement=placement)
    assert request.placement == placement and request.started == T0 + timedelta(minutes=3)
    assert request.held_milli == 16_000


def test_a_model_server_asks_for_its_replicas_not_yet_placed_as_a_replica_set() -> None:
    server = a_workload(PodSet("main", 3, 1), kind=WorkloadKind.DEPLOYMENT, gang=False)
    request = as_request(server, topology=LOCAL_TOPOLOGY, placement=None)
    assert (request.replica_set, request.replicas, request.min_replicas, request.max_replicas) == (True, 3, 1, 3)
    placed = Placement(("n1", "n2"), 1, DomainId(None, ()))
    request = as_request(server, topology=LOCAL_TOPOLOGY, placement=placed)
    assert (request.replicas, request.min_replicas, request.placement) == (1, 1, None)
    full = Placement(("n1", "n2", "n3"), 1, DomainId(None, ()))
    assert as_request(server, topology=LOCAL_TOPOLOGY, placement=full).replicas == 0


def test_a_level_the_topology_lacks_is_no_constraint() -> None:
    request = as_request(
        a_workload(PodSet("main", 1, 1), required_level="Pod"), topology=LOCAL_TOPOLOGY, placement=None
    )
    assert request.required_level is None
