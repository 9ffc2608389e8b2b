"""A pending job's turn in a cycle, as its stages hand it on."""

from __future__ import annotations

from dataclasses import dataclass, replace

from aisched.policy.placement import GangRequest, Unplaceable
from aisched.policy.scheduler.jobs import JobRequest
from aisched.policy.scheduler.state import CycleState


@dataclass(slots=True)
class Attempt:
    """One pending job's try at starting in this cycle: what it asks for, worked out once and shared
    by the stages it goes through."""

    job: JobRequest
    fewest: int
    """Replicas it cannot start with fewer of."""
    quota_refusal: str | None
    """Why its queue's quota cannot hold even `fewest` replicas; the other fields do not matter then."""
    reserved: frozenset[str]
    """Nodes it must keep off so as not to delay the reservation."""
    shape: tuple[object, ...]
    """Jobs alike in everything placement and preemption look at share one verdict until GPUs are released."""
    request: GangRequest
    """As many replicas as the quota allows, off the reserved nodes."""
    smallest: GangRequest
    """`request` cut to `fewest` replicas: what making room and reserving aim for."""
    unplaced: Unplaceable | None = None
    """Why it did not fit on free GPUs, once it was tried there."""

    @classmethod
    def of(cls, cycle: CycleState, job: JobRequest) -> Attempt:
        g = job.gpus_per_replica
        fewest = job.min_replicas if job.elastic and job.min_replicas else job.replicas
        allowance = cycle.ledger.allowance(job.queue, job.gpu_type, job.charge(fewest))
        refused = allowance.refusal is not None
        limit = allowance.max_milli
        most = job.replicas if limit is None or refused else min(job.replicas, limit // job.replica_milli)
        gpu_types = cycle.gpu_types(job, allowance.blocked_gpu_types)
        reserved = cycle.reserved_against(job)
        kept_off = job.excluded_nodes | reserved
        if job.spread is not None:
            # A service's replicas start at once: never on GPUs this cycle freed, which its stops free only later.
            kept_off |= cycle.released_nodes
        shape = (
            job.queue,
            job.priority,
            g,
            job.replica_milli,
            job.share,  # a 7g MIG instance is charged as a whole GPU, and placed elsewhere
            most,
            fewest,
            gpu_types,
            job.required_level,
            job.tolerations,
            job.capacity_types,
            job.excluded_nodes,
            reserved,
            kept_off,  # and, for a service's replicas, the nodes this cycle freed GPUs on
            job.expected_duration is None,
            job.replica_set,  # waits where a gang alike would preempt
        )
        request = cycle.consolidated(job.gang(most, gpu_types, kept_off))
        smallest = request if most == fewest else cycle.consolidated(replace(request, replicas=fewest))
        return cls(job, fewest, allowance.refusal, reserved, shape, request, smallest)
