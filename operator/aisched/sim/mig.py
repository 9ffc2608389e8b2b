"""MIG scenario: jobs asking for MIG profiles arrive and leave; GPUs are statically partitioned or repartitioned.

Strategies, on the same jobs and GPUs:
- `aisched`: a job takes a free instance of its profile (on the busiest GPU that has one); if
  none, an idle GPU (no running instance, so no pod is ever under a repartition) is set to the
  layout that holds the job's profile and best matches the profiles asked for recently, and
  the job starts after `reconfigure_h` (the MIG manager's drain and apply);
- `all_1g`, `all_balanced`: every GPU keeps mig-parted's stock layout;
- `fitted_static`: every GPU keeps the layout `fit_static_partition` chose for it from the
  jobs of a past window (never the evaluated ones): the static partition an operator who
  studied last period's demand would set;
- `whole_gpu`: no MIG; every job takes a whole GPU.
A job that cannot start when it arrives is refused (counted, not queued). Stranded GPU-hours:
on GPUs running at least one job, the compute slices (of 7) not running a requested profile,
integrated over time (a 1g job alone on a whole GPU strands 6/7 of it).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aisched.policy.sharing.mig import (
    COMPUTE_SLICES,
    KINDS,
    MIG_MODELS,
    STATIC_LAYOUTS,
    Layout,
    layout_for,
    maximal_layouts,
)

STRATEGIES = ("aisched", "all_1g", "all_balanced", "whole_gpu")
# The most instances one GPU's layout holds (seven 1g).
MAX_INSTANCES_PER_GPU = COMPUTE_SLICES
# Needs a partition (one layout per GPU) passed in: fit_static_partition's, from a past window.
FITTED_STATIC = "fitted_static"


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
    partition: tuple[Layout, ...] = ()  # the fixed layout of each GPU (fitted_static only)


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
    models: Sequence[str],
    jobs: Sequence[MigJob],
    strategy: str,
    window: int = 200,
    reconfigure_h: float = 0.05,
    *,
    partition: Sequence[Layout] = (),
) -> MigRun:
    """Run STRATEGY on JOBS over GPUs of MODELS (one entry per GPU); `fitted_static` keeps PARTITION's layouts."""
    if strategy == FITTED_STATIC:
        if len(partition) != len(models):
            raise ValueError(f"{FITTED_STATIC} needs one layout per GPU ({len(models)}), got {len(partition)}")
        gpus = [_Gpu(model, layout) for model, layout in zip(models, partition, strict=True)]
    elif strategy in STRATEGIES:
        gpus = [_Gpu(model, STATIC_LAYOUTS.get(strategy, ())) for model in models]
    else:
        raise ValueError(f"no strategy {strategy!r} (there are {', '.join((*STRATEGIES, FITTED_STATIC))})")
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
    return MigRun(strategy, admitted, refused, round(stranded, 3), repartitions, tuple(partition))


def erlang_b(servers: int, offered: float) -> float:
    """The share of arrivals a loss system of SERVERS refuses at OFFERED load (Erlangs): Erlang's B formula.

    Exact for Poisson arrivals whatever the durations' law, which is what a static partition is
    for one kind: its instances are a pool that only that kind's jobs use, and a job that
    finds them all busy is refused.
    """
    blocked = 1.0
    for count in range(1, servers + 1):
        blocked = offered * blocked / (count + offered * blocked)
    return blocked


def fit_static_partition(models: Sequence[str], past: Sequence[MigJob], max_passes: int = 20) -> tuple[Layout, ...]:
    """One layout per GPU of MODELS: the fixed partition under which PAST's demand would admit the most jobs.

    PAST is a window of jobs seen before the evaluated ones. Per kind, its arrival rate and
    offered load (job-hours per hour) give each kind's admitted rate for a count of its
    instances by Erlang B; the fit maximises the sum over kinds, each GPU taking one of its
    model's maximal valid layouts (mig-parted could apply any of them). It starts from the
    GPUs laid out one at a time, each with the layout that adds the most, then moves one GPU
    to another layout while that admits more (a local optimum, deterministic: ties keep the
    earlier layout). Jobs are counted, not compute, as `MigRun.admitted` counts them.
    """
    if not past:
        raise ValueError("no past jobs to fit a partition to")
    span = max(job.arrival_h for job in past) - min(job.arrival_h for job in past)
    if span <= 0:
        raise ValueError("the past window's jobs all arrive at one instant: no rate to fit")
    rate = {kind: sum(1 for job in past if job.kind == kind) / span for kind in KINDS}
    offered = {kind: sum(job.duration_h for job in past if job.kind == kind) / span for kind in KINDS}
    most = MAX_INSTANCES_PER_GPU * len(models)
    # admitted[kind][c]: admitted jobs per hour of KIND with c instances of it.
    admitted = {
        kind: [rate[kind] * (1.0 - erlang_b(c, offered[kind])) if rate[kind] else 0.0 for c in range(most + 1)]
        for kind in KINDS
    }
    instances = {
        model: [Counter(kind for kind, _ in layout) for layout in maximal_layouts(model)] for model in set(models)
    }

    def value(held: Counter[str]) -> float:
        return math.fsum(admitted[kind][held[kind]] for kind in KINDS)

    held: Counter[str] = Counter()
    chosen: list[int] = []
    for model in models:
        options = instances[model]
        best = max(range(len(options)), key=lambda i: (value(held + options[i]), -i))
        chosen.append(best)
        held += options[best]
    for _ in range(max_passes):
        improved = False
        for gpu, model in enumerate(models):
            options = instances[model]
            without = held - options[chosen[gpu]]
            current = value(held)
            best = max(range(len(options)), key=lambda i: (value(without + options[i]), -i))
            if value(without + options[best]) > current + 1e-12:
                chosen[gpu], held, improved = best, without + options[best], True
        if not improved:
            break
    return tuple(maximal_layouts(model)[i] for model, i in zip(models, chosen, strict=True))
