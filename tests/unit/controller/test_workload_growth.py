"""A running RayCluster that grows in place (its autoscaler raises a worker group's replicas): the new workers
are placed as the queue's quota and the room allow, promised until they bind, and charged once placed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aisched.controller.workloads.asking import GROWTH_MARK
from aisched.controller.workloads.cycle import WorkloadCycle
from aisched.policy.placement import Placement
from aisched.policy.queueing import MILLI, QueueQuota
from aisched.policy.scheduler import HeldGpus, ScheduleResult, schedule
from aisched.policy.scheduler.results import Admission
from aisched.policy.workloads.model import ADMISSION_GATE, PLACEMENT_ANNOTATION, QUEUE_LABEL, WorkloadKind
from tests.unit.controller.test_workload_cycle import NOW, parts, snapshot

__all__ = ["parts"]  # the fixture, shared with the cycle's tests

RAY = WorkloadKind.RAY_CLUSTER
KEY = "ns/ray@rayclusters.ray.io"


def a_raycluster(workers: int, *, admitted_on: list[str]) -> dict[str, Any]:
    """A RayCluster of one 2-GPU worker group scaled to WORKERS, admitted onto ADMITTED_ON (one node per worker)."""
    record = {"nodes": admitted_on, "gpusPerPod": 2, "queue": "team", "admittedAt": NOW.isoformat(), "generation": 1}
    worker = {"name": "ray-worker", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "ray",
            "namespace": "ns",
            "uid": "u",
            "labels": {QUEUE_LABEL: "team"},
            "annotations": {PLACEMENT_ANNOTATION: json.dumps(record)},
        },
        "spec": {
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "x"}]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": workers,
                    "minReplicas": 1,
                    "maxReplicas": 8,
                    "template": {"spec": {"containers": [worker]}},
                }
            ],
        },
    }


def a_worker(name: str, *, node: str | None = None) -> dict[str, Any]:
    """A worker pod KubeRay made: gated until placed (NODE None), bound on NODE once placed."""
    spec: dict[str, Any] = {
        "containers": [{"name": "ray-worker", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    }
    if node is None:
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    else:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {QUEUE_LABEL: "team", "ray.io/node-type": "worker", "ray.io/group": "gpu"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "ray", "controller": True}],
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def grown_cluster(cycle: WorkloadCycle, *, workers: int, placed: dict[str, str]) -> None:
    """The cluster admitted with two workers on n1 and n2, now at WORKERS, PLACED of them bound (name: node)."""
    cycle.book.object_seen(RAY, a_raycluster(workers, admitted_on=["n1", "n2"]))
    for i in range(workers):
        name = f"ray-gpu-{i}"
        cycle.book.pod_seen(a_worker(name, node=placed.get(name)))


@pytest.mark.asyncio
async def test_workers_a_running_raycluster_grows_by_are_asked_as_replicas_and_promised_where_placed(
    parts: Any,
) -> None:
    cycle, api, _events, in_flight = parts
    grown_cluster(cycle, workers=3, placed={"ray-gpu-0": "n1", "ray-gpu-1": "n2"})
    asked = cycle.ask(snapshot(), NOW)
    gang, growth = asked.requests
    assert gang.key == KEY and gang.placement is not None and gang.placement.nodes == ("n1", "n2")
    assert (growth.key, growth.replicas, growth.min_replicas, growth.replica_set) == (KEY + GROWTH_MARK, 1, 1, True)
    assert growth.placement is None and asked.held == ()  # nothing grown is placed yet
    placement = Placement.of_nodes(("n1",), 2, snapshot())
    await cycle.carry_out(asked, ScheduleResult(admitted=(Admission(growth.key, placement),)), NOW)
    assert api.placed == [("ray-gpu-2", "n1")]
    assert api.patches == []  # its record is what it was admitted with: the grown worker is no part of it
    assert in_flight.by_node() == {"n1": 2}  # promised until it binds
    placing = cycle.ask(snapshot(), NOW)
    assert [r.key for r in placing.requests] == [KEY]
    assert placing.held == (HeldGpus("team", 2 * MILLI),)  # charged from the moment it is placed


def test_a_grown_worker_that_binds_stays_charged_and_one_scaled_away_frees_its_charge(parts: Any) -> None:
    cycle, _api, _events, _in_flight = parts
    grown_cluster(cycle, workers=3, placed={"ray-gpu-0": "n1", "ray-gpu-1": "n2", "ray-gpu-2": "n1"})
    asked = cycle.ask(snapshot(), NOW)
    assert [r.key for r in asked.requests] == [KEY] and asked.held == (HeldGpus("team", 2 * MILLI),)
    cycle.book.pod_gone("ns", "ray-gpu-2", a_worker("ray-gpu-2", node="n1"))  # the autoscaler scaled it away
    cycle.book.object_seen(RAY, a_raycluster(2, admitted_on=["n1", "n2"]))
    after = cycle.ask(snapshot(), NOW)
    assert [r.key for r in after.requests] == [KEY] and after.held == ()


def test_a_new_worker_takes_a_free_place_of_the_record_before_it_grows_the_cluster(parts: Any) -> None:
    """One of the record's workers was scaled away and the cluster scales up again: its place in the record is
    free, so the new worker takes it (placed as a replacement is) and asks the queue for nothing more."""
    cycle, _api, _events, _in_flight = parts
    grown_cluster(cycle, workers=2, placed={"ray-gpu-0": "n1"})
    asked = cycle.ask(snapshot(), NOW)
    assert [r.key for r in asked.requests] == [KEY] and asked.held == ()


def test_the_queues_quota_bounds_what_a_cluster_grows_by(parts: Any) -> None:
    """A queue of 8 GPUs: the cluster runs 2 workers (4 GPUs) and its autoscaler asks 4 more (8 GPUs) on nodes
    with room for all of them; 2 fit in the quota, and the others stay gated (the autoscaler sees them pending)."""
    cycle, _api, _events, _in_flight = parts
    grown_cluster(cycle, workers=6, placed={"ray-gpu-0": "n1", "ray-gpu-1": "n2"})
    asked = cycle.ask(snapshot(), NOW)
    result = schedule(snapshot(), asked.requests, [QueueQuota("team", 8)], NOW, held_elsewhere=asked.held)
    (grown,) = [a for a in result.admitted if a.key.endswith(GROWTH_MARK)]
    assert len(grown.placement.nodes) == 2 and not result.preempted
