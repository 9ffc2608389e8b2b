"""One tenant's jobs naming zones the carbon source does not know change nothing for another tenant's.

The TrainingJob loop with a source that knows one zone: the jobs naming unknown zones say so in a
condition of their own and start in time; another namespace's deferrable job in the known zone is
still deferred, however often the unknown zones were asked.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

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
from aisched.sources.carbon import CachedCarbonSource, CarbonSourceHTTPError
from tests.builders import a_training_job
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_loop import STEP, T0, an_open_default_queue

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]
UNKNOWN = ("atlantis", "lemuria", "mu", "hy-brasil")


class KnowsOneZone:
    """DE is dirty for the next hour and clean after; any other zone is a 404, as Electricity Maps answers."""

    name = "ElectricityMaps"

    async def forecast(self, region: str, start: datetime, end: datetime) -> Forecast:
        if region != "DE":
            raise CarbonSourceHTTPError(self.name, f"forecast for {region}", "HTTP 404: zone not found", status=404)
        steps = int((end - T0) / STEP) + 2
        return Forecast(region, T0, STEP, tuple(500.0 if i < 2 else 50.0 for i in range(steps)))

    async def current(self, region: str) -> IntensityPoint:
        return IntensityPoint(T0, 500.0)


def deferrable(namespace: str, name: str, zone: str) -> dict[str, Any]:
    builder = a_training_job(name).namespace(namespace)
    for path, value in {
        "carbon.deferrable": True,
        "carbon.region": zone,
        "carbon.maxDelaySeconds": 86400,
        "expectedDurationSeconds": 1800,
    }.items():
        builder.set(path, value)
    obj = builder.obj()
    obj["metadata"]["creationTimestamp"] = T0.isoformat()
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), None)


async def test_unknown_zones_are_a_condition_on_their_jobs_and_another_tenants_job_still_defers(
    kube: KubeDouble,
) -> None:
    kube.allow("patch_status", "post_event")
    settings = Settings()
    source = CachedCarbonSource(
        KnowsOneZone(),
        ttl=timedelta(minutes=5),
        max_stale=timedelta(hours=1),
        breaker=Breaker(threshold=2, open_for=timedelta(minutes=10)),
        clock=lambda: T0,
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
    for index, zone in enumerate(UNKNOWN):
        controller.job_seen(deferrable("team-x", f"made-up-{index}", zone))
    for _ in range(6):  # every unknown zone asked until its circuit opens
        await controller.reconcile_once(controller.jobs.keys())
        await source.fetcher.settle()
    assert all(source.fetcher.circuit(zone).is_open for zone in UNKNOWN)

    controller.job_seen(deferrable("team-y", "honest", "DE"))
    for _ in range(3):
        await controller.reconcile_once(controller.jobs.keys())
        await source.fetcher.settle()
    honest = controller.jobs[("team-y", "honest")]
    assert honest["status"]["phase"] == TrainingJobPhase.DEFERRED
    assert condition(honest, "CarbonForecast") is None
    for index, zone in enumerate(UNKNOWN):
        job = controller.jobs[("team-x", f"made-up-{index}")]
        assert job["status"].get("phase") != TrainingJobPhase.DEFERRED
        said = condition(job, "CarbonForecast")
        assert said is not None and (said["status"], said["reason"]) == ("False", "ForecastUnavailable")
        assert f"no carbon forecast for zone {zone!r}, so the job is not deferred" in said["message"]
        assert "HTTP 404" in said["message"]
    # Each said so once, not once a pass.
    events = [c for c in kube.calls("post_event") if "CarbonForecastUnavailable" in c]
    assert len(events) == len(UNKNOWN)
