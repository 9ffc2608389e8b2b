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
