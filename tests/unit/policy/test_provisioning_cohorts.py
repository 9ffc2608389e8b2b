"""Provisioning plans what the queues can admit together: a cohort's idle GPUs are one pool, lent once.

Each case runs the real cycle (`schedule`) on a cluster with no room, plans nodes for what it left
waiting, then runs the cycle again on the nodes planned: every node asked for is for a gang the
cycle then admits, and a gang its quota could not admit is asked nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.api.common import CapacityType
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.provisioning import FleetOutlook, ProvisioningPlan, plan_provisioning
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import JobRequest, ScheduleResult, schedule
from aisched.policy.topology import LOCAL_TOPOLOGY
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.test_provisioning import H100, catalog

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BOOT = timedelta(seconds=300)


def gang(key: str, queue: str, replicas: int, *, priority: int = 0, minutes_ago: int = 0) -> JobRequest:
    return JobRequest(
        key,
        queue,
        priority,
        NOW - timedelta(minutes=minutes_ago),
        8,
        replicas,
        gpu_type=H100,
        capacity_types=(CapacityType.SPOT,),
    )


def plan_for(jobs: Sequence[JobRequest], queues: Sequence[QueueQuota]) -> tuple[ScheduleResult, ProvisioningPlan]:
    result = schedule(ClusterSnapshot([]), list(jobs), list(queues), NOW)
    plan = plan_provisioning(
        result, jobs, catalog(), [], now=NOW, boot=BOOT, topology=LOCAL_TOPOLOGY, outlook=FleetOutlook()
    )
    return result, plan


def planned_gpus(plan: ProvisioningPlan) -> dict[str, int]:
    asked: dict[str, int] = {}
    for request in plan.create:
        asked[request.gang] = asked.get(request.gang, 0) + request.count * request.offering.gpus
    return asked


def admitted_on_planned_nodes(
    plan: ProvisioningPlan, jobs: Sequence[JobRequest], queues: Sequence[QueueQuota]
) -> set[str]:
    nodes = [
        node
        for index, request in enumerate(plan.create)
        for node in rack_nodes(request.offering.zone, f"new{index}", request.count, capacity=CapacityType.SPOT)
    ]
    return {a.key for a in schedule(ClusterSnapshot(nodes), list(jobs), list(queues), NOW).admitted}


def test_two_queues_of_one_cohort_get_nodes_for_what_the_cohort_admits_not_for_each_alone() -> None:
    queues = [QueueQuota("a", 8, cohort="c"), QueueQuota("b", 8, cohort="c")]
    jobs = [gang("team-a/big", "a", 2, minutes_ago=1), gang("team-b/big", "b", 2)]
    result, plan = plan_for(jobs, queues)
    assert {w.key for w in result.waiting} == {"team-a/big", "team-b/big"}
    # Each queue alone may take 16 (its 8 and 8 borrowed); the cohort has 16 for both together.
    assert {name: usage.room_gpus for name, usage in result.queues.items() if name != "default"} == {"a": 16, "b": 16}
    assert planned_gpus(plan) == {"team-a/big": 16}  # the first come, as admission takes them
    assert admitted_on_planned_nodes(plan, jobs, queues) == {"team-a/big"}


def test_gangs_within_their_own_quotas_each_get_nodes() -> None:
    queues = [QueueQuota("a", 16, cohort="c"), QueueQuota("b", 16, cohort="c")]
    jobs = [gang("team-a/big", "a", 2), gang("team-b/big", "b", 2)]
    _, plan = plan_for(jobs, queues)
    assert planned_gpus(plan) == {"team-a/big": 16, "team-b/big": 16}
    assert admitted_on_planned_nodes(plan, jobs, queues) == {"team-a/big", "team-b/big"}


def test_the_cohorts_pool_goes_in_fair_order_the_queue_furthest_below_its_share_first() -> None:
    # Queue a's first gang takes a's own 8; of the 16 idle GPUs x lends, b (using none of its share)
    # borrows before a's older 16-GPU gang, which the 8 left then cannot hold.
    queues = [QueueQuota("a", 8, cohort="c"), QueueQuota("b", 0, cohort="c"), QueueQuota("x", 16, cohort="c")]
    jobs = [
        gang("team-a/one", "a", 1, minutes_ago=3),
        gang("team-a/two", "a", 2, minutes_ago=2),
        gang("team-b/one", "b", 1),
    ]
    _, plan = plan_for(jobs, queues)
    assert planned_gpus(plan) == {"team-a/one": 8, "team-b/one": 8}
    assert admitted_on_planned_nodes(plan, jobs, queues) == {"team-a/one", "team-b/one"}


def test_a_borrowing_limit_bounds_what_a_queue_gets_nodes_for() -> None:
    queues = [QueueQuota("a", 8, cohort="c", borrowing_limit=0), QueueQuota("b", 24, cohort="c")]
    jobs = [gang("team-a/big", "a", 2, minutes_ago=1), gang("team-b/one", "b", 1)]
    _, plan = plan_for(jobs, queues)
    assert planned_gpus(plan) == {"team-b/one": 8}


quotas = st.lists(st.tuples(st.integers(0, 3), st.sampled_from([None, 0, 1]), st.booleans()), min_size=1, max_size=3)


@settings(max_examples=80, deadline=None)
@given(
    quotas,
    st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3), st.integers(0, 1)), min_size=1, max_size=5),
)
def test_nodes_are_asked_for_what_the_queues_may_admit_together_and_no_more(
    quota_draws: list[tuple[int, int | None, bool]], gang_draws: list[tuple[int, int, int]]
) -> None:
    queues = [
        QueueQuota(
            f"q{i}",
            8 * nodes,
            cohort="c",
            borrowing_enabled=borrows,
            borrowing_limit=None if limit is None else 8 * limit,
        )
        for i, (nodes, limit, borrows) in enumerate(quota_draws)
    ]
    jobs = [
        gang(f"ns{i}/g{i}", f"q{queue % len(queues)}", replicas, priority=priority, minutes_ago=i)
        for i, (queue, replicas, priority) in enumerate(gang_draws)
    ]
    _, plan = plan_for(jobs, queues)
    asked = planned_gpus(plan)
    queue_of = {job.key: job.queue for job in jobs}
    # Nothing runs: the cohort's quota bounds all it is asked for, each queue's its own and what it may borrow.
    assert sum(asked.values()) <= sum(q.nominal_gpus or 0 for q in queues)
    for quota in queues:
        mine = sum(gpus for key, gpus in asked.items() if queue_of[key] == quota.name)
        may_borrow = 0 if not quota.borrowing_enabled else quota.borrowing_limit
        assert may_borrow is None or mine <= (quota.nominal_gpus or 0) + may_borrow
    # And a gang its own quota holds is never left without nodes for want of them all.
    fits_own = [job for job in jobs if job.replicas * 8 <= (queues[int(job.queue[1:])].nominal_gpus or 0)]
    assert bool(asked) or not fits_own
    # The cycle admits some gang on the nodes asked for: none is asked for nothing.
    admitted = admitted_on_planned_nodes(plan, jobs, queues)
    assert admitted or not asked
