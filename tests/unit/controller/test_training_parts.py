"""The parts of the TrainingJob controller, each built on its own from what it is handed.

No controller here: a store, a writer, a guard, the worker releases, the reporting and the
capacity chooser are each built from a store, a KubeClient double, a work queue and metrics,
and tested through their own methods. The last tests take the scheduling cycle from a
controller to check the order of its eligibility checks, which are data.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from aisched.api import SpotPolicy
from aisched.api.training_job import TrainingJobStatus
from aisched.controller.closing_namespaces import CLOSING_NAMESPACE_SECONDS
from aisched.controller.cluster_state import ClusterState
from aisched.controller.sharing import GpuShares
from aisched.controller.training import TrainingJobController, capacity
from aisched.controller.training.capacity import CapacityChooser
from aisched.controller.training.cycle_kind import ELIGIBILITY
from aisched.controller.training.isolation import EMISSIONS, SCHEDULING, StageGuard
from aisched.controller.training.releases import WorkerReleases
from aisched.controller.training.reporting import Reporting
from aisched.controller.training.store import JobKey, JobStore
from aisched.controller.training.writer import StatusWriter
from aisched.controller.workqueue import WorkQueue
from aisched.kube import labels
from aisched.kube.inventory import Inventory
from aisched.metrics import Metrics
from aisched.policy.carbon import Forecast, IntensityPoint
from aisched.policy.placement import GangRequest
from aisched.policy.spot import CapacityChoice
from aisched.settings import Settings
from aisched.sources.carbon import CachedCarbonSource
from tests.builders import a_queue, a_training_job
from tests.unit.controller.kube_double import KubeDouble

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = Settings()
KEY = ("ns", "llm")


def a_node(name: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def a_job(name: str = "llm", *, version: str = "1", **status: Any) -> dict[str, Any]:
    obj = a_training_job(name).namespace("ns").gpus(4).obj()
    obj["metadata"].update(resourceVersion=version, generation=1, creationTimestamp=T0.isoformat())
    if status:
        obj["status"] = status
    return obj


def a_queue_of_jobs() -> WorkQueue[JobKey]:
    return WorkQueue(name="TrainingJob", resync_seconds=15.0)


def a_store(*nodes: dict[str, Any], monotonic: list[float] | None = None) -> JobStore:
    inventory = Inventory(SETTINGS)
    for node in nodes:
        inventory.upsert_node(node)
    clock = monotonic if monotonic is not None else [0.0]
    return JobStore(ClusterState(inventory, monotonic=lambda: clock[0]))


def metrics() -> Metrics:
    return Metrics(CollectorRegistry(), process_metrics=False)


# -- the store -------------------------------------------------------------------------


async def test_the_event_of_a_write_older_than_ours_is_not_taken() -> None:
    store = a_store()
    assert store.seen(a_job(version="3")) == KEY
    store.written(store.jobs[KEY], TrainingJobStatus(phase="Queued", reason="Waiting"), "5")
    assert store.seen(a_job(version="4")) is None  # on its way before our write landed
    assert store.jobs[KEY]["status"]["phase"] == "Queued"
    assert store.seen(a_job(version="6")) == KEY
    assert "status" not in store.jobs[KEY]


async def test_a_job_is_found_by_the_nodes_of_its_placement_until_it_is_gone() -> None:
    store = a_store()
    store.seen(a_job(phase="Placing", placement={"nodes": ["n1", "n2"]}, gangGeneration=1))
    assert store.jobs_on_node("n2") == {KEY}
    store.seen(a_job(version="2", phase="Placing", placement={"nodes": ["n1"]}, gangGeneration=1))
    assert store.jobs_on_node("n2") == set()
    store.forget(KEY)
    assert store.jobs_on_node("n1") == set()
    assert store.jobs == {} and store.models_kept() == set()


async def test_a_closing_namespace_is_left_alone_for_a_while_then_asked_about_again() -> None:
    now = [100.0]
    store = a_store(monotonic=now)
    store.namespace_closed("ns")
    assert store.in_closing_namespace(KEY)
    assert not store.in_closing_namespace(("other", "llm"))
    now[0] += CLOSING_NAMESPACE_SECONDS
    assert not store.in_closing_namespace(KEY)


async def test_the_snapshot_holds_the_gpus_of_ranks_placed_and_not_created_yet() -> None:
    store = a_store(a_node("n1", 8))
    store.seen(a_job(phase="Placing", placement={"nodes": ["n1"]}, gangGeneration=1))
    store.seen(a_job("done", phase="Succeeded", placement={"nodes": ["n1"]}, gangGeneration=1))
    (node,) = store.cluster_snapshot().nodes()
    assert node.used_gpus == 4  # the finished job holds none
    store.namespace_closed("ns")
    (node,) = store.cluster_snapshot().nodes()
    assert node.used_gpus == 0  # its pods can never be created


async def test_the_running_view_holds_the_readable_running_jobs_only() -> None:
    store = a_store()
    store.seen(a_job("runs", phase="Running", placement={"nodes": ["n1"]}, gangGeneration=1))
    store.seen(a_job("waits", phase="Queued"))
    unreadable = a_job("odd", phase="Running")
    unreadable["spec"]["replicas"] = -1
    store.seen(unreadable)
    assert [key for key, _, _ in store.running()] == [("ns", "runs")]
    assert store.refusal(store.jobs[("ns", "odd")]) is not None


async def test_the_views_follow_each_job_from_phase_to_phase_and_out() -> None:
    store = a_store()
    store.seen(a_job("a", phase="Queued"))
    store.seen(a_job("b", phase="Running", placement={"nodes": ["n1"]}, gangGeneration=1))
    store.seen(a_job("c", phase="Succeeded"))

    def views() -> tuple[list[str], list[str], list[str]]:
        return (
            [key[1] for key, _ in store.unfinished()],
            [key[1] for key, _ in store.holding()],
            [key[1] for key, _, _ in store.running()],
        )

    assert views() == (["a", "b"], ["b"], ["b"])
    store.written(store.jobs[("ns", "a")], TrainingJobStatus(phase="Placing", placement={"nodes": ["n1"]}), "2")
    store.written(store.jobs[("ns", "b")], TrainingJobStatus(phase="Succeeded"), "2")
    assert views() == (["a"], ["a"], [])
    store.seen(a_job("c", version="3"))  # its status gone with a recreated object: waiting again
    store.forget(("ns", "a"))
    assert views() == (["c"], [], [])


# -- the status writer -------------------------------------------------------------------


async def test_the_writer_writes_only_a_changed_status_and_the_store_holds_what_landed(kube: KubeDouble) -> None:
    store = a_store()
    store.seen(a_job())
    writer = StatusWriter(kube.client, store)
    obj = store.jobs[KEY]
    job = store.read(obj)
    assert job is not None
    await writer.write(obj, job, job.status)  # the double refuses any call: none is made
    kube.answer("patch_status", lambda *args: "7")
    placed = TrainingJobStatus.model_validate({"phase": "Placing", "placement": {"nodes": ["n1"]}, "gangGeneration": 1})
    await writer.write(obj, job, placed)
    assert kube.calls("patch_status") == [("trainingjobs", "ns", "llm", placed.to_wire())]
    assert store.jobs[KEY]["metadata"]["resourceVersion"] == "7"
    assert store.placement_made(KEY) is not None
    assert store.jobs_on_node("n1") == {KEY}


# -- the stage guard ---------------------------------------------------------------------


async def test_a_job_a_stage_fails_on_sits_that_stage_out_alone_and_is_woken_after_its_backoff(
    kube: KubeDouble,
) -> None:
    store, queue, counted = a_store(), a_queue_of_jobs(), metrics()
    guard = StageGuard(store, StatusWriter(kube.client, store), kube.client, queue, counted)
    with guard.isolated(EMISSIONS, KEY):
        raise OverflowError("date value out of range")
    assert guard.sits_out(EMISSIONS, KEY)
    assert not guard.sits_out(SCHEDULING, KEY) and not guard.sits_out(EMISSIONS, ("ns", "other"))
    assert queue.pending_timers() == 1
    errors = counted.registry.get_sample_value("aisched_reconcile_errors_total", {"kind": "TrainingJob"})
    assert errors == 1
    guard.forget(KEY)
    assert not guard.sits_out(EMISSIONS, KEY)


async def test_a_job_set_aside_is_tried_again_at_once_when_its_spec_changes(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event")
    store, queue = a_store(), a_queue_of_jobs()
    guard = StageGuard(store, StatusWriter(kube.client, store), kube.client, queue, metrics())
    store.seen(a_job())
    obj = store.jobs[KEY]
    await guard.set_aside(obj, store.read(obj), ValueError("odd"), T0)
    assert store.jobs[KEY]["status"]["reason"] == "CannotSchedule"
    assert guard.still_set_aside(KEY, obj)
    changed = {**obj, "metadata": {**obj["metadata"], "generation": 2}}
    assert not guard.still_set_aside(KEY, changed)


# -- worker releases -----------------------------------------------------------------------


def a_worker(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "labels": {labels.JOB_NAME: "llm", labels.JOB_KIND: "TrainingJob", labels.RANK: "0"},
            "finalizers": [labels.REPORT_FINALIZER],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "trainer"}]},
        "status": {"phase": "Running"},
    }


async def test_workers_of_a_job_that_is_gone_are_let_go_and_a_failed_release_is_tried_again(
    kube: KubeDouble,
) -> None:
    refusing = {"w1"}

    def release(namespace: str, name: str) -> None:
        if name in refusing:
            raise RuntimeError("the API server said no")

    kube.answer("release_report_finalizer", release)
    store = a_store()
    records = [store.inventory.upsert_pod(a_worker(name)) for name in ("w0", "w1")]
    releases = WorkerReleases(store, store.inventory, kube.client, a_queue_of_jobs())
    releases.workers_unowned(r for r in records if r is not None)
    await releases.release_unowned()
    refusing.clear()
    await releases.release_unowned()
    await releases.release_unowned()  # nothing left to let go
    assert [name for _, name in kube.calls("release_report_finalizer")] == ["w0", "w1", "w1"]


# -- reporting -------------------------------------------------------------------------------


async def test_reporting_counts_each_job_by_queue_and_phase(kube: KubeDouble) -> None:
    store, counted = a_store(a_node("n1", 8)), metrics()
    guard = StageGuard(store, StatusWriter(kube.client, store), kube.client, a_queue_of_jobs(), counted)
    reporting = Reporting(
        store,
        guard,
        kube=kube.client,
        inventory=store.inventory,
        metrics=counted,
        shares=GpuShares(store.inventory),
        clock=lambda: T0,
    )
    store.seen(a_job("waits"))
    store.seen(a_job("done", phase="Succeeded"))
    await reporting.report_if_due(settled=False)
    gauge = counted.registry.get_sample_value
    assert gauge("aisched_jobs", {"queue": "default", "phase": "Queued"}) == 1
    assert gauge("aisched_jobs", {"queue": "default", "phase": "Succeeded"}) == 1


# -- capacity ------------------------------------------------------------------------------


async def test_spot_is_searched_for_once_per_gang_shape_and_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    store = a_store(a_node("n1", 8))
    chooser = CapacityChooser(SETTINGS, provisioner=None)
    searched: list[GangRequest] = []

    def gang_fits(request: GangRequest, snapshot: Any) -> bool:
        searched.append(request)
        return False

    monkeypatch.setattr(capacity, "gang_fits", gang_fits)
    snapshot = store.cluster_snapshot()
    jobs = [a_job(name) for name in ("a", "b")]
    for obj in jobs:
        obj["spec"]["spot"] = {"policy": SpotPolicy.PREFER.value}
        job = store.read(obj)
        assert job is not None
        assert chooser.choose(job, snapshot, frozenset(), T0).choice != CapacityChoice.SPOT  # none fits
    assert len(searched) == 1
    chooser.begin_cycle()
    job = store.read(jobs[0])
    assert job is not None
    chooser.choose(job, snapshot, frozenset(), T0)
    assert len(searched) == 2


async def test_an_elastic_job_has_spot_when_its_minimum_fits_there() -> None:
    spot_node = a_node("spot", 8)
    spot_node["metadata"]["labels"]["karpenter.sh/capacity-type"] = "spot"
    store = a_store(spot_node)
    chooser = CapacityChooser(SETTINGS, provisioner=None)
    snapshot = store.cluster_snapshot()

    def choice(**spec: Any) -> CapacityChoice:
        obj = a_job("wide")
        obj["spec"].update(replicas=4, spot={"policy": SpotPolicy.ONLY.value}, **spec)
        job = store.read(obj)
        assert job is not None
        return chooser.choose(job, snapshot, frozenset(), T0).choice

    assert choice() == CapacityChoice.WAIT  # 4 x 4 GPUs: no room on spot for the whole gang
    # Elastic, it starts at what fits (down to 1 replica): one spot node holds two.
    assert choice(minReplicas=1, maxReplicas=4) == CapacityChoice.SPOT
    assert choice(minReplicas=3, maxReplicas=4) == CapacityChoice.WAIT


# -- the scheduling cycle's eligibility, in its order -------------------------------------


class DirtyNowCleanInAnHour:
    """A grid dirty for the next hour and clean after: a deferrable job asked about its plan waits."""

    name = "File"

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        step = timedelta(minutes=30)
        steps = int((end - T0) / step) + 2
        return Forecast(region, T0, step, tuple(500.0 if i < 2 else 50.0 for i in range(steps)))

    async def current(self, region: str) -> IntensityPoint:
        return IntensityPoint(T0, 500.0)


async def test_a_waiting_job_whose_gang_is_still_stopping_is_not_asked_about_its_carbon_plan(
    kube: KubeDouble,
) -> None:
    assert ELIGIBILITY == ("still stopping", "carbon deferral", "refusal retry")

    def patch_status(plural: str, namespace: str | None, name: str, status: dict[str, Any]) -> None:
        assert plural == "queues", f"{plural} {name} must not be written"  # the Queue's usage is reported

    kube.answer("patch_status", patch_status)
    dirty_for_an_hour = CachedCarbonSource(
        DirtyNowCleanInAnHour(), ttl=timedelta(minutes=5), max_stale=timedelta(hours=1), clock=lambda: T0
    )
    controller = TrainingJobController(
        SETTINGS, kube.client, ClusterState(Inventory(SETTINGS)), carbon=dirty_for_an_hour, clock=lambda: T0
    )
    controller.queue_seen(a_queue("default", nominal_gpus=1_000).obj())
    controller.inventory.upsert_node(a_node("n1", 8))
    deferrable = a_job(phase="Queued")
    deferrable["spec"]["carbon"] = {"deferrable": True, "maxDelaySeconds": 86400}
    deferrable["spec"]["expectedDurationSeconds"] = 1800
    controller.job_seen(deferrable)
    controller.inventory.upsert_pod(a_worker("llm-g1-w0"))  # its last gang, still going
    await controller.schedule()  # neither a Deferred event nor a status: the double allows neither
    assert controller.jobs[KEY]["status"] == {"phase": "Queued"}
