"""Threshold mode: run when the forecast is below a fixed intensity, and never later than the latest start."""

from __future__ import annotations

import math
from datetime import timedelta

from aisched.policy.carbon.forecast import EPS_S
from aisched.policy.carbon.offsets import OffsetJob, plan_from_offsets
from aisched.policy.carbon.plan import CarbonPlan, PlanReason
from aisched.policy.carbon.slots import Slots, chunks_from_selection, trim_to_work


def plan_threshold(job: OffsetJob, threshold: float, interruptible: bool, min_chunk: timedelta) -> CarbonPlan:
    fc = job.forecast
    if interruptible:
        return _plan_threshold_chunks(job, threshold, min_chunk.total_seconds())
    step = fc.step_seconds
    t = job.now
    horizon = min(job.latest, fc.total_seconds - EPS_S)
    while t <= horizon + EPS_S:
        if fc.values[fc.step_index(t)] < threshold:
            when = "now" if t <= job.now + EPS_S else f"at {fc.at_offset(t):%Y-%m-%d %H:%M} UTC"
            return plan_from_offsets(
                job, [job.run_from(t)], PlanReason.BELOW_THRESHOLD, f"forecast below {threshold:.0f} gCO2eq/kWh {when}"
            )
        t = (math.floor(t / step + EPS_S) + 1) * step
    return plan_from_offsets(
        job,
        [job.run_from(job.latest)],
        PlanReason.THRESHOLD_NOT_REACHED,
        f"forecast never below {threshold:.0f} gCO2eq/kWh before the latest start; starting then",
    )


def _plan_threshold_chunks(job: OffsetJob, threshold: float, min_chunk: float) -> CarbonPlan:
    """Run in every stretch below the threshold; whatever is left runs as late as possible."""
    fc = job.forecast
    slots = Slots.between(fc, job.now, min(job.end_bound, fc.total_seconds))
    clean = [i for i, a in enumerate(slots.starts) if fc.values[fc.step_index(a)] < threshold]
    runs = [(a, b) for a, b in chunks_from_selection(slots, clean) if b - a >= min_chunk - EPS_S]
    trimmed = trim_to_work(runs, job)
    if trimmed is not None:
        return plan_from_offsets(
            job, trimmed, PlanReason.BELOW_THRESHOLD, f"runs while the forecast is below {threshold:.0f} gCO2eq/kWh"
        )
    # Keep the longest prefix of clean runs that still leaves room for the rest at the end.
    for keep in range(len(runs), 0, -1):
        kept = runs[:keep]
        done = sum(b - a for a, b in kept) - job.first_overhead(kept[0][0]) - job.overhead * (keep - 1)
        tail_start = job.end_bound - (job.work - done) - job.overhead
        if tail_start >= kept[-1][1] - EPS_S:
            chunks = [*kept, (tail_start, job.end_bound)]
            if tail_start <= kept[-1][1] + EPS_S:  # the tail carries on from the last clean run
                chunks = [*kept[:-1], (kept[-1][0], job.end_bound - job.overhead)]
            return plan_from_offsets(
                job,
                chunks,
                PlanReason.THRESHOLD_NOT_REACHED,
                f"too little time below {threshold:.0f} gCO2eq/kWh; the rest runs just before the deadline",
            )
    return plan_from_offsets(
        job,
        [job.run_from(job.latest)],
        PlanReason.THRESHOLD_NOT_REACHED,
        f"too little time below {threshold:.0f} gCO2eq/kWh; starting at the latest start",
    )
