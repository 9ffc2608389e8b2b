"""What a TrainingJob tells its user about placement and deferral (aisched.policy.job_messages)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aisched.policy.carbon import CarbonPlan, PlanReason, RunChunk
from aisched.policy.cluster import DomainId
from aisched.policy.job_messages import admitted_message, deferred_message, gang_nodes_message
from aisched.policy.placement import Placement
from tests.levels import RACK

T0 = datetime(2026, 1, 1, 6, 30, tzinfo=UTC)


def placement(domain: DomainId) -> Placement:
    return Placement(nodes=("n1", "n2"), gpus_per_replica=4, domain=domain)


def test_the_admission_names_the_domain_the_gang_landed_in_and_whom_it_preempted() -> None:
    rack = placement(DomainId(RACK, ("z1", "rack-3")))
    assert admitted_message(rack) == "placed in rack-3"
    assert admitted_message(rack, ("ns/a", "ns/b")) == "placed in rack-3 after preempting ns/a, ns/b"


def test_a_gang_spread_over_zones_is_placed_in_the_cluster() -> None:
    assert admitted_message(placement(DomainId(None, ()))) == "placed in the cluster"


def test_the_admitted_condition_gives_the_gang_shape_and_its_nodes_by_rank() -> None:
    assert gang_nodes_message(2, 4, ("n2", "n1")) == "2 x 4 GPUs on n2, n1"


def test_a_deferral_event_says_when_the_job_starts_and_why() -> None:
    plan = CarbonPlan(
        start=T0,
        chunks=(RunChunk(T0, T0 + timedelta(hours=1)),),
        latest_start=T0,
        reason=PlanReason.CLEANEST_WINDOW,
        message="the cleanest hour before the deadline",
    )
    assert deferred_message(plan) == "start deferred to 2026-01-01 06:30 UTC: the cleanest hour before the deadline"
