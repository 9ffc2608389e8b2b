"""Reservation and backfill: the first job that still cannot start holds the GPUs it would get when
running jobs end at their expected times.

Later jobs may start only outside those GPUs, or inside them if they are expected to end
before the reservation starts (backfill). Without estimates, the reserved domain stays
closed to newcomers until the job fits, unless the job's queue time-slices: then the job
opens a domain by preempting jobs with more attained service, and holds nothing idle.
"""

from __future__ import annotations

from dataclasses import replace

from aisched.policy.cluster import DomainId
from aisched.policy.job_messages import JobRef, other_job
from aisched.policy.placement import GangRequest, Placement, place_gang, release_all
from aisched.policy.scheduler.attempt import Attempt
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.results import RESERVED_FOR_HIGHER_PRIORITY, Waiting
from aisched.policy.scheduler.state import CycleState, Reservation


def reserve_or_backfill(cycle: CycleState, attempt: Attempt) -> bool:
    """The job waits: for the reservation it now holds, for one it may not backfill, or for GPUs to free up."""
    job, reserved, smallest, outcome = attempt.job, attempt.reserved, attempt.smallest, attempt.unplaced
    assert outcome is not None, "only a job that did not fit on free GPUs gets this far"
    cycle.waiting_for_gpus.append((job.priority, job.gpu_type))
    if reserved and isinstance(cycle.place(replace(smallest, excluded_nodes=job.excluded_nodes)), Placement):
        assert cycle.reservation is not None
        verdict = (RESERVED_FOR_HIGHER_PRIORITY, _backfill_refusal(cycle.reservation, job))
    elif (
        cycle.reservation is None
        and not job.replica_set  # a service's replicas take what is free; they hold nothing idle
        and (reservation := _reserve(cycle, job, smallest)) is not None
    ):
        cycle.reservation = reservation
        message = f"{outcome.message}; {_reservation_words(reservation)}"
        cycle.waiting.append(Waiting(job.key, outcome.reason, message, reservation.start))
        return True
    else:
        verdict = (outcome.reason, outcome.message)
    cycle.blocked[attempt.shape] = verdict
    cycle.waiting.append(Waiting(job.key, *verdict))
    return True


def _reserve(cycle: CycleState, job: JobRequest, request: GangRequest) -> Reservation | None:
    """Where and from when `job` fits as running jobs end, soonest-ending first."""
    ending = sorted(
        cycle.running.values(),
        key=lambda r: (r.end is None, r.end or cycle.now, r.job.started or cycle.now, r.job.key),
    )
    quota = cycle.quotas.get(job.queue)
    time_slices = quota is not None and quota.min_run_seconds is not None
    if time_slices:
        # It holds nothing unless its start is known (below): only the jobs with an end time can
        # tell it. Searching the others too would cost a trial release of thousands of gangs per
        # shape left waiting, to find what is then thrown away.
        ending = [r for r in ending if r.end is not None]

    def fits_after(count: int) -> Placement | None:
        with cycle.snapshot.trial():
            release_all(cycle.snapshot, (running.placement for running in ending[:count]))
            outcome = place_gang(request, cycle.snapshot)
        return outcome if isinstance(outcome, Placement) else None

    if not ending or fits_after(len(ending)) is None:
        return None
    # It cannot fit before enough GPUs are free in all: start the search there. (A share needs
    # fewer whole GPUs than it has replicas, a MIG instance none: its search starts at the first.)
    missing = request.total_gpus - (cycle.snapshot.total_gpus - cycle.snapshot.used_total)
    low = 1
    while request.share is None and low < len(ending) and missing > ending[low - 1].placement.total_gpus:
        missing -= ending[low - 1].placement.total_gpus
        low += 1
    high = len(ending)
    while low < high:
        middle = (low + high) // 2
        if fits_after(middle) is None:
            low = middle + 1
        else:
            high = middle
    placement = fits_after(low)
    assert placement is not None
    ends = [r.end for r in ending[:low]]
    if all(end is not None for end in ends):
        start = max([cycle.now, *(end for end in ends if end is not None)])
        return Reservation(job.key, job.priority, start, frozenset(placement.nodes), placement.domain)
    # Without end times the nodes it will get are a guess. Where the job's queue time-slices, it
    # opens a domain by preempting jobs with more service once they have had their minimum run,
    # so it holds nothing idle in the meantime; elsewhere it holds the whole domain, or it might
    # wait for ever behind newcomers.
    if time_slices:
        return None
    nodes = frozenset(cycle.snapshot.names_in(placement.domain))
    return Reservation(job.key, job.priority, None, nodes, placement.domain)


def _reservation_words(reservation: Reservation) -> str:
    where = _domain_words(reservation.domain)
    if reservation.start is None:
        return f"GPUs in {where} are held for it as they free up"
    return f"expected to start by {reservation.start:%Y-%m-%d %H:%M} UTC in {where}, where GPUs are held for it"


def _backfill_refusal(reservation: Reservation, job: JobRequest) -> str:
    held_for = other_job(JobRef(reservation.key, reservation.priority), seen_from=job)
    head = f"the free GPUs that fit it are held for {held_for} in {_domain_words(reservation.domain)}"
    if reservation.start is None:
        return f"{head} until it starts"
    if job.expected_duration is None:
        return f"{head} from {reservation.start:%Y-%m-%d %H:%M} UTC; set an expected duration to backfill"
    return f"{head} from {reservation.start:%Y-%m-%d %H:%M} UTC, and this job would run past that"


def _domain_words(domain: DomainId) -> str:
    if domain.level is None:
        return "the cluster"
    return f"{domain.level} {domain.label}"
