"""MIG scenario: jobs asking for MIG profiles arrive and leave; GPUs are statically partitioned or repartitioned.

Strategies, on the same jobs and GPUs:
- `aisched`: a job takes a free instance of its profile (on the busiest GPU that has one); if
  none, an idle GPU (no running instance, so no pod is ever under a repartition) is set to the
  layout that holds the job's profile and best matches the profiles asked for recently, and
  the job starts after `reconfigure_h` (the MIG manager's drain and apply);
- `all_1g`, `all_balanced`: every GPU keeps mig-parted's stock layout;
- `whole_gpu`: no MIG; every job takes a whole GPU.
A job that cannot start when it arrives is refused (counted, not queued). Stranded GPU-hours:
on GPUs running at least one job, the compute slices (of 7) not running a requested profile,
integrated over time (a 1g job alone on a whole GPU strands 6/7 of it).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aisched.policy.sharing.mig import COMPUTE_SLICES, KINDS, MIG_MODELS, STATIC_LAYOUTS, Layout, layout_for

STRATEGIES = ("aisched", "all_1g", "all_balanced", "whole_gpu")


@dataclass(frozen=True)
class MigJob:
    arrival_h: float
    duration_h: float
    kind: str


@dataclass(frozen=True)
class MigRun:
    strategy: str
    admitted: int
    refused: int
    stranded_gpu_hours: float
    repartitions: int


def mig_jobs(
    count: int, mix: dict[str, float], *, gpus: int, load: float, mean_duration_h: float, seed: int
) -> list[MigJob]:
    """COUNT jobs, kinds drawn from MIX, Poisson arrivals at LOAD x the GPUs' compute, exponential durations."""
    rng = np.random.default_rng(seed)
    kinds = list(mix)
    shares = np.array([mix[kind] for kind in kinds]) / sum(mix.values())
    compute = {kind: MIG_MODELS["H100-80GB"][kind].compute for kind in kinds}
    mean_slices = float(sum(share * compute[kind] for kind, share in zip(kinds, shares, strict=True)))
    rate = load * gpus * COMPUTE_SLICES / (mean_slices * mean_duration_h)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=count))
    durations = rng.exponential(mean_duration_h, size=count)
    drawn = rng.choice(len(kinds), size=count, p=shares)
    return [MigJob(float(a), float(d), kinds[int(k)]) for a, d, k in zip(arrivals, durations, drawn, strict=True)]


class _Gpu:
    def __init__(self, model: str, layout: Layout) -> None:
        self.model = model
        self.layout = layout
        self.busy: dict[int, str] = {}  # start slot -> kind of the running job
        self.ready_h = 0.0

    def free_instance(self, kind: str) -> int | None:
        return next((start for k, start in self.layout if k == kind and start not in self.busy), None)

    def used_compute(self) -> int:
        return sum(MIG_MODELS[self.model][kind].compute for kind in self.busy.values())


def simulate_mig(
    models: Sequence[str], jobs: Sequence[MigJob], strategy: str, window: int = 200, reconfigure_h: float = 0.05
) -> MigRun:
    """Run STRATEGY on JOBS over GPUs of MODELS (one entry per GPU)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"no strategy {strategy!r} (there are {', '.join(STRATEGIES)})")
    static = STATIC_LAYOUTS.get(strategy, ())
    gpus = [_Gpu(model, static) for model in models]
    ending: list[tuple[float, int, int, int]] = []  # (end, sequence, gpu, start slot)
    recent: deque[str] = deque(maxlen=window)
    admitted = refused = repartitions = 0
    stranded = 0.0
    now = 0.0

    def advance(to: float) -> None:
        nonlocal now, stranded
        while True:
            step_end = min(to, ending[0][0]) if ending else to
            stranded += (step_end - now) * sum(
                (COMPUTE_SLICES - gpu.used_compute()) / COMPUTE_SLICES for gpu in gpus if gpu.busy
            )
            now = step_end
            if not ending or ending[0][0] > to:
                return
            _, _, index, start = heapq.heappop(ending)
            del gpus[index].busy[start]

    for sequence, job in enumerate(jobs):
        advance(job.arrival_h)
        recent.append(job.kind)
        wanted = "7g" if strategy == "whole_gpu" else job.kind
        holders = [
            (i, slot)
            for i, gpu in enumerate(gpus)
            if gpu.ready_h <= now and (slot := gpu.free_instance(wanted)) is not None
        ]
        start_h = now
        if holders:
            index, start = max(holders, key=lambda held: (len(gpus[held[0]].busy), -held[0]))
        elif strategy == "aisched" and (idle := [i for i, gpu in enumerate(gpus) if not gpu.busy]):
            demand = Counter(recent)
            index = idle[0]
            gpu = gpus[index]
            gpu.layout = layout_for(gpu.model, job.kind, {k: float(demand[k]) for k in KINDS})
            gpu.ready_h = start_h = now + reconfigure_h
            repartitions += 1
            start = next(s for k, s in gpu.layout if k == job.kind)
        else:
            refused += 1
            continue
        admitted += 1
        gpus[index].busy[start] = job.kind
        heapq.heappush(ending, (start_h + job.duration_h, sequence, index, start))
    advance(max((end for end, *_ in ending), default=now))
    return MigRun(strategy, admitted, refused, round(stranded, 3), repartitions)
