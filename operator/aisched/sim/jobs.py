"""What the simulator hands its policies: jobs as gangs of pods, what is known of their durations,
and what a policy answers each cycle.

Knowledge of durations (`DurationKnowledge`):

- `none` (the default for every published figure): no scheduler is told how long a job runs.
- `estimate`: a user's estimate, the true duration times a log-normal error (median 1, sigma
  `ESTIMATE_SIGMA`), drawn with a seeded `random.Random` in arrival order (`estimate_duration`).
  No GPU trace publishes users' estimates (Philly, Alibaba and Pollux carry none; Tiresias,
  NSDI 2019, is built on the premise that they are unreliable). HPC logs that do carry them
  (Tsafrir, Etsion and Feitelson, TPDS 2007) find them off by several times, mostly padded
  upwards. The error here is unbiased in log space rather than padded: a short estimate is the
  case that breaks a deadline, so it is not assumed away. Sigma 1.0 puts a third of estimates
  more than 2.7x off, half of them short. Every policy that reads an estimate reads this one.
- `truth`: the true duration, an upper bound no real scheduler has; results say so.

Only aisched reads an estimate (for its backfill); the peers do not use one.

Elastic jobs (`elastic_share`): no trace says which jobs could run on more or fewer GPUs than
they asked for. A seeded share of all jobs, drawn in arrival order whatever their size or model,
is elastic: an elastic job's range is half to twice its replicas (`min_replicas = replicas // 2`,
at least 1; `max_replicas = 2 * replicas`). Replicas are the gang's pods, so a 1-GPU job is one
1-GPU pod that may grow to two, and a 4-GPU job one 4-GPU pod that may grow to 8 GPUs but never
shrink. Jobs of every size are drawn alike because elasticity is a property of the training code
(a checkpoint that reloads on another world size), not of the job's size. Only aisched resizes
jobs (`aisched.sim.scaling` says how fast a resized job runs); the peers run every job at its
requested size, as Kueue, Volcano and Tiresias do with fixed-size gangs. Every published figure
is also given with `elastic_share` 0.
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
NO_ELASTIC = 0.0
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
    min_replicas: int | None = None
    max_replicas: int | None = None
    """Both set: an elastic job, which aisched may run with any replicas in that range."""
    tenant: str = ""
    """The trace's submitter (`TraceJob.tenant`): its queue, where the simulation has queues."""

    @property
    def elastic(self) -> bool:
        return self.min_replicas is not None and self.max_replicas is not None

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
    resized: list[Start] = field(default_factory=list)
    """Running elastic jobs relaunched from their checkpoint on these nodes (one per replica)."""
    wake_at: float | None = None
    """When the policy wants its next cycle even if no job arrives or ends (the operator also
    runs one every resync): when a running gang may first be grown."""


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
    elastic_share: float = NO_ELASTIC,
    seed: int = 0,
) -> list[SimJob]:
    """Jobs as gangs of pods of at most `gpus_per_pod` GPUs (and a node's), the largest divisor that fits.

    A 4-GPU job with `gpus_per_pod` 1 is four pods: where they land is the scheduler's choice.
    `elastic_share` of them, drawn from their own seeded stream (the estimates do not change with
    it, and a larger share keeps the jobs a smaller one made elastic), are elastic.
    """
    rng = random.Random(seed)
    elastic_draws = random.Random(f"elastic-{seed}")
    largest_pod = max(1, min(gpus_per_pod, gpus_per_node))
    jobs = []
    for job in trace:
        per_replica = max(d for d in range(1, min(job.gpus, largest_pod) + 1) if job.gpus % d == 0)
        model = job.model or (models.draw() if models is not None else "")
        replicas = job.gpus // per_replica
        elastic = elastic_draws.random() < elastic_share
        jobs.append(
            SimJob(
                job.key,
                job.arrival,
                job.duration,
                replicas,
                per_replica,
                model,
                _estimate(job.duration, knowledge, rng),
                min_replicas=max(1, replicas // 2) if elastic else None,
                max_replicas=2 * replicas if elastic else None,
                tenant=job.tenant,
            )
        )
    return jobs


def estimate_duration(duration: float, rng: random.Random, sigma: float = ESTIMATE_SIGMA) -> float:
    """A user's estimate of `duration`: log-normal error, median 1 (see the module's docstring)."""
    return max(1.0, duration * math.exp(rng.gauss(0.0, sigma)))


def _estimate(duration: float, knowledge: DurationKnowledge, rng: random.Random) -> float | None:
    if knowledge == DurationKnowledge.TRUTH:
        return duration
    if knowledge == DurationKnowledge.ESTIMATE:
        return estimate_duration(duration, rng)
    return None
