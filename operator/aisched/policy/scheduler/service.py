"""Attained service: how much GPU-time a job has had, and the band it puts the job in.

Nobody knows how long a job will run, but a job that has already run long is likely to run long
yet (training durations are heavy-tailed). Ordering by attained service rather than arrival lets
short jobs through first without being told durations (least attained service, as Tiresias,
NSDI 2019, does in two dimensions: GPUs x time). Service is discretised into bands so jobs of
one band keep FIFO order among them and are not preempted for each other; a job in a lower band
may preempt one in a higher band once that one has run its queue's minimum run time, to a
checkpoint and as a whole gang.

Band edges grow tenfold from `FIRST_BAND_GPU_SECONDS` (1, 10, 100 GPU-hours): a single-GPU job
leaves band 0 after an hour, a 64-GPU gang after a minute. They are a design choice, not fitted
to any trace. The first edge is a parameter (the operator's `firstServiceBandGpuSeconds`), so a
test cluster sees a gang change bands in seconds.
"""

from __future__ import annotations

from datetime import datetime

from aisched.policy.queueing import MILLI
from aisched.policy.scheduler.jobs import JobRequest

FIRST_BAND_GPU_SECONDS = 3600.0
BAND_GROWTH = 10.0
BANDS = 4


def attained_gpu_seconds(job: JobRequest, now: datetime) -> float:
    """Service of earlier runs plus the current one's so far."""
    current = 0.0
    if job.placement is not None and job.started is not None:
        current = job.held_milli / MILLI * max(0.0, (now - job.started).total_seconds())
    return job.attained_gpu_seconds + current


def service_band(gpu_seconds: float, first_edge: float = FIRST_BAND_GPU_SECONDS) -> int:
    band, edge = 0, first_edge
    while band < BANDS - 1 and gpu_seconds >= edge:
        band += 1
        edge *= BAND_GROWTH
    return band


def ran_long_enough(job: JobRequest, now: datetime, min_run_seconds: float) -> bool:
    """Has the running gang had its minimum run since it last started?"""
    return job.started is not None and (now - job.started).total_seconds() >= min_run_seconds
