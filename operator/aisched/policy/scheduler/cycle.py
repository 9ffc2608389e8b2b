"""One scheduling cycle: which pending jobs start where, which wait and why, who is preempted or resized.

`schedule(snapshot, jobs, queues, now)` is the whole decision. The controller
calls it with what it knows; the simulator calls it with what it simulates.
It reads the snapshot and leaves it as it found it.

The order of the stages is written once, below, as data (Volcano's `actions`):
`STAGES` for the cycle, `PENDING_JOB_STAGES` for each pending job's turn. A pending
job goes through its stages until one settles it (admitted, or waiting with a reason)
before the next job in fair order has its turn, so a job admitted by making room is
counted when the jobs behind it are placed. The rules, in that order:

1. Jobs naming a queue that does not exist wait (the default queue always exists).
2. Pending jobs are considered by priority, then band of attained service (least
   GPU-time had first, `service`; a job an interruption set back before every band),
   then fair share among queues, then FIFO (`queueing.fair_order`). A job that its
   queue's quota cannot hold takes back its queue's elastic growth and preempts its
   queue's lower priorities, or waits; it does not hold up the jobs behind it.
3. A job that fits is admitted with a `Placement`; an elastic job starts with the
   most replicas between `min_replicas` and `replicas` that fit in the tightest
   domain that many could get.
4. A job that does not fit for lack of free GPUs first tries to make room: it
   shrinks elastic jobs towards their minimum (an equal priority only takes back
   the replicas growth added), then preempts whole gangs of lower
   priority (its own queue's, or queues borrowing beyond their quota), or of equal
   priority and a higher band of attained service once they have run their queue's
   minimum run time (time-slicing, to a checkpoint); it chooses the tightest domain
   and there the cheapest set of victims (lowest priority, fewest gangs, least work lost).
   Never half a gang, never a higher priority.
5. The first job that still cannot start gets a reservation: the GPUs it would
   get when running jobs end at their expected times. Later jobs may start only
   outside those GPUs, or inside them if they are expected to end before the
   reservation starts (backfill). Without estimates, the reserved domain stays
   closed to newcomers until the job fits, unless the job's queue time-slices (4.
   opens it then, and nothing is held idle).
6. Left-over GPUs grow running elastic jobs towards `max_replicas`, next to where
   they run and only as far as the grown gang stays in the tightest domain it could
   get, once they have run their queue's minimum run time on their placement, when no
   job of higher priority waits for GPUs (one of equal priority takes the growth back
   when it can start, and the reserved GPUs are left alone).
7. A cycle admits at most `admissions_per_cycle` gangs (`ADMISSIONS_PER_CYCLE`); the
   pending jobs it did not reach are `deferred`, nothing grows, and the caller runs
   the next cycle at once. Each admission is a launch the caller carries out before
   its next cycle: thousands at once held every other job's turn for minutes.

InferenceServices' new replicas (`JobRequest.replica_set`, from `policy.decision`) take turns
in the same order. They start only on free GPUs, as many as fit; they never preempt, shrink or
reserve, and are never preempted; so they wait while a job of higher priority waits for GPUs
they could take (`admission.behind_higher_priorities`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import QueueQuota, fair_order
from aisched.policy.scheduler import admission, backfill, growth, preemption
from aisched.policy.scheduler.attempt import Attempt
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.results import ScheduleResult
from aisched.policy.scheduler.service import FIRST_BAND_GPU_SECONDS
from aisched.policy.scheduler.state import ADMISSIONS_PER_CYCLE, CycleState, HeldGpus

CycleStage = Callable[[CycleState], None]
PendingJobStage = Callable[[CycleState, Attempt], bool]
"""Settles the job (True: admitted, or left waiting with a reason) or hands it to the next stage (False)."""

PENDING_JOB_STAGES: tuple[PendingJobStage, ...] = (
    admission.within_quota,  # over quota: take it back from lower priorities of the queue, or wait
    admission.alike_verdict,  # a job alike to one already left waiting waits for the same reason
    admission.behind_higher_priorities,  # a service's replicas leave GPUs to higher jobs waiting for them
    admission.on_free_gpus,  # start where free GPUs hold it
    preemption.make_room,  # shrink elastic jobs, then preempt lower-priority gangs
    backfill.reserve_or_backfill,  # wait: the first such job holds GPUs, later ones start only around them
)


def admit_in_fair_order(cycle: CycleState) -> None:
    """Each pending job, in fair order, goes through `PENDING_JOB_STAGES` until one settles it,
    until the cycle has admitted its most: the jobs after that wait for the next cycle."""
    order = fair_order(admission.pending_in_known_queues(cycle), cycle.ledger, band=cycle.turn)
    for job in order:
        if len(cycle.admitted) >= cycle.admissions_per_cycle:
            cycle.deferred = (job.key, *(later.key for later in order))
            return
        attempt = Attempt.of(cycle, job)
        for stage in PENDING_JOB_STAGES:
            if stage(cycle, attempt):
                break


STAGES: tuple[CycleStage, ...] = (
    admission.refuse_unknown_queues,
    admit_in_fair_order,
    growth.grow_elastic,
)


def schedule(
    snapshot: ClusterSnapshot,
    jobs: Sequence[JobRequest],
    queues: Sequence[QueueQuota],
    now: datetime,
    *,
    admissions_per_cycle: int = ADMISSIONS_PER_CYCLE,
    first_band_gpu_seconds: float = FIRST_BAND_GPU_SECONDS,
    held_elsewhere: Sequence[HeldGpus] = (),
) -> ScheduleResult:
    """Decide one cycle. The snapshot is used as scratch space and restored before returning."""
    with snapshot.trial():
        cycle = CycleState(
            snapshot,
            jobs,
            queues,
            now,
            admissions_per_cycle=admissions_per_cycle,
            first_band_gpu_seconds=first_band_gpu_seconds,
            held_elsewhere=held_elsewhere,
        )
        for stage in STAGES:
            stage(cycle)
        return cycle.result()
