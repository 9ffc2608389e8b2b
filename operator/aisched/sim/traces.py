"""Job traces the simulator replays: Microsoft Philly and Alibaba GPU v2023 (see ../shared/data/README.md).

Every format becomes a list of `TraceJob` (arrival and duration in seconds from
the trace's start, GPUs asked for), sorted by arrival.

- Philly (`timestamp,duration,num_gpus,...,cluster`): taken as is; `cluster`, the virtual
  cluster (a team with its own share of the GPUs) that ran the job, is its tenant.
- Alibaba pod lists (`openb_pod_list_*.csv`): one pod is one job. Pods without
  GPUs are skipped; a fractional GPU (`gpu_milli` < 1000, GPU sharing) counts as
  one whole GPU, since aisched hands out whole `nvidia.com/gpu`s.
  With times (`creation_time`, `scheduled_time`, `deletion_time`): arrival is the
  creation time, duration the time from scheduling to deletion; pods that were
  never scheduled are skipped (their run time is unknown).
  Without times (`openb_pod_list_multigpu50.csv` keeps arrival order only):
  arrivals are a Poisson process and durations are log-normal with a median of
  30 minutes and sigma 1.5 (mean about 1.5 hours), drawn from `random.Random(seed)`;
  the arrival rate makes the offered load `load` times the cluster's GPUs.
- Pollux workloads (`name,time,application,num_replicas,batch_size`): arrival and model as
  given, one GPU per replica at the replica count asked. They carry no durations (Pollux
  derives them from each model's convergence); durations are synthesised like the Alibaba
  ones above (log-normal, seeded) and results say so.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

SYNTHETIC_MEDIAN_SECONDS = 1800.0
SYNTHETIC_SIGMA = 1.5


class TraceFormat(StrEnum):
    PHILLY = "philly"
    ALIBABA = "alibaba"
    POLLUX = "pollux"


@dataclass(frozen=True, slots=True)
class TraceJob:
    key: str
    arrival: float
    """Seconds from the trace's first arrival."""
    duration: float
    gpus: int
    model: str = ""
    """The model it trains, when the trace names one (the Pollux workloads do)."""
    tenant: str = ""
    """Who submitted it, when the trace says (Philly's virtual clusters); "" when it does not."""


def offered_gpus(jobs: list[TraceJob]) -> float:
    """GPUs busy on average between the first and the last arrival if every job started on arrival.

    Runs past the last arrival are cut off there: a job that runs for weeks after a two-day
    slice would otherwise size the cluster for work the slice never asks of it.
    """
    if not jobs:
        return 0.0
    first, last = jobs[0].arrival, jobs[-1].arrival
    if last <= first:
        return 0.0
    return sum(j.gpus * max(0.0, min(j.arrival + j.duration, last) - j.arrival) for j in jobs) / (last - first)


RAMP_WINDOW_S = 86400.0
RAMP_SHARE = 0.1


def ramp_length(jobs: Sequence[TraceJob], window_s: float = RAMP_WINDOW_S, share: float = RAMP_SHARE) -> int:
    """How many jobs open the trace before its arrivals reach a steady rate: those before the first
    window (of `window_s`, counted from the first arrival) with at least `share` of the mean
    window's arrivals (over every window up to the last arrival: a long trickle lowers the mean
    far less than it would the median).

    A trace cut from a longer log often opens with a trickle while the cluster was being brought
    up (Philly's public file: 71 jobs over its first 20 days, then about a thousand a day); replayed,
    that trickle only stretches the run. A trace with no such opening loses nothing.
    """
    if len(jobs) < 2:
        return 0
    first = jobs[0].arrival
    counts = [0] * (int((jobs[-1].arrival - first) // window_s) + 1)
    for job in jobs:
        counts[int((job.arrival - first) // window_s)] += 1
    mean = len(jobs) / len(counts)
    steady = next(i for i, count in enumerate(counts) if count >= share * mean)
    return sum(counts[:steady])


def detect_format(path: Path) -> TraceFormat:
    with path.open(newline="") as f:
        header = next(csv.reader(f), [])
    if "num_gpus" in header:
        return TraceFormat.PHILLY
    if "num_gpu" in header:
        return TraceFormat.ALIBABA
    if "application" in header and "num_replicas" in header:
        return TraceFormat.POLLUX
    raise ValueError(
        f"{path}: neither a Philly (num_gpus), an Alibaba pod list (num_gpu) nor a Pollux workload "
        f"(application,num_replicas) header: {header}"
    )


def read_trace(
    path: Path,
    trace_format: TraceFormat | None = None,
    *,
    limit: int | None = None,
    skip: int | None = 0,
    cluster_gpus: int = 0,
    load: float = 0.9,
    seed: int = 0,
) -> list[TraceJob]:
    """`limit` jobs (by arrival) of a trace file, after the first `skip` (None: its opening ramp, `ramp_length`)."""
    trace_format = trace_format or detect_format(path)
    if skip is None:
        skip = ramp_length(read_trace(path, trace_format, cluster_gpus=cluster_gpus, load=load, seed=seed))
    end = None if limit is None else skip + limit
    if trace_format == TraceFormat.PHILLY:
        jobs = sorted(_philly(path), key=lambda j: (j.arrival, j.key))[skip:end]
    elif trace_format == TraceFormat.POLLUX:
        jobs = _pollux(path, seed=seed)[skip:end]
    else:
        jobs = _alibaba(path, end, cluster_gpus=cluster_gpus, load=load, seed=seed)[skip:]
    if not jobs:
        return []
    start = jobs[0].arrival
    return [replace(j, arrival=j.arrival - start) for j in jobs]


def _philly(path: Path) -> Iterator[TraceJob]:
    with path.open(newline="") as f:
        for index, row in enumerate(csv.DictReader(f)):
            gpus = int(float(row["num_gpus"]))
            duration = float(row["duration"])
            if gpus < 1 or duration <= 0:
                continue
            arrival = datetime.fromisoformat(row["timestamp"]).replace(tzinfo=UTC).timestamp()
            yield TraceJob(f"philly/{index}", arrival, duration, gpus, tenant=row.get("cluster") or "")


def _pollux(path: Path, *, seed: int) -> list[TraceJob]:
    with path.open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: (float(r["time"]), r["name"]))
    rng = random.Random(seed)
    return [
        TraceJob(
            f"pollux/{row['name']}",
            float(row["time"]),
            max(1.0, rng.lognormvariate(math.log(SYNTHETIC_MEDIAN_SECONDS), SYNTHETIC_SIGMA)),
            max(1, int(row["num_replicas"])),
            row["application"],
        )
        for row in rows
    ]


def _alibaba(path: Path, limit: int | None, *, cluster_gpus: int, load: float, seed: int) -> list[TraceJob]:
    with path.open(newline="") as f:
        rows = [row for row in csv.DictReader(f) if _whole_gpus(row) > 0]
    if rows and "creation_time" in rows[0]:
        return sorted(_alibaba_timed(rows), key=lambda j: (j.arrival, j.key))[:limit]
    rows = rows[:limit]
    return _alibaba_synthetic(rows, cluster_gpus=cluster_gpus, load=load, seed=seed)


def _whole_gpus(row: dict[str, str]) -> int:
    gpus = int(row["num_gpu"] or 0)
    return gpus if gpus > 0 else 0


def _alibaba_timed(rows: list[dict[str, str]]) -> Iterator[TraceJob]:
    for row in sorted(rows, key=lambda r: (int(r["creation_time"]), r["name"])):
        if not row.get("scheduled_time") or not row.get("deletion_time"):
            continue
        duration = float(row["deletion_time"]) - float(row["scheduled_time"])
        if duration > 0:
            yield TraceJob(f"alibaba/{row['name']}", float(row["creation_time"]), duration, _whole_gpus(row))


def _alibaba_synthetic(rows: list[dict[str, str]], *, cluster_gpus: int, load: float, seed: int) -> list[TraceJob]:
    if cluster_gpus <= 0:
        raise ValueError("a trace without times needs the cluster's GPU count to set the arrival rate")
    rng = random.Random(seed)
    mean_duration = SYNTHETIC_MEDIAN_SECONDS * math.exp(SYNTHETIC_SIGMA**2 / 2)
    mean_gpus = sum(_whole_gpus(r) for r in rows) / max(len(rows), 1)
    rate = load * cluster_gpus / (mean_gpus * mean_duration)  # jobs per second
    jobs, clock = [], 0.0
    for row in rows:
        duration = rng.lognormvariate(math.log(SYNTHETIC_MEDIAN_SECONDS), SYNTHETIC_SIGMA)
        jobs.append(TraceJob(f"alibaba/{row['name']}", clock, max(duration, 1.0), _whole_gpus(row)))
        clock += rng.expovariate(rate)
    return jobs
