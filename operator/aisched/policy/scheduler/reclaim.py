"""Reclaiming quota lent through InferenceService replicas: which replicas a lending queue's job may
take back, and in which order. Pure; `preemption.make_room` weighs them beside borrowing gangs.

A replica is a one-replica gang here (`CycleState.service_replicas`). A job whose queue stays
within its nominal quota may take the replicas other queues of its cohort run while those queues
borrow, up to its own priority: lowest priority first, then the newest (a replica started last is
the one that borrowed last, and has served least).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.state import CycleState, RunningGang


def victim_order(running: RunningGang) -> tuple[int, float, str]:
    """Lowest priority first, then the most recently started (least work lost)."""
    job = running.job
    return job.priority, -(job.started or job.created).timestamp(), job.key


def reclaimable_replicas(cycle: CycleState, job: JobRequest, cohort: str) -> list[RunningGang]:
    """The replicas other queues of COHORT run that JOB may reclaim: up to its priority, in victim order,
    those started at one time newest name first (a service's replicas are numbered as they are made)."""
    replicas = [
        running
        for running in cycle.service_replicas.values()
        if running.job.queue != job.queue
        and running.job.priority <= job.priority
        and cycle.ledger.in_cohort(running.job.queue, cohort)
    ]
    replicas.sort(key=lambda r: r.job.key, reverse=True)
    replicas.sort(key=lambda r: victim_order(r)[:2])  # stable: the names' order stays among equals
    return replicas


def replicas_rank(victims: Iterable[str], order: Mapping[str, int]) -> tuple[int, ...]:
    """Where the replicas among VICTIMS (keys) stand in ORDER: plans alike, the one taking the first goes."""
    return tuple(sorted(order[key] for key in victims if key in order))


def may_take_back(cycle: CycleState, replica: JobRequest, taken_back: dict[str, int]) -> bool:
    """Whether a plan that already takes TAKEN_BACK (milli, by queue) of replicas may take REPLICA too:
    only while its queue still borrows, so a service keeps what its queue holds within its nominal quota
    (but for the part of the last one taken that straddles it, as a gang's does). Counts it if so."""
    queue = replica.queue
    if cycle.ledger.borrowed(queue) <= taken_back.get(queue, 0):
        return False
    taken_back[queue] = taken_back.get(queue, 0) + replica.held_milli
    return True
