"""The TrainingJob controller's loop without a cluster: its work queue, its stages, its timers.

The API client is a double that refuses every call a test did not allow; time is
a fixed clock for the controller and a fake loop clock (looptime) for the queue.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from aisched.api import TrainingJobPhase
from aisched.controller.cluster_state import ClusterState
from aisched.controller.cycle_pacing import MAX_WAIT_SECONDS
from aisched.controller.training import TrainingJobController
from aisched.kube.inventory import Inventory
from aisched.metrics import Metrics
from aisched.policy.carbon import Forecast, IntensityPoint
from aisched.settings import Settings
from aisched.sources.carbon import CachedCarbonSource
from tests.builders import a_queue, a_training_job
from tests.unit.controller.kube_double import KubeDouble

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STEP = timedelta(minutes=30)
JobKey = tuple[str, str]


class DirtyNowCleanInAnHour:
    """A carbon source whose grid is dirty for the next hour and clean after: deferrable jobs wait."""

    name = "File"

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        steps = int((end - T0) / STEP) + 2
        return Forecast(region, T0, STEP, tuple(500.0 if i < 2 else 50.0 for i in range(steps)))

    async def current(self, region: str) -> IntensityPoint:
        return IntensityPoint(T0, 500.0)


def a_controller(kube: KubeDouble, *, carbon: bool = False, resync_seconds: float = 15.0) -> TrainingJobController:
    settings = Settings(resync_seconds=resync_seconds)
    source = None
    if carbon:
        source = CachedCarbonSource(
            DirtyNowCleanInAnHour(), ttl=timedelta(minutes=5), max_stale=timedelta(hours=1), clock=lambda: T0
        )
    controller = TrainingJobController(
        settings,
        kube.client,
        ClusterState(Inventory(settings)),
        metrics=Metrics(CollectorRegistry(), process_metrics=False),
        carbon=source,
        clock=lambda: T0,
    )
    controller.queue_seen(an_open_default_queue())
    return controller


def an_open_default_queue() -> dict[str, Any]:
    """A default queue a platform team gave every GPU: where nobody wrote one it grants none."""
    return a_queue("default", nominal_gpus=1_000_000).obj()


def a_job(name: str, **spec: Any) -> dict[str, Any]:
    builder = a_training_job(name).namespace("ns")
    for path, value in spec.items():
        builder.set(path.replace("__", "."), value)
    obj = builder.obj()
    obj["metadata"]["creationTimestamp"] = T0.isoformat()
    return obj


async def marked_within(controller: TrainingJobController, seconds: float) -> set[JobKey]:
    """The jobs marked dirty in the next SECONDS of loop time, the resync aside."""
    loop = asyncio.get_running_loop()
    end, keys = loop.time() + seconds, set()
    # Not `> 0`: a wait of a rounding error's length (1e-15 s) does not move the fake clock on, and the
    # loop never ended (once, on a loaded machine).
    while (left := end - loop.time()) > 1e-6:
        keys |= await controller.queue.next_batch(lambda: [], timeout=left)
    return keys


def reconcile_errors(controller: TrainingJobController) -> float:
    value = controller.metrics.registry.get_sample_value("aisched_reconcile_errors_total", {"kind": "TrainingJob"})
    return value or 0.0


def patched(kube: KubeDouble) -> list[str]:
    """Names of the TrainingJobs whose status was patched, in order."""
    return [name for plural, _, name, _ in kube.calls("patch_status") if plural == "trainingjobs"]


async def test_a_job_whose_reconcile_fails_is_retried_with_backoff_and_stops_no_other_job(kube: KubeDouble) -> None:
    def patch_status(plural: str, namespace: str | None, name: str, status: dict[str, Any]) -> None:
        if name == "broken":
            raise RuntimeError("the API server said no")

    kube.answer("patch_status", patch_status)
    controller = a_controller(kube)
    # Suspended jobs: each reconcile writes the Suspended phase.
    for name in ("broken", "fine-1", "fine-2"):
        controller.job_seen(a_job(name, suspend=True))
    batch = await controller.queue.next_batch(controller.jobs.keys)
    await controller.reconcile_once(batch)
    assert sorted(patched(kube)) == ["broken", "fine-1", "fine-2"]
    assert controller.jobs[("ns", "fine-1")]["status"]["phase"] == TrainingJobPhase.SUSPENDED
    assert "status" not in controller.jobs[("ns", "broken")]
    assert reconcile_errors(controller) == 1
    # Only the failed job comes back, after its backoff, not at once.
    assert controller.queue.pending_timers() == 1
    assert await controller.queue.next_batch(controller.jobs.keys, timeout=0.5) == set()
    assert await controller.queue.next_batch(controller.jobs.keys, timeout=1) == {("ns", "broken")}


async def test_a_failing_stage_does_not_stop_the_stages_after_it(
    kube: KubeDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller = a_controller(kube)
    controller.job_seen(a_job("llm"))
    ran: list[str] = []

    async def schedule() -> None:
        ran.append("schedule")
        raise RuntimeError("the scheduler broke")

    async def end_chunks(now: datetime) -> None:
        ran.append("end chunks")

    monkeypatch.setattr(controller, "schedule", schedule)
    monkeypatch.setattr(controller.deferral, "end_chunks", end_chunks)
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    assert ran == ["schedule", "end chunks"]
    # The gauges were refreshed after both: the new job waits like a queued one.
    jobs = controller.metrics.registry.get_sample_value("aisched_jobs", {"queue": "default", "phase": "Queued"})
    assert jobs == 1


async def test_a_deferred_job_keeps_one_wake_up_however_many_passes_replan_it(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event")
    controller = a_controller(kube, carbon=True)
    for name in ("a", "b", "c"):
        controller.job_seen(
            a_job(name, carbon__deferrable=True, carbon__maxDelaySeconds=86400, expectedDurationSeconds=1800)
        )
    assert await controller.queue.next_batch(controller.jobs.keys) == set(controller.jobs)
    # Every pass re-plans every deferred job against the forecast, as each resync does.
    for _ in range(50):
        await controller.reconcile_once(controller.jobs.keys())
    assert {obj["status"]["phase"] for obj in controller.jobs.values()} == {TrainingJobPhase.DEFERRED}
    assert patched(kube) == ["a", "b", "c"]  # written once each, not once a pass
    assert controller.queue.pending_timers() == 3
    # The wake-ups come at the planned start, an hour on: not before.
    assert await marked_within(controller, 3599) == set()
    assert await marked_within(controller, 2) == set(controller.jobs)
    assert controller.queue.pending_timers() == 0


async def test_a_deleted_job_leaves_no_wake_up_or_retry_behind(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event")
    controller = a_controller(kube, carbon=True)
    controller.job_seen(
        a_job("gone-soon", carbon__deferrable=True, carbon__maxDelaySeconds=86400, expectedDurationSeconds=1800)
    )
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    assert controller.queue.pending_timers() == 1
    controller.job_gone("ns", "gone-soon")
    assert controller.queue.pending_timers() == 0
    assert await marked_within(controller, 7200) == set()


async def test_marks_during_a_pass_are_taken_by_the_next_one(kube: KubeDouble) -> None:
    controller = a_controller(kube)
    controller.job_seen(a_job("a"))
    controller.job_seen(a_job("a"))  # a burst of events for one job is one reconcile
    controller.job_seen(a_job("b"))
    assert await controller.queue.next_batch(controller.jobs.keys) == {("ns", "a"), ("ns", "b")}
    controller.mark(("ns", "a"))
    controller.mark(("ns", "b"))
    assert await controller.queue.next_batch(controller.jobs.keys) == {("ns", "a"), ("ns", "b")}
    started = asyncio.get_running_loop().time()
    # With nothing marked the next batch is the resync's: every job, a period later.
    assert await controller.queue.next_batch(controller.jobs.keys) == {("ns", "a"), ("ns", "b")}
    assert asyncio.get_running_loop().time() - started == pytest.approx(15.0)


def a_node(name: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


async def test_an_admitted_job_is_placed_and_its_worker_created_in_the_same_pass(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    job = a_training_job("llm").namespace("ns").gpus(4).obj()
    job["metadata"]["uid"] = "uid-llm"  # the API server's: the worker's owner reference names it
    controller.job_seen(job)
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    status = controller.jobs[("ns", "llm")]["status"]
    assert (status["phase"], status["placement"]["nodes"], status["gangGeneration"]) == ("Placing", ["n1"], 1)
    (pod,) = (obj for (obj,) in kube.calls("create"))
    assert (pod["kind"], pod["spec"]["nodeSelector"]["kubernetes.io/hostname"]) == ("Pod", "n1")
    assert [reason for _, _, reason, _ in kube.calls("post_event")] == ["Admitted"]
    assert reconcile_errors(controller) == 0


async def test_a_running_chunk_keeps_its_wake_up_at_the_chunk_end_after_an_earlier_one_fired(
    kube: KubeDouble,
) -> None:
    controller = a_controller(kube, carbon=True)
    job = a_job(
        "chunky",
        carbon__deferrable=True,
        carbon__interruptible=True,
        carbon__maxDelaySeconds=86400,
        expectedDurationSeconds=3600,
        checkpoint={"path": "/ckpt", "costSeconds": 5},
    )
    job["status"] = {"phase": "Running", "startTime": T0.isoformat(), "chunkEnd": (T0 + STEP).isoformat()}
    controller.job_seen(job)
    await controller.queue.next_batch(controller.jobs.keys)
    await controller.deferral.end_chunks(T0)
    # An earlier wake-up (a requeue, a bind timeout) takes the job's one timer and fires...
    controller.queue.add_after(("ns", "chunky"), 5)
    assert await marked_within(controller, 6) == {("ns", "chunky")}
    # ...and the next pass asks again for the chunk's end.
    await controller.deferral.end_chunks(T0)
    assert controller.queue.pending_timers() == 1
    assert await marked_within(controller, STEP.total_seconds() - 10) == set()
    assert await marked_within(controller, 10) == {("ns", "chunky")}


async def test_jobs_of_a_namespace_being_deleted_hold_no_gpus_and_stop_no_one_else(kube: KubeDouble) -> None:
    """A tenant deletes a namespace full of jobs: they are not admitted again, and the node goes to others."""

    def create(obj: dict[str, Any]) -> None:
        if obj["metadata"]["namespace"] == "closing":
            body = '{"kind":"Status","reason":"Forbidden","message":"pods \\"x\\" is forbidden: unable to create'
            body += ' new content in namespace closing because it is being terminated"}'
            raise forbidden(body)

    kube.allow("patch_status", "post_event").answer("create", create)
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    for name in ("doomed-1", "doomed-2"):
        controller.job_seen(a_job_with_uid(name, "closing"))
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    assert [obj["metadata"]["namespace"] for (obj,) in kube.calls("create")] == ["closing"]
    controller.job_seen(a_job_with_uid("other", "ns"))
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    created = [(obj["metadata"]["namespace"], obj["metadata"]["name"]) for (obj,) in kube.calls("create")]
    assert created[1:] == [("ns", "other-g1-w0")]
    assert reconcile_errors(controller) == 0


def a_job_with_uid(name: str, namespace: str) -> dict[str, Any]:
    job = a_training_job(name).namespace(namespace).gpus(8).obj()
    job["metadata"]["uid"] = f"uid-{name}"  # the API server's: the worker's owner reference names it
    return job


def forbidden(body: str) -> ApiException:
    error = ApiException(status=403, reason="Forbidden")
    error.body = body
    return error


async def test_a_worker_the_api_server_refuses_is_a_condition_and_the_gang_gives_its_gpus_back_in_time(
    kube: KubeDouble,
) -> None:
    refusal = 'pods "refused-g1-w0" is forbidden: violates PodSecurity "restricted:latest": privileged'

    def create(obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"].startswith("refused"):
            error = ApiException(status=403, reason="Forbidden")
            error.body = json.dumps({"kind": "Status", "reason": "Forbidden", "message": refusal})
            raise error

    kube.allow("patch_status", "post_event", "delete_pod").answer("create", create)
    now = [T0]
    controller = a_controller(kube)
    controller.clock = lambda: now[0]
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.job_seen(a_job_with_uid("refused", "ns"))
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    status = controller.jobs[("ns", "refused")]["status"]
    created = condition(status, "WorkersCreated")
    assert (status["phase"], created["status"], created["reason"], created["message"]) == (
        "Placing",
        "False",
        "FailedCreate",
        refusal,
    )
    assert reconcile_errors(controller) == 1
    # Refused for longer than the bound: the gang gives the node back, and another job gets it.
    now[0] = T0 + timedelta(minutes=6)
    controller.job_seen(a_job_with_uid("other", "ns"))
    await controller.reconcile_once({("ns", "refused")})
    status = controller.jobs[("ns", "refused")]["status"]
    assert (status["phase"], status["reason"], status.get("gpus")) == ("Queued", "FailedCreate", 0)
    assert ("ns", "refused-g1-w0") in kube.calls("delete_pod")
    assert controller.jobs[("ns", "other")]["status"]["phase"] == "Placing"
    # It sits out the scheduler for the bound, then is tried again.
    await controller.queue.next_batch(controller.jobs.keys, timeout=0)
    controller.job_seen({**controller.jobs[("ns", "other")], "status": {"phase": "Succeeded"}})
    await controller.schedule()
    assert controller.jobs[("ns", "refused")]["status"]["phase"] == "Queued"
    now[0] += timedelta(minutes=5)
    await controller.schedule()
    assert controller.jobs[("ns", "refused")]["status"]["phase"] == "Placing"


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


async def test_finished_jobs_are_counted_off_their_objects_and_keep_no_model(kube: KubeDouble) -> None:
    controller = a_controller(kube)
    done = a_job("done", queue="research")
    done["status"] = {"phase": "Succeeded"}
    controller.job_seen(done)
    controller.job_seen(a_job("waiting"))
    controller.cluster_snapshot()
    controller.reporting.report()
    jobs = controller.metrics.registry.get_sample_value
    assert jobs("aisched_jobs", {"queue": "research", "phase": "Succeeded"}) == 1
    assert jobs("aisched_jobs", {"queue": "default", "phase": "Queued"}) == 1
    # Thousands of finished jobs would each keep a model of ~9 KiB; they are read off their objects.
    assert controller.store.models_kept() == {("ns", "waiting")}


async def test_a_cycle_admits_its_most_and_the_next_pass_follows_at_once_for_the_rest(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.settings.admissions_per_cycle = 2
    controller.inventory.upsert_node(a_node("n1", 8))
    for name in ("a", "b", "c", "d", "e"):
        controller.job_seen(a_job(name, gpusPerReplica=1))
    loop, placed = asyncio.get_running_loop(), []
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    for _ in range(3):
        placed.append(sorted(k[1] for k, obj in controller.jobs.items() if "placement" in obj.get("status", {})))
        started = loop.time()
        await controller.reconcile_once(await controller.queue.next_batch(lambda: []))
        # No job marked, no resync due: the cycle that deferred jobs woke the loop itself (after no more
        # than the last cycle's pacing, never a resync's 15 s).
        assert loop.time() - started <= MAX_WAIT_SECONDS or placed[-1] == ["a", "b", "c", "d", "e"]
    assert placed == [["a", "b"], ["a", "b", "c", "d"], ["a", "b", "c", "d", "e"]]


async def test_the_watch_event_of_an_older_write_does_not_undo_a_status_we_wrote(kube: KubeDouble) -> None:
    # Our status write lands at version 12 while the watch still brings the event of version 11
    # (another stage's write of the same pass): that older copy must not become ours again.
    kube.answer("patch_status", lambda *_: "12")
    controller = a_controller(kube)
    obj = a_job("paused", suspend=True)
    obj["metadata"]["resourceVersion"] = "10"
    controller.job_seen(obj)
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    ours = controller.jobs[("ns", "paused")]
    assert (ours["metadata"]["resourceVersion"], ours["status"]["phase"]) == ("12", TrainingJobPhase.SUSPENDED)
    older = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "11"}, "status": {"phase": "Running"}}
    controller.job_seen(older)
    assert controller.jobs[("ns", "paused")]["status"]["phase"] == TrainingJobPhase.SUSPENDED
    newer = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "13"}, "status": {"phase": "Queued"}}
    controller.job_seen(newer)
    assert controller.jobs[("ns", "paused")]["status"]["phase"] == "Queued"


async def test_a_deferred_job_is_not_rewritten_as_its_expected_saving_drifts_pass_by_pass(kube: KubeDouble) -> None:
    # Its saving is counted against starting now, which moves: written each pass, each write's own
    # watch event would bring the next pass at once (seen live: 17 writes a second for one job).
    kube.allow("patch_status", "post_event")
    controller = a_controller(kube, carbon=True)
    clock = [T0]
    controller.clock = lambda: clock[0]
    controller.job_seen(
        a_job("waiting", carbon__deferrable=True, carbon__maxDelaySeconds=86400, expectedDurationSeconds=1800)
    )
    await controller.queue.next_batch(controller.jobs.keys)
    # A pass a minute for 50 minutes: starting now, ever more of its half hour would fall in the
    # clean hour, so the saving it expects moves with every pass.
    savings = set()
    for minute in range(50):
        clock[0] = T0 + timedelta(minutes=minute)
        await controller.reconcile_once(controller.jobs.keys())
        savings.add(controller.jobs[("ns", "waiting")]["status"]["deferral"]["expectedSavingPercent"])
    assert controller.jobs[("ns", "waiting")]["status"]["phase"] == TrainingJobPhase.DEFERRED
    # Written when its saving moved a whole percent, not at each of the 50 passes.
    assert 1 < len(patched(kube)) == len({round(saving) for saving in savings}) < 50


async def test_a_spot_job_of_higher_priority_makes_room_on_spot_rather_than_wait_for_free_spot(
    kube: KubeDouble,
) -> None:
    kube.allow("patch_status", "post_event", "create", "delete_pod")
    controller = a_controller(kube)
    spot = a_node("spot", 8)
    spot["metadata"]["labels"]["karpenter.sh/capacity-type"] = "spot"
    controller.inventory.upsert_node(spot)
    low = a_job("low", gpusPerReplica=8, spot={"policy": "Only"})
    low["metadata"]["uid"] = "uid-low"
    controller.job_seen(low)
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    assert controller.jobs[("ns", "low")]["status"]["placement"]["nodes"] == ["spot"]
    # No spot GPU is free: the urgent job still enters the cycle on spot, and its priority preempts.
    urgent = a_job("urgent", gpusPerReplica=8, priority=100, spot={"policy": "Only"})
    controller.job_seen(urgent)
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys))
    reasons = [(obj["metadata"]["name"], reason) for obj, _, reason, _ in kube.calls("post_event")]
    assert ("low", "Preempted") in reasons, reasons
    assert controller.jobs[("ns", "urgent")]["status"].get("reason") != "WaitingForSpot"
