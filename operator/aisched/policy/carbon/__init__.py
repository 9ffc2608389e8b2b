"""Carbon-aware deferral: when should a deferrable job run so that the grid is cleanest?

Pure: every function takes `now` (and the forecast) as arguments; nothing here reads
the clock or does I/O. The operator, the simulator and the benchmark call the same code.

- :mod:`.forecast`: intensity forecasts as step functions, built from points, shrunk for their error.
- :mod:`.emissions`: grams of CO2eq from power or energy and intensity.
- :mod:`.plan`: the plan (`CarbonPlan`, its chunks and reason) and the latest start.
- :mod:`.planning`: `plan_start` (a `DeferrableJob` planned with `PlanOptions`), forecast mode
  (the cleanest window); its helpers :mod:`.cleanest_chunks` (the cleanest chunks of an
  interruptible job) and :mod:`.threshold` (threshold mode) work on :mod:`.offsets` and
  :mod:`.slots`, the forecast in seconds.
- :mod:`.chunk_ends`: what a job run in chunks does at a chunk's edges, as the operator steps it.
"""

from aisched.policy.carbon.chunk_ends import (
    CHUNK_ENDED,
    DEFAULT_CHECKPOINT_COST_S,
    GRACE_MARGIN_S,
    PAUSED_BETWEEN_CHUNKS,
    ChunkEnd,
    at_chunk_end,
    current_chunk_end,
    pause_grace_seconds,
    work_in_chunk,
    work_left,
)
from aisched.policy.carbon.emissions import JOULES_PER_KWH, emissions_grams, estimate_emissions, grams_from_joules
from aisched.policy.carbon.forecast import (
    Forecast,
    ForecastCoverageError,
    IntensityPoint,
    forecast_from_points,
    shrink_forecast,
)
from aisched.policy.carbon.plan import CarbonPlan, PlanReason, RunChunk, latest_start
from aisched.policy.carbon.planning import (
    FORECAST_RECHECK,
    DeferrableJob,
    PlanOptions,
    forecast_awaited_until,
    plan_awaiting_forecast,
    plan_start,
)

__all__ = [
    "CHUNK_ENDED",
    "DEFAULT_CHECKPOINT_COST_S",
    "FORECAST_RECHECK",
    "GRACE_MARGIN_S",
    "JOULES_PER_KWH",
    "PAUSED_BETWEEN_CHUNKS",
    "CarbonPlan",
    "ChunkEnd",
    "DeferrableJob",
    "Forecast",
    "ForecastCoverageError",
    "IntensityPoint",
    "PlanOptions",
    "PlanReason",
    "RunChunk",
    "at_chunk_end",
    "current_chunk_end",
    "emissions_grams",
    "estimate_emissions",
    "forecast_awaited_until",
    "forecast_from_points",
    "grams_from_joules",
    "latest_start",
    "pause_grace_seconds",
    "plan_awaiting_forecast",
    "plan_start",
    "shrink_forecast",
    "work_in_chunk",
    "work_left",
]
