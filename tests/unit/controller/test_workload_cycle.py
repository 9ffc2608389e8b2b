"""The other kinds' workloads in the cycle: asked, admitted in one write, pods placed as a gang, stopped.

The API is a recording stand-in for `kube.workload_api.WorkloadApi` (the integration tier runs the real
one against a real API server); the book, the cycle and the in-flight record are the real ones.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aisched.api.sharing import GpuShare
from aisched.controller.cluster_state import ClusterState
from aisched.controller.in_flight import InFlightPlacements, Promised
from aisched.controller.tenancy import TenancyBook
from aisched.controller.workloads.admitting import admission_promise
from aisched.controller.workloads.book import WorkloadBook
from aisched.controller.workloads.controller import WorkloadController
from aisched.controller.workloads.cycle import WorkloadCycle
from aisched.controller.workloads.pods import read_workload_pod
from aisched.kube.inventory import Inventory
from aisched.kube.workload_api import PodGroupOwner, PodGroupTakenError
from aisched.policy.cluster import ClusterSnapshot, local_node
from aisched.policy.placement import Placement
from aisched.policy.scheduler import ScheduleResult
from aisched.policy.scheduler.results import Admission, Preemption
from aisched.policy.sharing.charge import replica_milli
from aisched.policy.workloads.model import (
    ADMISSION_GATE,
    CHARGED_QUEUE_LABEL,
    MIN_PODS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    Workload,
    WorkloadKind,
)
from aisched.settings import Settings
from tests.builders import a_queue
from tests.unit.controller.kube_double import KubeDouble

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
MIG = "nvidia.com/mig-1g.10gb"
JOB = WorkloadKind.BATCH_JOB


class RecordingApi:
    def __init__(self) -> None:
        self.patches: list[tuple[WorkloadKind, str, str, dict[str, Any]]] = []
        self.placed: list[tuple[str, str | None]] = []
        self.charged_to: dict[str, str] = {}
        """The queue each placed pod was labelled with."""

    async def patch_object(self, kind: WorkloadKind, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        self.patches.append((kind, namespace, name, patch))
        return True

    async def place_pod(
        self, namespace: str, name: str, node: str | None, gates: tuple[str, ...], *, queue: str, **_: bool
    ) -> None:
        self.placed.append((name, node))
        self.charged_to[name] = queue


class Events:
    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []
        self.deleted: list[str] = []

    def post_event(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.said.append((reason, message))

    async def delete_pod(self, namespace: str, name: str) -> None:
        self.deleted.append(name)


def a_job(name: str = "train", *, pods: int = 2, gpus: int = 2, queue: str = "team", **meta: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {QUEUE_LABEL: queue}, **meta},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "suspend": True,
            "template": {"spec": {"containers": [container]}},
        },
    }


def a_pod(
    name: str, job: str, index: int, *, node: str | None = None, gated: bool = True, gpus: int = 2
) -> dict[str, Any]:
    container = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    spec: dict[str, Any] = {"containers": [container]}
    if gated:
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {QUEUE_LABEL: "team"},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "controller": True}],
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def a_job_admitted_on(nodes: list[str]) -> dict[str, Any]:
    """A Job the operator admitted onto NODES (its record on it) and unsuspended."""
    record = {"nodes": nodes, "gpusPerPod": 2, "queue": "team", "admittedAt": NOW.isoformat(), "generation": 1}
    job = a_job(pods=len(nodes), annotations={PLACEMENT_ANNOTATION: json.dumps(record)})
    job["spec"]["suspend"] = False
    return job


@pytest.fixture
def parts() -> tuple[WorkloadCycle, RecordingApi, Events, InFlightPlacements]:
    api, events, in_flight = RecordingApi(), Events(), InFlightPlacements()
    queues = {"team": a_queue("team", nominal_gpus=8).obj()}
    cycle = WorkloadCycle(
        book=WorkloadBook(),
        api=api,  # type: ignore[arg-type]
        kube=events,  # type: ignore[arg-type]
        in_flight=in_flight,
        tenancy=TenancyBook(),
        queue_object=queues.get,
    )
    return cycle, api, events, in_flight


def snapshot() -> ClusterSnapshot:
    return ClusterSnapshot([local_node("n1", 8, rack="r1", zone="z"), local_node("n2", 8, rack="r1", zone="z")])


@pytest.mark.asyncio
async def test_a_held_job_asks_and_is_admitted_in_one_write_that_records_and_unsuspends(parts: Any) -> None:
    cycle, api, _events, in_flight = parts
    cycle.book.object_seen(JOB, a_job())
    asked = cycle.ask(snapshot(), NOW)
    (request,) = asked.requests
    assert (request.key, request.replicas, request.gpus_per_replica, request.placement) == (
        "ns/train@jobs.batch",
        2,
        2,
        None,
    )
    placement = Placement.of_nodes(("n1", "n2"), 2, snapshot())
    await cycle.carry_out(asked, ScheduleResult(admitted=(Admission(request.key, placement),)), NOW)
    ((kind, _ns, name, patch),) = api.patches
    assert (kind, name, patch["spec"]) == (JOB, "train", {"suspend": False})
    record = json.loads(patch["metadata"]["annotations"][PLACEMENT_ANNOTATION])
    assert (record["nodes"], record["gpusPerPod"], record["queue"]) == (["n1", "n2"], 2, "team")
    assert in_flight.by_node() == {"n1": 2, "n2": 2}  # promised until the watch shows the record


@pytest.mark.asyncio
async def test_the_recorded_gang_holds_its_nodes_until_its_pods_bind_and_its_gates_come_off_together(
    parts: Any,
) -> None:
    cycle, api, _events, _in_flight = parts
    cycle.book.object_seen(JOB, a_job_admitted_on(["n1", "n2"]))
    assert cycle.uncreated_holds().whole == {"n1": 2, "n2": 2}
    (request,) = cycle.ask(snapshot(), NOW).requests
    assert request.placement is not None and request.placement.nodes == ("n1", "n2")
    entry = cycle.book.pod_seen(a_pod("train-1", "train", 1))
    assert entry is not None
    await cycle.placer.place_pods(entry)
    assert api.placed == []  # one of two pods: the gang's gates stay on
    cycle.book.pod_seen(a_pod("train-0", "train", 0))
    await cycle.placer.place_pods(entry)
    assert sorted(api.placed) == [("train-0", "n1"), ("train-1", "n2")]
    cycle.book.pod_seen(a_pod("train-0", "train", 0, node="n1", gated=False))
    assert cycle.uncreated_holds().whole == {"n2": 2}  # the bound pod holds its GPUs in the inventory now


@pytest.mark.asyncio
async def test_a_running_job_whose_queue_label_changes_is_suspended_and_its_record_dropped(parts: Any) -> None:
    cycle, api, events, _in_flight = parts
    record = {"nodes": ["n1"], "gpusPerPod": 2, "queue": "team", "admittedAt": NOW.isoformat(), "generation": 1}
    job = a_job(pods=1, queue="other", annotations={PLACEMENT_ANNOTATION: json.dumps(record)})
    job["spec"]["suspend"] = False
    cycle.book.object_seen(JOB, job)
    asked = cycle.ask(snapshot(), NOW)
    assert not asked.requests
    await cycle.carry_out(asked, ScheduleResult(), NOW)
    ((_kind, _ns, _name, patch),) = api.patches
    assert patch == {"metadata": {"annotations": {PLACEMENT_ANNOTATION: None}}, "spec": {"suspend": True}}
    assert events.said[-1][0] == "QueueChanged"


@pytest.mark.asyncio
async def test_a_job_whose_label_was_removed_while_it_ran_is_stopped(parts: Any) -> None:
    cycle, api, _events, _in_flight = parts
    record = {"nodes": ["n1"], "gpusPerPod": 2, "queue": "team", "admittedAt": NOW.isoformat(), "generation": 1}
    job = a_job(pods=1, annotations={PLACEMENT_ANNOTATION: json.dumps(record)})
    job["metadata"]["labels"] = {}
    cycle.book.object_seen(JOB, job)
    asked = cycle.ask(snapshot(), NOW)
    await cycle.carry_out(asked, ScheduleResult(), NOW)
    assert api.patches[0][3]["spec"] == {"suspend": True}


@pytest.mark.asyncio
async def test_a_preempted_job_is_suspended_and_an_unlabelled_one_is_kept_nowhere(parts: Any) -> None:
    cycle, api, _events, _in_flight = parts
    plain = a_job("plain")
    plain["metadata"]["labels"] = {}
    assert cycle.book.object_seen(JOB, plain) is None
    record = {"nodes": ["n1"], "gpusPerPod": 2, "queue": "team", "admittedAt": NOW.isoformat(), "generation": 1}
    job = a_job(pods=1, annotations={PLACEMENT_ANNOTATION: json.dumps(record)})
    job["spec"]["suspend"] = False
    cycle.book.object_seen(JOB, job)
    asked = cycle.ask(snapshot(), NOW)
    key = "ns/train@jobs.batch"
    await cycle.carry_out(
        asked, ScheduleResult(preempted=(Preemption(key, "ns/urgent", "preempted by ns/urgent"),)), NOW
    )
    assert api.patches[0][3]["spec"] == {"suspend": True}
    assert list(cycle.book.entries) == [(JOB, "ns", "train")]


def test_the_record_seen_settles_the_admission_promise() -> None:
    in_flight = InFlightPlacements()
    placement = Placement.of_nodes(("n1",), 2, snapshot())
    in_flight.promise(admission_promise("ns/train@jobs.batch"), Promised.of(placement))
    assert in_flight.by_node() == {"n1": 2}
    in_flight.settle(admission_promise("ns/train@jobs.batch"))
    assert in_flight.by_node() == {}
    assert isinstance(WorkloadBook().object_seen(JOB, a_job()).read, Workload)  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_an_admitted_job_whose_pods_never_come_is_stopped_and_asked_again_only_after_a_backoff(
    parts: Any,
) -> None:
    """Its controller is not running (or its pods cannot bind): the GPUs it was given are not held for good."""
    cycle, api, events, _in_flight = parts
    record = {"nodes": ["n1"], "gpusPerPod": 2, "queue": "team", "admittedAt": NOW.isoformat(), "generation": 1}
    job = a_job(pods=1, annotations={PLACEMENT_ANNOTATION: json.dumps(record)})
    job["spec"]["suspend"] = False
    cycle.book.object_seen(JOB, job)
    assert cycle.ask(snapshot(), NOW + timedelta(seconds=299)).requests  # still within the bound: charged
    late = NOW + timedelta(seconds=301)
    asked = cycle.ask(snapshot(), late)
    assert not asked.requests and [s.reason for s in asked.stops] == ["PodsNotReady"]
    await cycle.carry_out(asked, ScheduleResult(), late)
    assert api.patches[-1][3]["spec"] == {"suspend": True}
    assert "is its controller installed and running?" in events.said[-1][1]
    # Suspended again, with no record: it waits out its backoff before it asks again.
    job["spec"]["suspend"] = True
    del job["metadata"]["annotations"][PLACEMENT_ANNOTATION]
    cycle.book.object_seen(JOB, job)
    assert not cycle.ask(snapshot(), late + timedelta(seconds=59)).requests
    assert cycle.ask(snapshot(), late + timedelta(seconds=61)).requests


@pytest.mark.asyncio
async def test_an_elastic_job_admitted_at_fewer_pods_is_told_its_parallelism_in_the_same_write(parts: Any) -> None:
    cycle, api, _events, _in_flight = parts
    cycle.book.object_seen(JOB, a_job(pods=4, annotations={MIN_PODS_ANNOTATION: "2"}))
    asked = cycle.ask(snapshot(), NOW)
    (request,) = asked.requests
    assert (request.replicas, request.min_replicas) == (4, 2)
    placement = Placement.of_nodes(("n1", "n2"), 2, snapshot())
    await cycle.carry_out(asked, ScheduleResult(admitted=(Admission(request.key, placement),)), NOW)
    assert api.patches[0][3]["spec"] == {"suspend": False, "parallelism": 2}


def test_a_running_workload_is_never_resized_and_a_job_whose_pods_came_up_is_never_overdue(parts: Any) -> None:
    cycle, _api, _events, _in_flight = parts
    record = {"nodes": ["n1"], "gpusPerPod": 2, "queue": "team", "admittedAt": NOW.isoformat(), "generation": 1}
    job = a_job(pods=1, annotations={PLACEMENT_ANNOTATION: json.dumps(record), MIN_PODS_ANNOTATION: "1"})
    job["spec"]["suspend"] = False
    cycle.book.object_seen(JOB, job)
    cycle.book.pod_seen(a_pod("train-0", "train", 0, node="n1", gated=False))
    (request,) = cycle.ask(snapshot(), NOW).requests
    assert request.min_replicas is None and request.max_replicas is None
    # Its pod finished (an index done, the next not made yet), long after: still charged, not stopped.
    done = a_pod("train-0", "train", 0, node="n1", gated=False)
    done["status"]["phase"] = "Succeeded"
    cycle.book.pod_seen(done)
    later = cycle.ask(snapshot(), NOW + timedelta(hours=1))
    assert later.requests and not later.stops


def test_an_older_copy_of_a_pod_never_overwrites_the_newer_one_the_watch_showed() -> None:
    """A relist's page read before the watch's latest event: the pod stays bound, and a deleted one stays gone."""
    settings = Settings()
    controller = WorkloadController(
        KubeDouble().client,
        ClusterState(Inventory(settings)),
        queue_object=lambda _name: None,
        wake_cycle=lambda: None,
    )
    newer = a_pod("train-0", "train", 0, node="n1", gated=False)
    newer["metadata"]["resourceVersion"] = "10"
    older = a_pod("train-0", "train", 0)
    older["metadata"]["resourceVersion"] = "5"
    controller.pod_changed(newer, deleted=False)
    controller.pod_changed(older, deleted=False)
    (entry,) = controller.book
    assert entry.pods["train-0"].bound and not entry.pods["train-0"].gated
    controller.pod_changed({**newer, "metadata": {**newer["metadata"], "resourceVersion": "12"}}, deleted=True)
    controller.pod_changed(newer, deleted=False)  # listed at 10, before the delete at 12
    assert not any(e.pods for e in controller.book)


def test_a_relist_forgets_pods_and_objects_deleted_while_the_watch_was_away_and_keeps_newer_ones() -> None:
    """A watch that reconnects never reports what went meanwhile: the relist's lists must, and must not
    forget what was made after they were read."""
    settings = Settings()
    controller = WorkloadController(
        KubeDouble().client,
        ClusterState(Inventory(settings)),
        queue_object=lambda _name: None,
        wake_cycle=lambda: None,
    )
    job = a_job(pods=2)
    job["metadata"]["resourceVersion"] = "3"
    controller.object_seen(JOB, job)
    for index, version in ((0, "4"), (1, "9")):
        pod = a_pod(f"train-{index}", "train", index, node="n1", gated=False)
        pod["metadata"]["resourceVersion"] = version
        controller.pod_changed(pod, deleted=False)
    # A list read at 6 has neither pod: train-0 went unseen; train-1 came after the list was read.
    controller.pods_relisted([], "6")
    (entry,) = controller.book
    assert sorted(entry.pods) == ["train-1"]
    controller.objects_relisted(JOB, [(entry.ref[1], "train")], "6")  # still there: kept
    assert controller.book.get(entry.ref) is not None and controller.book.get(entry.ref).seen  # type: ignore[union-attr]
    controller.objects_relisted(JOB, [], "7")  # gone: its object forgotten, its live pod still counted
    (entry,) = controller.book
    assert not entry.seen and entry.read is None and sorted(entry.pods) == ["train-1"]
    controller.pods_relisted([], "10")
    assert not list(controller.book)


@pytest.mark.asyncio
async def test_an_admission_not_seen_yet_is_charged_as_written_and_never_asked_for_again(parts: Any) -> None:
    """The next cycle can come before the watch shows the record: it must not admit the Job a second time
    (elsewhere), which left pods pinned to nodes no record held (the workloads benchmark saw it)."""
    cycle, api, _events, _in_flight = parts
    cycle.book.object_seen(JOB, a_job())
    asked = cycle.ask(snapshot(), NOW)
    (request,) = asked.requests
    placement = Placement.of_nodes(("n1", "n1"), 2, snapshot())
    await cycle.carry_out(asked, ScheduleResult(admitted=(Admission(request.key, placement),)), NOW)
    (again,) = cycle.ask(snapshot(), NOW).requests  # the watch has not shown the record yet
    assert again.placement is not None and again.placement.nodes == ("n1", "n1")
    # Its pods come before the record's event: they go where the record written says.
    entry = cycle.book.pod_seen(a_pod("train-0", "train", 0))
    cycle.book.pod_seen(a_pod("train-1", "train", 1))
    assert entry is not None
    await cycle.placer.place_pods(entry)
    await cycle.placer.place_pods(entry)  # a second pass before the ungating is seen places nothing twice
    assert sorted(api.placed) == [("train-0", "n1"), ("train-1", "n1")]


RECORD = {"nodes": ["n1"], "gpusPerPod": 2, "queue": "team", "admittedAt": NOW.isoformat(), "generation": 1}


def a_running_job(**meta: Any) -> dict[str, Any]:
    job = a_job(pods=1, annotations={PLACEMENT_ANNOTATION: json.dumps(RECORD), **meta.pop("annotations", {})}, **meta)
    job["spec"]["suspend"] = False
    return job


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda job: job["metadata"]["annotations"].update({PRIORITY_ANNOTATION: "abc"}), "InvalidWorkload"),
        (
            lambda job: job["metadata"]["labels"].update({QUEUE_LABEL: "team"}) or job["spec"].update(suspend=True),
            "Suspended",
        ),
    ],
    ids=["unreadable-annotation", "suspended-by-its-user"],
)
async def test_a_running_job_that_can_no_longer_be_charged_as_it_runs_is_stopped(
    parts: Any, edit: Any, reason: str
) -> None:
    """Hostile tenant (#36): an annotation edited into garbage made a running Job a refusal, charged nothing
    while its pods ran; one suspended by its user kept its record charged and reserved."""
    cycle, api, _events, _in_flight = parts
    job = a_running_job()
    edit(job)
    cycle.book.object_seen(JOB, job)
    asked = cycle.ask(snapshot(), NOW)
    assert not asked.requests and [s.reason for s in asked.stops] == [reason]
    await cycle.carry_out(asked, ScheduleResult(), NOW)
    assert api.patches[-1][3]["spec"] == {"suspend": True}


@pytest.mark.asyncio
async def test_a_running_job_whose_queue_is_gone_is_stopped(parts: Any) -> None:
    cycle, _api, _events, _in_flight = parts
    cycle.queue_object = lambda _name: None
    cycle.book.object_seen(JOB, a_running_job())
    assert [s.reason for s in cycle.ask(snapshot(), NOW).stops] == ["QueueNotFound"]


@pytest.mark.asyncio
async def test_a_pod_that_asks_more_than_its_set_is_never_placed(parts: Any) -> None:
    """A pod made to look like the Job's (its owner named) asking 8 GPUs where the Job's ask 2 stays gated."""
    cycle, api, _events, _in_flight = parts
    cycle.book.object_seen(JOB, a_running_job())
    entry = cycle.book.pod_seen(a_pod("forged", "train", 0, gpus=8))
    assert entry is not None
    await cycle.placer.place_pods(entry)
    assert api.placed == []


def test_a_pod_whose_index_is_no_ascii_number_is_read_without_an_error() -> None:
    """'²' passes str.isdigit and int() refuses it: it crashed the pod watch and the start-up relist for good."""
    pod = a_pod("odd", "train", 0)
    pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = "\u00b2"
    read = read_workload_pod(pod)
    assert read is not None and read.index is None


@pytest.mark.asyncio
async def test_a_replica_pod_placed_and_never_bound_is_given_back_and_deleted(parts: Any) -> None:
    """A model server's replica pinned to a node it never binds to: its promise goes after the bound."""
    cycle, _api, events, in_flight = parts
    labels = {"app": "vllm"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "ns", "uid": "u", "labels": {QUEUE_LABEL: "team"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": a_job()["spec"]["template"]},
    }
    cycle.book.object_seen(WorkloadKind.DEPLOYMENT, deployment)
    pod = a_pod("vllm-abc-1", "x", 0)
    pod["metadata"]["labels"]["pod-template-hash"] = "abc"
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-abc", "controller": True}
    ]
    entry = cycle.book.pod_seen(pod)
    assert entry is not None
    asked = cycle.ask(snapshot(), NOW)
    (request,) = asked.requests
    placement = Placement.of_nodes(("n1",), 2, snapshot())
    await cycle.carry_out(asked, ScheduleResult(admitted=(Admission(request.key, placement),)), NOW)
    assert in_flight.by_node() == {"n1": 2}
    later = NOW + timedelta(seconds=cycle.pods_ready_seconds + 1)
    stuck = cycle.ask(snapshot(), later)
    await cycle.carry_out(stuck, ScheduleResult(), later)
    assert in_flight.by_node() == {} and events.deleted == ["vllm-abc-1"]


@pytest.mark.asyncio
async def test_an_admission_is_written_only_on_the_object_it_was_decided_on(parts: Any) -> None:
    """A template edited between the decision and its write (its GPUs raised) must not be admitted as it was read."""
    cycle, api, _events, _in_flight = parts
    job = a_job()
    job["metadata"]["resourceVersion"] = "7"
    cycle.book.object_seen(JOB, job)
    asked = cycle.ask(snapshot(), NOW)
    (request,) = asked.requests
    placement = Placement.of_nodes(("n1", "n2"), 2, snapshot())
    await cycle.carry_out(asked, ScheduleResult(admitted=(Admission(request.key, placement),)), NOW)
    assert api.patches[0][3]["metadata"]["resourceVersion"] == "7"


def test_a_running_workloads_request_is_kept_until_its_object_record_or_the_nodes_change(parts: Any) -> None:
    """Each cycle gives a running workload's kept request again; an edit of its object (read again), a new
    record or a snapshot built afresh (nodes changed) asks it anew."""
    cycle, _api, _events, _in_flight = parts
    job = a_running_job()
    cycle.book.object_seen(JOB, job)
    cycle.book.pod_seen(a_pod("train-0", "train", 0, node="n1", gated=False))
    cluster = snapshot()
    (first,) = cycle.ask(cluster, NOW).requests
    (again,) = cycle.ask(cluster.copy(), NOW).requests
    assert again is first  # a copy has the same layout
    (rebuilt,) = cycle.ask(snapshot(), NOW).requests
    assert rebuilt is not first and rebuilt == first
    cycle.book.object_seen(JOB, a_running_job(annotations={"example.com/note": "edited"}))
    (edited,) = cycle.ask(cluster, NOW).requests
    assert edited is not first


@pytest.mark.asyncio
async def test_a_template_resized_while_it_runs_stops_the_workload_and_its_new_pods_are_never_placed(
    parts: Any,
) -> None:
    """A tenant edits a running workload's template to ask more GPUs per pod (a PyTorchJob's or a
    RayCluster's CRD lets it): the record charges what it was admitted with, so a pod made from the new
    template must not be placed on the record's node, and the workload is stopped to be admitted anew."""
    cycle, api, _events, _in_flight = parts
    job = a_job(pods=1, gpus=4, annotations={PLACEMENT_ANNOTATION: json.dumps(RECORD)})  # RECORD: 2 GPUs a pod
    job["spec"]["suspend"] = False
    cycle.book.object_seen(JOB, job)
    entry = cycle.book.pod_seen(a_pod("train-0", "train", 0, gpus=4))
    asked = cycle.ask(snapshot(), NOW)
    assert not asked.requests and [s.reason for s in asked.stops] == ["ResizedWhileRunning"]
    assert "from 2 GPU(s) to 4 GPU(s) per pod" in asked.stops[0].message
    assert entry is not None
    await cycle.placer.place_pods(entry)
    assert api.placed == []
    # At the size it was admitted with, it runs on, charged where its record says.
    cycle.book.object_seen(JOB, a_running_job())
    (request,) = cycle.ask(snapshot(), NOW).requests
    assert request.placement is not None and request.placement.total_gpus == 2


@pytest.mark.asyncio
async def test_a_job_on_a_node_that_announces_its_end_stops_and_resumes_first_of_its_priority_elsewhere(
    parts: Any,
) -> None:
    cycle, api, events, _in_flight = parts
    cycle.book.object_seen(JOB, a_job_admitted_on(["n1", "n2"]))
    asked = cycle.ask(snapshot(), NOW, doomed=frozenset({"n2"}))
    assert not asked.requests
    await cycle.carry_out(asked, ScheduleResult(), NOW)
    ((_kind, _ns, _name, patch),) = api.patches
    assert patch == {"metadata": {"annotations": {PLACEMENT_ANNOTATION: None}}, "spec": {"suspend": True}}
    reason, message = events.said[-1]
    assert reason == "NodeInterrupted" and "n2" in message and "checkpoint" in message
    # Its controller suspended it and its pods are gone: it asks again, off the doomed node, ahead of newcomers.
    suspended = a_job()
    cycle.book.object_seen(JOB, suspended)
    (request,) = cycle.ask(snapshot(), NOW, doomed=frozenset({"n2"})).requests
    assert request.set_back and request.excluded_nodes == {"n2"} and request.placement is None
    placement = Placement.of_nodes(("n1", "n1"), 2, snapshot())
    again = cycle.ask(snapshot(), NOW, doomed=frozenset({"n2"}))
    await cycle.carry_out(again, ScheduleResult(admitted=(Admission(request.key, placement),)), NOW)
    assert not cycle._set_back  # admitted again: a later interruption sets it back anew, not this one


@pytest.mark.asyncio
async def test_a_model_servers_replica_on_a_node_that_announces_its_end_is_deleted_to_be_made_elsewhere(
    parts: Any,
) -> None:
    cycle, _api, events, _in_flight = parts
    labels = {"app": "vllm"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "ns", "uid": "u", "labels": {QUEUE_LABEL: "team"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": a_job()["spec"]["template"]},
    }
    cycle.book.object_seen(WorkloadKind.DEPLOYMENT, deployment)
    for name, node in (("vllm-abc-1", "n1"), ("vllm-abc-2", "n2")):
        pod = a_pod(name, "x", 0, node=node, gated=False)
        pod["metadata"]["labels"]["pod-template-hash"] = "abc"
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-abc", "controller": True}
        ]
        cycle.book.pod_seen(pod)
    asked = cycle.ask(snapshot(), NOW, doomed=frozenset({"n2"}))
    assert sum(h.milli for h in asked.held) == 4000  # both charged until the one going is gone
    await cycle.carry_out(asked, ScheduleResult(), NOW)
    assert events.deleted == ["vllm-abc-2"]
    assert events.said[-1][0] == "ReplicaInterrupted"


def test_a_model_servers_placed_mig_replica_is_charged_its_instances_share(parts: Any) -> None:
    """A replica that asks a MIG instance asks no whole GPU: it is charged what its instance is of a GPU, not 0."""
    cycle, _api, _events, _in_flight = parts
    template = {"spec": {"containers": [{"name": "m", "image": "x", "resources": {"limits": {MIG: "1"}}}]}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "ns", "uid": "u", "labels": {QUEUE_LABEL: "team"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "vllm"}}, "template": template},
    }
    cycle.book.object_seen(WorkloadKind.DEPLOYMENT, deployment)
    pod = a_pod("vllm-abc-1", "x", 0, node="n1", gated=False)
    pod["spec"]["containers"] = template["spec"]["containers"]
    pod["metadata"]["labels"]["pod-template-hash"] = "abc"
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-abc", "controller": True}
    ]
    cycle.book.pod_seen(pod)
    (held,) = cycle.ask(snapshot(), NOW).held
    assert held.milli == replica_milli(GpuShare(mig_profile="1g.10gb"), 1) > 0


class RecordingGroups:
    def __init__(self, *, taken: bool = False) -> None:
        self.made: list[tuple[str, int, int]] = []
        self.taken = taken

    async def ensure(self, namespace: str, name: str, *, min_count: int, owner: PodGroupOwner, run: int) -> bool:
        if self.taken:
            raise PodGroupTakenError(f"PodGroup {name} exists and was not made by aisched")
        assert (owner.kind, owner.name) == ("Job", "train")
        self.made.append((name, min_count, run))
        return True


def in_group(pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["schedulingGroup"] = {"podGroupName": "aisched-job-train"}
    return pod


@pytest.mark.asyncio
@pytest.mark.parametrize("taken", [False, True])
async def test_a_gangs_pod_group_is_made_for_its_run_before_its_gates_come_off_and_never_taken_over(
    taken: bool,
) -> None:
    """Pods named into a PodGroup at creation (the chart's policy, where the cluster serves them): the operator
    makes it once for the run, with as many pods as it places together, before any gate is lifted; one someone
    else made first leaves the gang gated and says so."""
    api, events, groups = RecordingApi(), Events(), RecordingGroups(taken=taken)
    queues = {"team": a_queue("team", nominal_gpus=8).obj()}
    cycle = WorkloadCycle(
        book=WorkloadBook(),
        api=api,  # type: ignore[arg-type]
        kube=events,  # type: ignore[arg-type]
        in_flight=InFlightPlacements(),
        tenancy=TenancyBook(),
        queue_object=queues.get,
        pod_groups=groups,  # type: ignore[arg-type]
    )
    cycle.book.object_seen(JOB, a_job_admitted_on(["n1", "n2"]))
    cycle.book.pod_seen(in_group(a_pod("train-0", "train", 0)))
    entry = cycle.book.pod_seen(in_group(a_pod("train-1", "train", 1)))
    assert entry is not None
    await cycle.placer.place_pods(entry)
    if taken:
        assert api.placed == [] and events.said[-1][0] == "PodGroupTaken"
        return
    assert groups.made == [("aisched-job-train", 2, 1)]
    assert sorted(api.placed) == [("train-0", "n1"), ("train-1", "n2")]
    # A replacement of the same run: its group stands, nothing is made again.
    cycle.book.pod_seen(in_group(a_pod("train-0", "train", 0, node="n1", gated=False)))
    cycle.book.pod_gone("ns", "train-1", a_pod("train-1", "train", 1))
    again = cycle.book.pod_seen(in_group(a_pod("train-1b", "train", 1)))
    assert again is not None
    await cycle.placer.place_pods(again)
    assert groups.made == [("aisched-job-train", 2, 1)] and ("train-1b", "n2") in api.placed


@pytest.mark.parametrize("change", ["deleted", "relabelled", "label removed"])
def test_a_stopped_or_deleted_workloads_draining_pods_stay_charged_where_it_ran(parts: Any, change: str) -> None:
    """A running Job's pods take their termination grace (the tenant sets it) to go, whatever happened to its
    object: its queue stays charged what they hold until they are gone, so that quota is not handed out twice."""
    cycle, _api, _events, _in_flight = parts
    cycle.book.object_seen(JOB, a_job_admitted_on(["n1", "n2"]))
    for index, node in enumerate(("n1", "n2")):
        pod = a_pod(f"train-{index}", "train", index, node=node, gated=False)
        pod["metadata"]["deletionTimestamp"] = NOW.isoformat()
        cycle.book.pod_seen(pod)
    cycle.ask(snapshot(), NOW)  # charged to team as it runs
    if change == "deleted":
        cycle.book.object_gone(JOB, "ns", "train")
    else:
        job = a_job_admitted_on(["n1", "n2"])
        if change == "relabelled":
            job["metadata"]["labels"][QUEUE_LABEL] = "other"
        else:
            del job["metadata"]["labels"][QUEUE_LABEL]
        cycle.book.object_seen(JOB, job)
    asked = cycle.ask(snapshot(), NOW)
    charged = sum(h.milli for h in asked.held if h.queue == "team")
    charged += sum(r.placement.total_gpus * 1000 for r in asked.requests if r.placement and r.queue == "team")
    assert charged == 4000


@pytest.mark.parametrize("change", ["relabelled", "label removed", "refused"])
def test_a_restarted_operator_charges_draining_pods_where_the_record_says_the_workload_ran(
    parts: Any, change: str
) -> None:
    """The operator restarts and finds a running Job relabelled, unlabelled or unreadable: it never charged
    it, so the queue in its placement record (which only the operator writes) is charged what its pods hold."""
    cycle, _api, _events, _in_flight = parts
    job = a_job_admitted_on(["n1", "n2"])
    if change == "relabelled":
        job["metadata"]["labels"][QUEUE_LABEL] = "other"
    elif change == "label removed":
        del job["metadata"]["labels"][QUEUE_LABEL]
    else:
        job["metadata"]["annotations"][PRIORITY_ANNOTATION] = "not a number"
    cycle.book.object_seen(JOB, job)
    for index, node in enumerate(("n1", "n2")):
        cycle.book.pod_seen(a_pod(f"train-{index}", "train", index, node=node, gated=False))
    asked = cycle.ask(snapshot(), NOW)
    assert asked.stops  # it is stopped, as before the restart ...
    charged = sum(h.milli for h in asked.held if h.queue == "team")
    assert charged == 4000  # ... and its pods are charged where it ran until they are gone


def test_a_restarted_operator_charges_a_deleted_workloads_draining_pods_where_their_label_says(parts: Any) -> None:
    """The Job was deleted before the restart, its pods still in their grace: no object, no record, but each
    pod carries the queue the operator labelled it with as it lifted its gate (no one else writes that
    label), so the restarted operator charges that queue what they hold."""
    cycle, _api, _events, _in_flight = parts
    for index, node in enumerate(("n1", "n2")):
        pod = a_pod(f"train-{index}", "train", index, node=node, gated=False)
        pod["metadata"]["deletionTimestamp"] = NOW.isoformat()
        pod["metadata"]["labels"][CHARGED_QUEUE_LABEL] = "team"
        del pod["metadata"]["labels"][QUEUE_LABEL]  # the tenant's label, which it may take off
        cycle.book.pod_seen(pod)
    asked = cycle.ask(snapshot(), NOW)
    assert sum(h.milli for h in asked.held if h.queue == "team") == 4000


def test_each_draining_pod_is_charged_to_the_queue_its_label_names(parts: Any) -> None:
    """A deleted Job's pods from two runs (admitted to team, then, relabelled, to other): each queue is
    charged what its own run's pods hold, not one of them for all."""
    cycle, _api, _events, _in_flight = parts
    queues = {name: a_queue(name, nominal_gpus=8).obj() for name in ("team", "other")}
    cycle.queue_object = queues.get
    for index, (node, queue) in enumerate((("n1", "team"), ("n2", "other"))):
        pod = a_pod(f"train-{index}", "train", index, node=node, gated=False)
        pod["metadata"]["deletionTimestamp"] = NOW.isoformat()
        pod["metadata"]["labels"][CHARGED_QUEUE_LABEL] = queue
        cycle.book.pod_seen(pod)
    asked = cycle.ask(snapshot(), NOW)
    assert {q: sum(h.milli for h in asked.held if h.queue == q) for q in queues} == {"team": 2000, "other": 2000}


def test_a_pod_label_naming_a_queue_its_namespace_may_not_use_charges_that_queue_nothing(parts: Any) -> None:
    """Where the chart's policy is off, a tenant can write the operator's label: naming another tenant's
    queue, its pods must not make that queue look full."""
    cycle, _api, _events, _in_flight = parts
    victim = a_queue("victim", nominal_gpus=8).obj()
    victim["spec"]["namespaces"] = ["theirs"]
    queues = {"team": a_queue("team", nominal_gpus=8).obj(), "victim": victim}
    cycle.queue_object = queues.get
    cycle.book.object_seen(JOB, a_job_admitted_on(["n1", "n2"]))
    for index, node in enumerate(("n1", "n2")):
        pod = a_pod(f"train-{index}", "train", index, node=node, gated=False)
        pod["metadata"]["labels"][CHARGED_QUEUE_LABEL] = "victim"
        cycle.book.pod_seen(pod)
    asked = cycle.ask(snapshot(), NOW)
    assert not [h for h in asked.held if h.queue == "victim"]
    charged = sum(h.milli for h in asked.held if h.queue == "team") + sum(r.held_milli for r in asked.requests)
    assert charged >= 4000  # its own queue is charged what its pods hold


@pytest.mark.asyncio
async def test_placing_a_pod_labels_it_with_the_queue_it_is_charged_to(parts: Any) -> None:
    cycle, api, _events, _in_flight = parts
    cycle.book.object_seen(JOB, a_job_admitted_on(["n1", "n2"]))
    for index in range(2):
        cycle.book.pod_seen(a_pod(f"train-{index}", "train", index))
    entry = cycle.book.get((JOB, "ns", "train"))
    assert entry is not None
    await cycle.placer.place_pods(entry)
    assert api.charged_to == {"train-0": "team", "train-1": "team"}
