"""What the simulator hands its policies: jobs as gangs of pods, what is known of their durations,
and what a policy answers each cycle.

Knowledge of durations (`DurationKnowledge`):

- `none` (the default for every published figure): no scheduler is told how long a job runs.
- `estimate`: a user's estimate, the true duration times a log-normal error (median 1, sigma
  `ESTIMATE_SIGMA`), drawn with a seeded `random.Random` in arrival order. Studies of HPC and
  GPU clusters find user estimates off by several times either way; sigma 1.0 puts a third of
  them more than 2.7x off.
- `truth`: the true duration, an upper bound no real scheduler has; results say so.

Only aisched reads an estimate (for its backfill); the peers do not use one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from aisched.api.common import CapacityType
from aisched.policy.cluster import ClusterSnapshot
from aisched.sim.speed import ModelMix
from aisched.sim.traces import TraceJob

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
ANY_CAPACITY = (CapacityType.ON_DEMAND, CapacityType.SPOT)
ESTIMATE_SIGMA = 1.0
DEFAULT_GPUS_PER_POD = 4


def at(seconds: float) -> datetime:
    """Simulated seconds as the datetimes policy code takes."""
    return EPOCH + timedelta(seconds=seconds)


class DurationKnowledge(StrEnum):
    NONE = "none"
    ESTIMATE = "estimate"
    TRUTH = "truth"


@dataclass(frozen=True, slots=True)
class SimJob:
    key: str
    arrival: float
    duration: float
    """Seconds it runs alone on a consolidated placement."""
    replicas: int
    gpus_per_replica: int
    model: str = ""
    estimate: float | None = None
    """What the scheduler is told of `duration`; None: nothing."""

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def size_class(self) -> str:
        return "1" if self.gpus == 1 else "2-8" if self.gpus <= 8 else ">8"


@dataclass(frozen=True, slots=True)
class Start:
    job: SimJob
    nodes: tuple[str, ...]


@dataclass(slots=True)
class CycleOutcome:
    started: list[Start] = field(default_factory=list)
    stopped: list[SimJob] = field(default_factory=list)
    """Preempted to a checkpoint: back in the queue, their progress kept."""


class Policy(Protocol):
    name: str
    snapshot: ClusterSnapshot

    def submit(self, job: SimJob, now: float) -> None: ...
    def finish(self, job: SimJob, now: float) -> None: ...
    def cycle(self, now: float) -> CycleOutcome: ...


def gangs(
    trace: Sequence[TraceJob],
    gpus_per_node: int,
    *,
    gpus_per_pod: int = DEFAULT_GPUS_PER_POD,
    knowledge: DurationKnowledge = DurationKnowledge.NONE,
    models: ModelMix | None = None,
    seed: int = 0,
) -> list[SimJob]:
    """Jobs as gangs of pods of at most `gpus_per_pod` GPUs (and a node's), the largest divisor that fits.

    A 4-GPU job with `gpus_per_pod` 1 is four pods: where they land is the scheduler's choice.
    """
    rng = random.Random(seed)
    largest_pod = max(1, min(gpus_per_pod, gpus_per_node))
    jobs = []
    for job in trace:
        per_replica = max(d for d in range(1, min(job.gpus, largest_pod) + 1) if job.gpus % d == 0)
        model = job.model or (models.draw() if models is not None else "")
        jobs.append(
            SimJob(
                job.key,
                job.arrival,
                job.duration,
                job.gpus // per_replica,
                per_replica,
                model,
                _estimate(job.duration, knowledge, rng),
            )
        )
    return jobs


def _estimate(duration: float, knowledge: DurationKnowledge, rng: random.Random) -> float | None:
    if knowledge == DurationKnowledge.TRUTH:
        return duration
    if knowledge == DurationKnowledge.ESTIMATE:
        return max(1.0, duration * math.exp(rng.gauss(0.0, ESTIMATE_SIGMA)))
    return None
