"""A running RayCluster that grows in place (its autoscaler raises a worker group's replicas): the new workers
are placed as the queue's quota and the room allow, promised until they bind, and charged once placed."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from aisched.controller.workloads.asking import GROWTH_MARK
from aisched.controller.workloads.cycle import WorkloadCycle
from aisched.policy.placement import Placement
from aisched.policy.queueing import MILLI, QueueQuota
from aisched.policy.scheduler import JobRequest, ScheduleResult, schedule
from aisched.policy.scheduler.results import Admission
from aisched.policy.workloads.model import ADMISSION_GATE, PLACEMENT_ANNOTATION, QUEUE_LABEL, Workload, WorkloadKind
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
    assert [(h.queue, h.milli, h.replica) for h in placing.held] == [("team", 2 * MILLI, None)]  # charged at once


def test_a_grown_worker_that_binds_stays_charged_and_one_scaled_away_frees_its_charge(parts: Any) -> None:
    cycle, _api, _events, _in_flight = parts
    grown_cluster(cycle, workers=3, placed={"ray-gpu-0": "n1", "ray-gpu-1": "n2", "ray-gpu-2": "n1"})
    asked = cycle.ask(snapshot(), NOW)
    assert [r.key for r in asked.requests] == [KEY]
    (held,) = asked.held
    assert (held.queue, held.milli) == ("team", 2 * MILLI)
    # Bound, it is offered on its own: what its queue borrows through it, a lending queue may take back.
    assert held.replica is not None and (held.replica.service, held.replica.pod) == (KEY, "ray-gpu-2")
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


def test_a_worker_beyond_the_records_place_on_its_node_is_charged_though_another_place_is_free(parts: Any) -> None:
    """The record holds n1 and n2; a worker on n2 was scaled away and the new one was placed beside the other on
    n1. The record's n2 stays its gang's, and the second worker on n1 holds GPUs no record holds: it is charged."""
    cycle, _api, _events, _in_flight = parts
    grown_cluster(cycle, workers=2, placed={"ray-gpu-0": "n1", "ray-gpu-1": "n1"})
    asked = cycle.ask(snapshot(), NOW)
    assert [(h.milli, h.replica.pod if h.replica else None) for h in asked.held] == [(2 * MILLI, "ray-gpu-1")]


@pytest.mark.asyncio
async def test_a_cluster_scaled_down_below_its_record_gives_back_the_places_it_no_longer_wants(parts: Any) -> None:
    """Admitted with workers on n1 and n2, scaled to one by its autoscaler, the worker on n2 gone: the record is
    rewritten to n1 alone (the same run), once per version of the object, and scaling up again is growth."""
    cycle, api, events, _in_flight = parts
    scaled = a_raycluster(1, admitted_on=["n1", "n2"])
    scaled["metadata"]["resourceVersion"] = "7"
    cycle.book.object_seen(RAY, scaled)
    cycle.book.pod_seen(a_worker("ray-gpu-0", node="n1"))
    asked = cycle.ask(snapshot(), NOW)
    (gang,) = asked.requests
    assert gang.placement is not None and gang.placement.nodes == ("n1", "n2")  # charged as it was until rewritten
    assert [(entry.ref[2], nodes) for entry, nodes in asked.shrinks] == [("ray", ("n1",))]
    await cycle.carry_out(asked, ScheduleResult(), NOW)
    await cycle.carry_out(cycle.ask(snapshot(), NOW), ScheduleResult(), NOW)  # the watch has not shown it yet
    ((kind, _ns, name, patch),) = api.patches
    assert (kind, name, set(patch)) == (RAY, "ray", {"metadata"})  # the record only: no suspend, no spec
    assert patch["metadata"]["resourceVersion"] == "7"
    record = json.loads(patch["metadata"]["annotations"][PLACEMENT_ANNOTATION])
    assert (record["nodes"], record["generation"], record["admittedAt"]) == (["n1"], 1, NOW.isoformat())
    assert ("ScaledDown", "scaled down in place: 1 GPU pod place(s) of its admission given back") in events.said

    rewritten = a_raycluster(2, admitted_on=["n1"])  # the watch shows the record, and the autoscaler scales up
    cycle.book.object_seen(RAY, rewritten)
    cycle.book.pod_seen(a_worker("ray-gpu-1"))
    after = cycle.ask(snapshot(), NOW)
    gang, growth = after.requests
    assert gang.placement is not None and gang.placement.nodes == ("n1",) and after.shrinks == ()
    assert (growth.key, growth.replicas) == (KEY + GROWTH_MARK, 1)  # within its queue's quota, as growth is


def test_a_record_still_being_written_is_not_shrunk(parts: Any) -> None:
    cycle, _api, _events, _in_flight = parts
    cycle.book.object_seen(RAY, a_raycluster(1, admitted_on=["n1", "n2"]))
    (entry,) = list(cycle.book)
    assert isinstance(entry.read, Workload) and entry.read.admitted is not None
    pending = replace(entry.read.admitted, nodes=("n1", "n2", "n3"), generation=2)
    cycle.admissions._written[entry.read.key] = pending
    assert cycle.ask(snapshot(), NOW).shrinks == ()


def a_deployment_on(nodes: list[str], queue: str = "team") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A 2-GPU vLLM Deployment of QUEUE and its replicas' pods, bound one on each of NODES."""
    worker = a_worker("x")["spec"]["containers"]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "ns", "uid": "u", "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "replicas": len(nodes),
            "selector": {"matchLabels": {"app": "vllm"}},
            "template": {"spec": {"containers": worker}},
        },
    }
    pods = []
    for i, node in enumerate(nodes):
        pod = a_worker(f"vllm-abc-{i}", node=node)
        pod["metadata"]["labels"] = {QUEUE_LABEL: queue, "pod-template-hash": "abc"}
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-abc", "controller": True}
        ]
        pods.append(pod)
    return deployment, pods


@pytest.mark.asyncio
async def test_a_model_servers_replicas_that_borrow_are_reclaimed_by_the_lending_queue(parts: Any) -> None:
    """`team` (nominal 0) borrows all 16 GPUs of its cohort through 8 replicas; `lender`'s 4-GPU gang, within
    its nominal 8, takes back two replicas: deleted (their controller makes them again, gated, to wait for
    quota), told on the Deployment, and never offered again while their deletes are on their way."""
    cycle, _api, events, _in_flight = parts
    deployment, pods = a_deployment_on(["n1"] * 4 + ["n2"] * 4)
    cycle.book.object_seen(WorkloadKind.DEPLOYMENT, deployment)
    for pod in pods:
        cycle.book.pod_seen(pod)
    cluster = snapshot()
    cluster.allocate({"n1": 8, "n2": 8})  # what the replicas hold, as the inventory says
    asked = cycle.ask(cluster, NOW)
    quotas = [QueueQuota("team", 0, cohort="c", borrowing_limit=16), QueueQuota("lender", 8, cohort="c")]
    lender = JobRequest(key="ns/urgent", queue="lender", priority=0, created=NOW, gpus_per_replica=2, replicas=2)
    result = schedule(cluster, [*asked.requests, lender], quotas, NOW, held_elsewhere=asked.held)
    assert [a.key for a in result.admitted] == ["ns/urgent"]
    reclaimed = sorted(r.pod for r in result.reclaimed)
    assert len(reclaimed) == 2 and all(r.service == "ns/vllm@deployments.apps" for r in result.reclaimed)
    await cycle.carry_out(asked, result, NOW)
    assert sorted(events.deleted) == reclaimed
    told = [message for reason, message in events.said if reason == "Reclaimed"]
    assert len(told) == 2 and all("lending queue lender" in m and "urgent" not in m for m in told)
    again = cycle.ask(cluster, NOW)
    offered = {h.replica.pod for h in again.held if h.replica is not None}
    assert offered.isdisjoint(reclaimed) and sum(h.milli for h in again.held) == 16 * MILLI  # charged till gone
