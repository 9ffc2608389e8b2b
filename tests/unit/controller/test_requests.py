"""The scheduling cycle's requests are made again only when what they are made of changed."""

from __future__ import annotations

from typing import Any

from aisched.api import CapacityType, TrainingJob
from aisched.controller.training.requests import RequestBook
from aisched.policy.cluster import ClusterSnapshot, local_node
from aisched.policy.topology import LOCAL_TOPOLOGY
from tests.builders import a_training_job
from tests.levels import RACK

ON_DEMAND = (CapacityType.ON_DEMAND,)
SPOT = (CapacityType.SPOT,)
KEY = ("ns", "llm")
CLUSTER = ClusterSnapshot([local_node("a", 8, rack="r1", zone="z"), local_node("b", 8, rack="r1", zone="z")])


def a_job(**status: Any) -> tuple[dict[str, Any], TrainingJob]:
    obj = a_training_job("llm").namespace("ns").replicas(2).gpus(8).obj()
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00+00:00"
    if status:
        obj["status"] = status
    return obj, TrainingJob.model_validate(obj)


def test_a_waiting_job_unchanged_since_the_last_cycle_keeps_its_request() -> None:
    book = RequestBook()
    obj, job = a_job()
    book.begin_cycle()
    first = book.waiting(KEY, obj, job, ON_DEMAND, frozenset(), topology=LOCAL_TOPOLOGY)
    book.end_cycle()
    book.begin_cycle()
    assert book.waiting(KEY, obj, job, ON_DEMAND, frozenset(), topology=LOCAL_TOPOLOGY) is first


def test_a_new_object_capacity_or_excluded_node_makes_the_request_again() -> None:
    book = RequestBook()
    obj, job = a_job()
    book.begin_cycle()
    first = book.waiting(KEY, obj, job, ON_DEMAND, frozenset(), topology=LOCAL_TOPOLOGY)
    for capacity, excluded in ((SPOT, frozenset()), (ON_DEMAND, frozenset({"a"}))):
        book.begin_cycle()
        again = book.waiting(KEY, obj, job, capacity, excluded, topology=LOCAL_TOPOLOGY)
        assert again is not first
        assert (again.capacity_types, again.excluded_nodes) == (capacity, excluded)
    newer, job = a_job(phase="Queued")
    book.begin_cycle()
    assert book.waiting(KEY, newer, job, ON_DEMAND, frozenset({"a"}), topology=LOCAL_TOPOLOGY) is not again


def test_a_running_gang_keeps_its_placement_through_status_writes_until_the_nodes_change() -> None:
    book = RequestBook()
    placed = {"phase": "Running", "placement": {"nodes": ["a", "b"]}, "startTime": "2026-01-01T00:00:00+00:00"}
    obj, job = a_job(**placed)
    book.begin_cycle()
    first = book.running(KEY, obj, job, CLUSTER, node_generation=1, excluded=frozenset())
    assert first.placement is not None and first.placement.level == RACK
    # A status write (its service so far) is a new object: a new request, the same placement.
    written, job = a_job(**placed, attainedGpuSeconds=100.0)
    book.begin_cycle()
    second = book.running(KEY, written, job, CLUSTER, node_generation=1, excluded=frozenset())
    assert second is not first and second.placement is first.placement
    # A node changed as placement sees it: the placement is read off the nodes again.
    book.begin_cycle()
    third = book.running(KEY, written, job, CLUSTER, node_generation=2, excluded=frozenset())
    assert third.placement is not first.placement and third.placement == first.placement


def test_a_job_left_out_of_a_cycle_is_forgotten_at_the_next() -> None:
    book = RequestBook()
    obj, job = a_job()
    book.begin_cycle()
    first = book.waiting(KEY, obj, job, ON_DEMAND, frozenset(), topology=LOCAL_TOPOLOGY)
    book.begin_cycle()  # the job sat this one out (deferred, stopping, finished)
    book.begin_cycle()
    assert book.waiting(KEY, obj, job, ON_DEMAND, frozenset(), topology=LOCAL_TOPOLOGY) is not first
