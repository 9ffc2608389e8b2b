"""Carbon-aware deferral of other kinds' workloads: a held one that asks for it starts when the grid is cleanest.

A Job, PyTorchJob or RayJob annotated `scheduling.aisched.io/carbon-deferrable: "true"` (with a
bound on its delay and its expected duration) is planned as a deferrable TrainingJob is
(`policy.carbon.plan_start`, the same settings): on its region's forecast, in one run (a workload's
chunks would need a checkpoint contract its kind does not have), by its latest start. While the plan
says later, it sits the cycles out and its events say until when; with no forecast it starts in time.
A region whose first read is under way (a restarted operator) is waited for a bounded while first
(`forecast_pending_seconds`), as for a TrainingJob: a source not yet heard from is not a source down.

Forecasts are read once a cycle, before the workloads are asked (`prepare`), through the operator's
one carbon source, as TrainingJobs read theirs (`sources.carbon.reading.read_forecast`): its cache,
deadline and circuit breaker hold for these reads too.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from aisched.metrics.carbon import CarbonMetrics
from aisched.policy.carbon import (
    DeferrableJob,
    Forecast,
    PlanOptions,
    plan_awaiting_forecast,
    plan_start,
)
from aisched.policy.carbon.plan import CarbonPlan
from aisched.policy.scheduler import JobRequest
from aisched.policy.workloads.model import Workload
from aisched.settings import CarbonSettings
from aisched.sources.carbon import CARBON_SOURCE_NAMES, CachedCarbonSource
from aisched.sources.carbon.reading import read_forecast


class WorkloadDeferral:
    def __init__(
        self, source: CachedCarbonSource | None, settings: CarbonSettings, *, metrics: CarbonMetrics | None = None
    ) -> None:
        self._source = source
        self._settings = settings
        self._metrics = metrics
        self._forecasts: dict[str, Forecast | None] = {}
        self.missing: dict[str, str] = {}
        """Why a region has no forecast this cycle, for the events of the workloads planned on it."""
        self._awaiting: dict[str, datetime] = {}
        """Regions whose first read is under way, and until when their workloads wait for it."""

    def region_of(self, workload: Workload) -> str:
        carbon = workload.carbon
        return carbon.region if carbon is not None and carbon.region else self._settings.region

    async def prepare(self, regions: Iterable[str], now: datetime) -> None:
        """This cycle's forecast of each of REGIONS (none where the source fails or there is no source)."""
        self._forecasts, self.missing, self._awaiting = {}, {}, {}
        for region in sorted(set(regions)):
            read = await read_forecast(self._source, self._settings, region, now)
            self._forecasts[region] = read.forecast
            if read.awaiting_until is not None:
                self._awaiting[region] = read.awaiting_until
            elif read.missing is not None:
                self.missing[region] = read.missing
            if read.failed and self._metrics is not None:
                self._metrics.record_carbon_source_error(CARBON_SOURCE_NAMES[self._settings.provider])

    def plan(self, workload: Workload, request: JobRequest, now: datetime) -> CarbonPlan | None:
        """When WORKLOAD (held, asking REQUEST) is to start; None: it asks for no deferral."""
        carbon = workload.carbon
        if carbon is None or workload.expected_duration_seconds is None:
            return None
        gpus = request.replicas * (request.replica_milli / 1000)
        job = DeferrableJob(
            timedelta(seconds=workload.expected_duration_seconds),
            power_w=self._settings.power_per_gpu(request.gpu_type) * gpus,
            max_delay=timedelta(seconds=carbon.max_delay_seconds),
            submitted_at=workload.created,
        )
        options = PlanOptions(
            min_saving_fraction=self._settings.min_saving_fraction, forecast_error=self._settings.forecast_error
        )
        region = self.region_of(workload)
        awaiting = self._awaiting.get(region)
        if awaiting is not None:
            return plan_awaiting_forecast(now, job, options, until=awaiting)
        return plan_start(self._forecasts.get(region), now, job, options)

    def record_deferral(self) -> None:
        if self._metrics is not None:
            self._metrics.record_deferral("Forecast")
