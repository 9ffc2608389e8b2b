"""The TrainingJob loop with a carbon source that never answers: every pass stays bounded.

Fake loop clock (looptime): the source's hang costs the loop nothing but the one answer wait
of the fetch a pass started; passes that find the fetch under way, or the circuit open, go on
at once, and deferrable jobs start in time as when the source is down.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from aisched.api import TrainingJobPhase
from aisched.controller.cluster_state import ClusterState
from aisched.controller.training import TrainingJobController
from aisched.kube.inventory import Inventory
from aisched.metrics import Metrics
from aisched.policy.carbon import Forecast, IntensityPoint
from aisched.policy.circuit import Breaker
from aisched.settings import Settings
from aisched.sources.carbon import CachedCarbonSource
from tests.builders import a_queue
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_loop import a_job

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Hung:
    """A carbon source whose every request hangs: a server that accepted the connection and went quiet."""

    name = "Hung"

    def __init__(self) -> None:
        self.asked = 0

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        self.asked += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def current(self, region: str) -> IntensityPoint:
        self.asked += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_hung_carbon_source_costs_each_fetch_one_answer_wait_and_jobs_start_in_time(
    kube: KubeDouble,
) -> None:
    kube.allow("patch_status", "post_event")
    hung = Hung()
    source = CachedCarbonSource(
        hung,
        ttl=timedelta(minutes=5),
        max_stale=timedelta(hours=1),
        deadline=timedelta(seconds=30),
        answer_wait=timedelta(seconds=2),
        breaker=Breaker(threshold=2, open_for=timedelta(minutes=10)),
        clock=lambda: T0,
    )
    settings = Settings()
    controller = TrainingJobController(
        settings,
        kube.client,
        ClusterState(Inventory(settings)),
        metrics=Metrics(CollectorRegistry(), process_metrics=False),
        carbon=source,
        clock=lambda: T0,
    )
    for name in ("a", "b", "c"):
        controller.job_seen(
            a_job(name, carbon__deferrable=True, carbon__maxDelaySeconds=86400, expectedDurationSeconds=1800)
        )
    loop = asyncio.get_running_loop()
    took = []
    for _ in range(40):  # over a minute of passes: two fetches time out, then the circuit opens
        start = loop.time()
        await asyncio.wait_for(controller.reconcile_once(controller.jobs.keys()), timeout=10)
        took.append(loop.time() - start)
        await asyncio.sleep(2)
    assert max(took) <= 2.0 + 0.01, took  # one answer wait at most, however many jobs ask
    assert sum(took) <= 2 * 2.0 + 0.01, took  # one per fetch: two fetches before the circuit opened
    assert source.fetcher.circuit(settings.carbon.region).is_open
    assert hung.asked == 2
    # Without a forecast deferrable jobs are not held back: they wait for GPUs (there are none) as any job.
    assert {obj["status"]["phase"] for obj in controller.jobs.values()} == {TrainingJobPhase.QUEUED}
    await source.aclose()


class ReadOnceTheGateOpens:
    """A source heard from only when the test opens its gate (a restarted operator's first read, under way);
    then the grid is dirty for the hour from T0 and clean after, so a deferrable job waits for it."""

    name = "File"

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        await self.gate.wait()
        steps = int((end - T0) / timedelta(minutes=30)) + 2
        return Forecast(region, T0, timedelta(minutes=30), tuple(500.0 if i < 2 else 50.0 for i in range(steps)))

    async def current(self, region: str) -> IntensityPoint:
        raise AssertionError("not asked")


def a_restarted_controller(
    kube: KubeDouble, source: ReadOnceTheGateOpens, now: list[datetime]
) -> TrainingJobController:
    settings = Settings()
    cached = CachedCarbonSource(
        source,
        ttl=timedelta(minutes=5),
        max_stale=timedelta(hours=1),
        deadline=timedelta(minutes=10),  # longer than the wait for a first read: the read is still under way
        clock=lambda: now[0],
    )
    controller = TrainingJobController(
        settings,
        kube.client,
        ClusterState(Inventory(settings)),
        metrics=Metrics(CollectorRegistry(), process_metrics=False),
        carbon=cached,
        clock=lambda: now[0],
    )
    controller.queue_seen(a_queue("default", nominal_gpus=8).obj())
    return controller


async def test_a_running_chunk_end_waits_for_the_restarted_operators_first_forecast_read_then_pauses(
    kube: KubeDouble,
) -> None:
    """Its chunk is over, and the restarted operator has not read the zone yet: the job runs on, keeps its
    chunk end, and pauses as planned once the forecast is read (it ran to completion before)."""
    source, now = ReadOnceTheGateOpens(), [T0 + timedelta(minutes=1)]
    controller = a_restarted_controller(kube, source, now)
    job = a_job(
        "chunky",
        carbon__deferrable=True,
        carbon__interruptible=True,
        carbon__maxDelaySeconds=86400,
        expectedDurationSeconds=7200,
        checkpoint={"path": "/ckpt", "costSeconds": 5},
    )
    job["status"] = {"phase": "Running", "startTime": T0.isoformat(), "chunkEnd": T0.isoformat()}
    controller.job_seen(job)
    await controller.deferral.end_chunks(now[0])
    assert kube.calls("patch_status") == []  # nothing written: the chunk end is kept
    assert controller.jobs[("ns", "chunky")]["status"]["chunkEnd"] == T0.isoformat()
    source.gate.set()
    await controller.carbon.fetcher.settle()  # type: ignore[union-attr]
    now[0] += timedelta(seconds=10)
    kube.allow("patch_status", "post_event", "delete_pod")
    await controller.deferral.end_chunks(now[0])
    (_, _, _, status), *_ = kube.calls("patch_status")
    assert (status["phase"], status["reason"]) == ("Checkpointing", "ChunkEnded"), status


async def test_a_deferrable_job_waits_a_bounded_while_for_its_zones_first_read_and_never_starts_blind_at_once(
    kube: KubeDouble,
) -> None:
    source, now = ReadOnceTheGateOpens(), [T0]
    controller = a_restarted_controller(kube, source, now)
    kube.allow("patch_status", "post_event")
    controller.job_seen(
        a_job("early", carbon__deferrable=True, carbon__maxDelaySeconds=86400, expectedDurationSeconds=1800)
    )
    await controller.reconcile_once(controller.jobs.keys())
    assert "phase" not in controller.jobs[("ns", "early")].get("status", {})  # untouched while its zone is read
    source.gate.set()
    await controller.carbon.fetcher.settle()  # type: ignore[union-attr]
    await controller.reconcile_once(controller.jobs.keys())
    assert controller.jobs[("ns", "early")]["status"]["phase"] == TrainingJobPhase.DEFERRED

    # A read that never ends within the wait (120 s by default): the job is planned without a forecast.
    stuck, later = ReadOnceTheGateOpens(), [T0]
    other = a_restarted_controller(kube, stuck, later)
    other.job_seen(a_job("late", carbon__deferrable=True, carbon__maxDelaySeconds=86400, expectedDurationSeconds=1800))
    await other.reconcile_once(other.jobs.keys())
    later[0] += timedelta(seconds=121)
    for _ in range(2):  # one pass notes the condition, the next queues the job
        await other.reconcile_once(other.jobs.keys())
    status = other.jobs[("ns", "late")]["status"]
    assert status["phase"] == TrainingJobPhase.QUEUED
    assert next(c for c in status["conditions"] if c["type"] == "CarbonForecast")["status"] == "False"
    await controller.carbon.aclose()  # type: ignore[union-attr]
    await other.carbon.aclose()  # type: ignore[union-attr]
