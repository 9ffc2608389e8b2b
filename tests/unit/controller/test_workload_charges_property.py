"""For any interleaving of pod writes, a queue is charged at least what the API server says its pods hold.

Issue #37's per-queue half of the holdings property, for the workloads whose pods come and go one by
one: a model server's replicas (a Deployment) and the workers a running RayCluster grows by. The
tenant may also delete a workload's object (its pods then drain) and the operator may restart at any
point, finding what the API server lists and nothing of its own memory. Its
controller and the operator write the pods (made gated, placed, bound by kube-scheduler, finished,
deleted, terminating); the tenant's hand shows in how many there are and when. After every write the
cycle's ask must charge each queue (its running gangs' placements plus the GPUs held one by one) at
least the GPUs that bound, unfinished pods of its workloads hold, as kube-scheduler counts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.controller.in_flight import InFlightPlacements
from aisched.controller.tenancy import TenancyBook
from aisched.controller.workloads.book import WorkloadBook
from aisched.controller.workloads.cycle import WorkloadCycle
from aisched.policy.cluster import ClusterSnapshot, local_node
from aisched.policy.queueing import MILLI
from aisched.policy.workloads.model import (
    ADMISSION_GATE,
    CHARGED_QUEUE_LABEL,
    PLACEMENT_ANNOTATION,
    QUEUE_LABEL,
    WorkloadKind,
)
from tests.builders import a_queue

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
NODES = ("n1", "n2", "n3")
PODS = tuple(f"p{i}" for i in range(6))
GPUS = 2
RECORD_NODES = ("n1", "n2")
"""Where the RayCluster was admitted: one worker on each."""
MIG_PROFILE = "1g.10gb"
OWNERS = ("vllm", "ray", "mig")
REPLICA_SETS = {"vllm": ("a", "vllm-abc"), "mig": ("c", "mig-def")}
"""The Deployments: their queue, and the ReplicaSet that makes their pods."""


@dataclass(frozen=True)
class PodWrite:
    owner: str  # "vllm" (a Deployment of queue a), "ray" (a RayCluster of queue b), "mig" (MIG replicas of queue c)
    name: str
    state: str  # "gated", "pinned" (ungated, node set, not bound yet), "bound", "succeeded", "terminating"
    node: str


@dataclass(frozen=True)
class PodDelete:
    owner: str
    name: str


pod_writes = st.builds(
    PodWrite,
    owner=st.sampled_from(OWNERS),
    name=st.sampled_from(PODS),
    state=st.sampled_from(("gated", "pinned", "bound", "succeeded", "terminating")),
    node=st.sampled_from(NODES),
)


@dataclass(frozen=True)
class ObjectDeleted:
    """The tenant deletes the workload's object: the garbage collector deletes its pods, which drain."""

    owner: str


@dataclass(frozen=True)
class Restart:
    """The operator restarts: a fresh book, fed what the API server lists (the objects left, every pod), its
    watches' first lists in either order."""

    pods_first: bool = False


deletes = st.builds(PodDelete, owner=st.sampled_from(OWNERS), name=st.sampled_from(PODS))
object_deletes = st.builds(ObjectDeleted, owner=st.sampled_from(OWNERS))
restarts = st.builds(Restart, pods_first=st.booleans())
writes = st.lists(st.one_of(pod_writes, deletes, object_deletes, restarts), min_size=1, max_size=25)


def template(owner: str = "vllm") -> dict[str, Any]:
    asked = {f"nvidia.com/mig-{MIG_PROFILE}": "1"} if owner == "mig" else {"nvidia.com/gpu": str(GPUS)}
    return {"spec": {"containers": [{"name": "m", "image": "x", "resources": {"limits": asked}}]}}


def deployment(owner: str) -> dict[str, Any]:
    queue, _ = REPLICA_SETS[owner]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": owner, "namespace": "ns", "uid": f"u-{owner}", "labels": {QUEUE_LABEL: queue}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": owner}}, "template": template(owner)},
    }


def raycluster() -> dict[str, Any]:
    record = {
        "nodes": list(RECORD_NODES),
        "gpusPerPod": GPUS,
        "queue": "b",
        "admittedAt": NOW.isoformat(),
        "generation": 1,
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "ray",
            "namespace": "ns",
            "uid": "u2",
            "labels": {QUEUE_LABEL: "b"},
            "annotations": {PLACEMENT_ANNOTATION: json.dumps(record)},
        },
        "spec": {
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head", "image": "x"}]}}},
            "workerGroupSpecs": [
                {"groupName": "gpu", "replicas": 4, "minReplicas": 1, "maxReplicas": 8, "template": template()}
            ],
        },
    }


def pod_object(write: PodWrite) -> dict[str, Any]:
    spec: dict[str, Any] = template(write.owner)["spec"]
    metadata: dict[str, Any] = {"name": pod_name(write.owner, write.name), "namespace": "ns"}
    if write.owner in REPLICA_SETS:
        queue, replica_set = REPLICA_SETS[write.owner]
        metadata["labels"] = {QUEUE_LABEL: queue, "pod-template-hash": replica_set.rpartition("-")[2]}
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set, "controller": True}
        ]
    else:
        metadata["labels"] = {QUEUE_LABEL: "b", "ray.io/node-type": "worker", "ray.io/group": "gpu"}
        metadata["ownerReferences"] = [
            {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "ray", "controller": True}
        ]
    status: dict[str, Any] = {"phase": "Pending"}
    if write.state == "gated":
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    else:  # the operator's write that placed it: pinned, ungated, labelled with the queue it is charged to
        spec["nodeSelector"] = {"kubernetes.io/hostname": write.node}
        metadata["labels"][CHARGED_QUEUE_LABEL] = metadata["labels"][QUEUE_LABEL]
    if write.state in ("bound", "succeeded", "terminating"):
        spec["nodeName"] = write.node
        status = {"phase": "Succeeded" if write.state == "succeeded" else "Running"}
    if write.state == "terminating":
        metadata["deletionTimestamp"] = NOW.isoformat()
    return {"metadata": metadata, "spec": spec, "status": status}


def started(
    queues: dict[str, dict[str, Any]],
    objects: dict[str, tuple[WorkloadKind, dict[str, Any]]],
    pods: dict[str, dict[str, Any]],
    *,
    pods_first: bool = False,
) -> WorkloadCycle:
    """A cycle as an operator (re)started now has it: the objects and pods the API server lists."""
    cycle = WorkloadCycle(
        book=WorkloadBook(),
        api=None,  # type: ignore[arg-type]  # nothing is written: only what each cycle asks is read
        kube=None,  # type: ignore[arg-type]
        in_flight=InFlightPlacements(),
        tenancy=TenancyBook(),
        queue_object=queues.get,
    )
    if pods_first:
        for obj in pods.values():
            cycle.book.pod_seen(obj)
    for kind, obj in objects.values():
        cycle.book.object_seen(kind, obj)
    if not pods_first:
        for obj in pods.values():
            cycle.book.pod_seen(obj)
    return cycle


def owned_by(pod: dict[str, Any], owner: str) -> bool:
    return str(pod["metadata"]["name"]).startswith(pod_name(owner, ""))


def pod_name(owner: str, name: str) -> str:
    return f"{REPLICA_SETS[owner][1]}-{name}" if owner in REPLICA_SETS else f"{owner}-{name}"


def held_as_the_api_server_says(pods: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Per queue, in thousandths: the GPUs of its workloads' pods bound to a node and not finished (a pod on its
    way out holds its GPUs until it is gone); a MIG instance, its share of the GPU's seven compute slices."""
    held = {"a": 0, "b": 0, "c": 0}
    for pod in pods.values():
        if pod["spec"].get("nodeName") and pod["status"]["phase"] not in ("Succeeded", "Failed"):
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            whole = int(limits.get("nvidia.com/gpu", 0)) * MILLI
            held[pod["metadata"]["labels"][QUEUE_LABEL]] += whole or -(-MILLI // 7)
    return held


Write = PodWrite | PodDelete | ObjectDeleted | Restart


def applied(
    write: Write,
    cycle: WorkloadCycle,
    queues: dict[str, dict[str, Any]],
    objects: dict[str, tuple[WorkloadKind, dict[str, Any]]],
    pods: dict[str, dict[str, Any]],
) -> WorkloadCycle:
    """WRITE done to the API server's objects and PODS, and shown to CYCLE; the cycle that goes on from it."""
    if isinstance(write, Restart):
        return started(queues, objects, pods, pods_first=write.pods_first)
    if isinstance(write, ObjectDeleted):
        if (deleted := objects.pop(write.owner, None)) is not None:
            cycle.book.object_gone(deleted[0], "ns", write.owner)
            for name, obj in [(n, o) for n, o in pods.items() if owned_by(o, write.owner)]:
                if obj["spec"].get("schedulingGates"):  # never placed: gone at once
                    cycle.book.pod_gone("ns", name, pods.pop(name))
                else:
                    obj["metadata"]["deletionTimestamp"] = NOW.isoformat()
                    cycle.book.pod_seen(obj)
    elif isinstance(write, PodWrite):
        if write.owner in objects:  # no controller makes or changes a deleted workload's pods
            obj = pod_object(write)
            pods[obj["metadata"]["name"]] = obj
            cycle.book.pod_seen(obj)
    elif (name := pod_name(write.owner, write.name)) in pods:
        cycle.book.pod_gone("ns", name, pods.pop(name))
    return cycle


@settings(max_examples=150, deadline=None)
@given(writes)
def test_any_interleaving_of_pod_writes_leaves_each_queue_charged_at_least_what_its_pods_hold(
    sequence: list[Write],
) -> None:
    queues = {name: a_queue(name, nominal_gpus=32).obj() for name in ("a", "b", "c")}
    objects = {
        "vllm": (WorkloadKind.DEPLOYMENT, deployment("vllm")),
        "mig": (WorkloadKind.DEPLOYMENT, deployment("mig")),
        "ray": (WorkloadKind.RAY_CLUSTER, raycluster()),
    }
    pods: dict[str, dict[str, Any]] = {}
    cycle = started(queues, objects, pods)
    snapshot = ClusterSnapshot([local_node(n, 8, rack="r1", zone="z") for n in NODES])
    for write in sequence:
        cycle = applied(write, cycle, queues, objects, pods)
        asked = cycle.ask(snapshot, NOW)
        assert not asked.stops  # nothing here is a reason to stop either workload
        charged = {"a": 0, "b": 0, "c": 0}
        for part in asked.held:
            charged[part.queue] += part.milli
        for request in asked.requests:
            charged[request.queue] += request.held_milli  # the RayCluster's gang, where its record says
        holding = held_as_the_api_server_says(pods)
        assert all(charged[q] >= holding[q] for q in holding), (write, charged, holding)
