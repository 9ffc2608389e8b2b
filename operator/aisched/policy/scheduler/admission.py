"""Admission: pending jobs that name no queue wait; the others, in fair order, start where free GPUs
hold them, within their queue's quota.

A pending job's turn is an `Attempt` handed from stage to stage (the order is in
:mod:`aisched.policy.scheduler.cycle`); the stages here are the first ones it meets.
"""

from __future__ import annotations

from dataclasses import replace

from aisched.policy.placement import GangRequest, Placement, Unplaceable, products_by_rank
from aisched.policy.queueing import MILLI, QUEUE_NOT_FOUND, QUOTA_EXCEEDED
from aisched.policy.scheduler.attempt import Attempt
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.preemption import preempt_within_quota
from aisched.policy.scheduler.results import RESERVED_FOR_HIGHER_PRIORITY, Waiting
from aisched.policy.scheduler.state import CycleState


def refuse_unknown_queues(cycle: CycleState) -> None:
    """Jobs naming a queue that does not exist wait (the default queue always exists)."""
    for job in cycle.jobs:
        if job.placement is None and job.queue not in cycle.quotas:
            message = f"queue {job.queue} does not exist; create the Queue or pick an existing one"
            cycle.waiting.append(Waiting(job.key, QUEUE_NOT_FOUND, message))


def pending_in_known_queues(cycle: CycleState) -> list[JobRequest]:
    return [job for job in cycle.jobs if job.placement is None and job.queue in cycle.quotas]


def within_quota(cycle: CycleState, attempt: Attempt) -> bool:
    """A job its queue's quota cannot hold takes quota back from lower priorities of its queue, or waits.

    It does not hold up the jobs behind it.
    """
    if attempt.quota_refusal is None:
        return False
    if attempt.job.replica_set or not preempt_within_quota(cycle, attempt.job, attempt.fewest):
        cycle.waiting.append(Waiting(attempt.job.key, QUOTA_EXCEEDED, attempt.quota_refusal))
    return True


def alike_verdict(cycle: CycleState, attempt: Attempt) -> bool:
    """A job alike to one already left waiting this cycle waits for the same reason."""
    verdict = cycle.blocked.get(attempt.shape)
    if verdict is None:
        return False
    cycle.waiting_for_gpus.append((attempt.job.priority, attempt.job.gpu_type))
    cycle.waiting.append(Waiting(attempt.job.key, *verdict))
    return True


def behind_higher_priorities(cycle: CycleState, attempt: Attempt) -> bool:
    """A service's new replicas wait while a job of higher priority waits for GPUs they could take.

    Replicas are never preempted: started on GPUs that free up a few at a time while a larger
    gang of higher priority waits for all of them, they would keep it waiting for good (its
    reservation covers only GPUs whose running jobs it knows the end of)."""
    job = attempt.job
    if not job.replica_set:
        return False
    higher = [
        priority
        for priority, product in cycle.waiting_for_gpus
        if priority > job.priority and (product is None or job.gpu_type is None or product == job.gpu_type)
    ]
    if not higher:
        return False
    message = f"{len(higher)} job(s) of higher priority wait for GPUs these replicas could take: they start first"
    cycle.waiting.append(Waiting(job.key, RESERVED_FOR_HIGHER_PRIORITY, message))
    return True


def on_free_gpus(cycle: CycleState, attempt: Attempt) -> bool:
    """Start with the most replicas that free GPUs hold; wait for good if no freeing would ever help."""
    job = attempt.job
    outcome = _most_consolidated(cycle, attempt)
    if isinstance(outcome, Placement):
        cycle.admit(job, within_type_quota(cycle, job, attempt.request, outcome, attempt.fewest))
        return True
    if not outcome.transient:
        cycle.waiting.append(Waiting(job.key, outcome.reason, outcome.message))
        return True
    attempt.unplaced = outcome
    return False


def _most_consolidated(cycle: CycleState, attempt: Attempt) -> Placement | Unplaceable:
    """The most replicas in [fewest, most] that free GPUs hold in the tightest domain that count
    could ever get.

    An elastic job held to the domain of its full size and started smaller there could be spread
    over more nodes than its smaller gang needs, and run slower for as long as it runs; each count
    is held to its own tightest domain instead (`CycleState.consolidated`).
    """
    request = attempt.request
    if attempt.job.spread is not None:  # replicas are not a gang: no domain to hold each count to
        return cycle.place_most(request, attempt.fewest)
    outcome = cycle.place(request)
    if isinstance(outcome, Placement) or request.replicas <= attempt.fewest:
        return outcome
    loose = replace(request, required_level=attempt.job.required_level)
    for replicas in range(request.replicas - 1, attempt.fewest - 1, -1):
        outcome = cycle.place(cycle.consolidated(replace(loose, replicas=replicas)))
        if isinstance(outcome, Placement):
            return outcome
    return outcome


def within_type_quota(
    cycle: CycleState, job: JobRequest, request: GangRequest, placement: Placement, fewest: int
) -> Placement:
    """Trim a gang that may take any product to what its queue's cap on the chosen product allows.

    Products without room for `fewest` replicas were excluded before placing, so the trimmed
    gang still has at least `fewest` replicas.
    """
    if placement.gpu_type is None and job.spread is not None:
        return _within_each_type_quota(cycle, job, placement)
    product = placement.gpu_type
    cap = cycle.ledger.quotas[job.queue].gpu_type_quotas.get(product) if product else None
    if cap is None or product is None:
        return placement
    room = cap * MILLI - cycle.ledger.used_by_type[job.queue][product]
    if job.charge(placement.replicas) <= room:
        return placement
    replicas = max(fewest, room // job.replica_milli)
    trimmed = cycle.place_most(replace(request, replicas=replicas, gpu_types=frozenset({product})), fewest)
    return trimmed if isinstance(trimmed, Placement) else placement


def _within_each_type_quota(cycle: CycleState, job: JobRequest, placement: Placement) -> Placement:
    """A service's replicas spread over several products, trimmed to what its queue's cap on each allows.

    Products without room for one replica were excluded before placing: one of each is always kept."""
    caps = cycle.ledger.quotas[job.queue].gpu_type_quotas
    used = cycle.ledger.used_by_type[job.queue]
    left = {p: (cap * MILLI - used[p]) // job.replica_milli for p, cap in caps.items()}
    kept = []
    for rank, product in enumerate(products_by_rank(placement, cycle.snapshot)):
        if product is not None and product in left:
            if left[product] <= 0:
                continue
            left[product] -= 1
        kept.append(rank)
    return placement if len(kept) == placement.replicas else placement.keeping(kept, cycle.snapshot)
