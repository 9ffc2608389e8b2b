"""What a TrainingJob tells its user about placement and deferral (aisched.policy.job_messages)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aisched.policy.carbon import CarbonPlan, PlanReason, RunChunk
from aisched.policy.cluster import DomainId
from aisched.policy.job_messages import (
    JobRef,
    admitted_message,
    deferred_message,
    gang_nodes_message,
    other_job,
    preempted_message,
    shrunk_message,
)
from aisched.policy.placement import Placement
from tests.levels import RACK

T0 = datetime(2026, 1, 1, 6, 30, tzinfo=UTC)


def placement(domain: DomainId) -> Placement:
    return Placement(nodes=("n1", "n2"), gpus_per_replica=4, domain=domain)


def test_the_admission_names_the_domain_the_gang_landed_in_and_whom_it_preempted() -> None:
    rack = placement(DomainId(RACK, ("z1", "rack-3")))
    assert admitted_message(rack, (), "ns/big") == "placed in rack-3"
    assert admitted_message(rack, ("ns/a", "ns/b"), "ns/big") == "placed in rack-3 after preempting ns/a, ns/b"


def test_the_admission_counts_the_jobs_of_other_namespaces_it_preempted_and_names_none() -> None:
    rack = placement(DomainId(RACK, ("z1", "rack-3")))
    message = admitted_message(rack, ("ns/a", "team-b/secret", "team-c/other"), "ns/big")
    assert message == "placed in rack-3 after preempting ns/a, 2 jobs of other namespaces"
    assert admitted_message(rack, ("team-b/secret",), "ns/big") == (
        "placed in rack-3 after preempting 1 job of other namespaces"
    )


def test_a_gang_spread_over_zones_is_placed_in_the_cluster() -> None:
    assert admitted_message(placement(DomainId(None, ())), (), "ns/a") == "placed in the cluster"


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


def test_a_job_of_another_namespace_is_told_by_its_priority_and_a_shared_queue_only() -> None:
    victim = JobRef("team-a/train", 0, "shared")
    assert other_job(JobRef("team-a/hi", 5, "other"), seen_from=victim) == "team-a/hi (priority 5)"
    assert other_job(JobRef("team-b/hi", 5, "shared"), seen_from=victim) == "a job of priority 5 in queue shared"
    assert other_job(JobRef("team-b/hi", 5, "team-b-q"), seen_from=victim) == "a job of priority 5 of another namespace"
    assert other_job(JobRef("team-b/hi", 5), seen_from=victim) == "a job of priority 5 of another namespace"


def test_a_preempted_jobs_message_names_no_other_namespace() -> None:
    victim = JobRef("team-a/train", 0, "team-a-q")
    by = JobRef("team-b/secret-project", 5, "team-b-q")
    message = preempted_message(victim, by, "32 GPUs in one Rack")
    assert message == "preempted by a job of priority 5 of another namespace; it will be queued again"
    shrunk = shrunk_message(victim, by, before=3, after=1)
    assert shrunk == "shrunk from 3 to 1 replicas to make room for a job of priority 5 of another namespace"
    for text in (message, shrunk):
        assert "team-b" not in text and "secret-project" not in text
    own = preempted_message(victim, JobRef("team-a/big", 5, "team-a-q"), "32 GPUs in one Rack")
    assert own == "preempted by team-a/big (priority 5), which needs 32 GPUs in one Rack; it will be queued again"
