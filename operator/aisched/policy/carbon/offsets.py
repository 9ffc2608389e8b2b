"""The planner's working view: a job in seconds from the forecast start, and the plan its chunks make."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aisched.policy.carbon.emissions import emissions_grams
from aisched.policy.carbon.forecast import EPS_S, Forecast
from aisched.policy.carbon.plan import CarbonPlan, PlanReason, RunChunk


@dataclass(frozen=True)
class OffsetJob:
    """The planner's view of a request, in seconds from the forecast start.

    `latest` is the latest start after now (a resume, for a job that ran before), and
    `end_bound` when the work must be done. A first chunk spends `first_now` restoring
    if it starts now and `first_later` if it starts later; every other chunk `overhead`.
    """

    forecast: Forecast
    now: float
    work: float
    latest: float
    end_bound: float
    power_w: float
    overhead: float = 0.0
    first_now: float = 0.0
    first_later: float = 0.0

    def first_overhead(self, start: float) -> float:
        return self.first_now if start <= self.now + EPS_S else self.first_later

    def run_from(self, start: float) -> tuple[float, float]:
        """One uninterrupted run from `start`."""
        return start, start + self.work + self.first_overhead(start)

    def grams(self, chunks: Sequence[tuple[float, float]]) -> float:
        fc = self.forecast
        return emissions_grams(self.power_w, sum(fc.cumulative(b) - fc.cumulative(a) for a, b in chunks))


def immediate_grams(job: OffsetJob) -> float | None:
    now_run = job.run_from(job.now)
    if now_run[1] > job.forecast.total_seconds + EPS_S:
        return None
    return job.grams([now_run])


def plan_from_offsets(
    job: OffsetJob,
    chunks: Sequence[tuple[float, float]],
    reason: PlanReason,
    message: str,
) -> CarbonPlan:
    fc = job.forecast
    start = chunks[0][0]
    covered = chunks[-1][1] <= fc.total_seconds + EPS_S
    planned = job.grams(chunks) if covered else None
    intensity = fc.values[fc.step_index(start)] if start < fc.total_seconds else None
    return CarbonPlan(
        start=fc.at_offset(start),
        chunks=tuple(RunChunk(fc.at_offset(a), fc.at_offset(b)) for a, b in chunks),
        latest_start=fc.at_offset(job.latest),
        reason=reason,
        message=message,
        intensity_at_start=intensity,
        planned_grams=planned,
        immediate_grams=immediate_grams(job),
    )
