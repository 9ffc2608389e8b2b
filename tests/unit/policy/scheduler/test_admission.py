"""Admission: fair order, queues and quotas, and what a job asks for."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from aisched.api.training_job import TrainingJob
from aisched.policy.cluster import ClusterSnapshot, Node, TaintEffect, Toleration, TolerationOperator
from aisched.policy.placement import Placement
from aisched.policy.queueing import QUEUE_NOT_FOUND, QUOTA_EXCEEDED, QueueQuota
from aisched.policy.scheduler import JobRequest, schedule
from tests.builders import a_training_job
from tests.levels import RACK
from tests.unit.policy.gangs import H100, grid, rack_nodes
from tests.unit.policy.scheduler.cycles import ANY, HOUR, T0, keys, pending, run_on


def test_higher_priority_first_then_fifo() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    jobs = [
        pending("ns/old", 8, created=T0 - HOUR),
        pending("ns/new", 8, created=T0),
        pending("ns/vip", 8, priority=5, created=T0 + HOUR),
    ]
    result = schedule(snapshot, jobs, [], T0)
    assert keys(result)[0] == ["ns/vip"]
    result = schedule(snapshot, jobs[:2], [], T0)
    assert keys(result)[0] == ["ns/old"]


def test_fair_share_gives_the_idle_queue_the_next_gpus() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    busy = run_on(snapshot, pending("ns/busy", 8, queue="a"), ["r-n0"])
    jobs = [busy, pending("ns/a2", 8, queue="a", created=T0 - HOUR), pending("ns/b1", 8, queue="b")]
    queues = [QueueQuota("a", 16), QueueQuota("b", 16)]
    result = schedule(snapshot, jobs, queues, T0)
    assert keys(result)[0] == ["ns/b1"]
    assert result.queues["b"].used_gpus == 8
    assert result.queues["a"].pending_jobs == 1


def test_unknown_queue_and_quota_waits_say_why() -> None:
    snapshot = ClusterSnapshot(grid(1, 1, 4))
    jobs = [pending("ns/lost", 1, queue="nope"), pending("ns/big", 8, replicas=3, queue="team-a")]
    result = schedule(snapshot, jobs, [QueueQuota("team-a", 16)], T0)
    reasons = {w.key: (w.reason, w.message) for w in result.waiting}
    assert reasons["ns/lost"] == (
        QUEUE_NOT_FOUND,
        "queue nope does not exist; create the Queue or pick an existing one",
    )
    assert reasons["ns/big"] == (
        QUOTA_EXCEEDED,
        "queue team-a has 16 of its 16 GPUs free and this asks for 24; it is in no cohort, so it cannot borrow",
    )


def test_a_quota_bound_job_does_not_hold_up_the_queue() -> None:
    snapshot = ClusterSnapshot(grid(1, 1, 4))
    jobs = [pending("ns/big", 8, replicas=3, queue="a", created=T0 - HOUR), pending("ns/small", 8, queue="a")]
    assert keys(schedule(snapshot, jobs, [QueueQuota("a", 16)], T0))[0] == ["ns/small"]


def test_a_higher_priority_job_takes_its_queue_quota_back_from_a_lower_one() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    snapshot = ClusterSnapshot([Node("n1", 8, used_gpus=8), Node("n2", 8)])
    low = JobRequest(
        "ns/low", "team", 0, now, 4, 2, placement=Placement.of_nodes(("n1", "n1"), 4, snapshot), started=now
    )
    high = JobRequest("ns/high", "team", 100, now, 4, 2)
    result = schedule(snapshot, [low, high], [QueueQuota("team", 8)], now)
    assert [p.key for p in result.preempted] == ["ns/low"]
    assert [a.key for a in result.admitted] == ["ns/high"]
    assert "preempted by ns/high" in result.preempted[0].message


def test_a_job_set_back_by_an_interruption_resumes_ahead_of_newcomers() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    # It ran two GPU-hours before the interruption: by attained service alone the newcomer would go first.
    set_back = pending("ns/set-back", 8, created=T0 - HOUR, attained_gpu_seconds=7200.0, set_back=True)
    newcomer = pending("ns/newcomer", 8, created=T0)
    assert keys(schedule(snapshot, [set_back, newcomer], [], T0))[0] == ["ns/set-back"]
    assert keys(schedule(snapshot, [replace(set_back, set_back=False), newcomer], [], T0))[0] == ["ns/newcomer"]


def test_a_job_over_its_queue_quota_takes_back_the_growth_of_its_queue_elastic_jobs() -> None:
    snapshot = ClusterSnapshot([Node("n1", 8), Node("n2", 8)])
    # Asked for 2 x 2 GPUs, grew to 4 x 2 into room an interrupted job left: the queue's whole quota.
    grown = pending("ns/sweep", 2, replicas=2, min_replicas=1, max_replicas=4, queue="team")
    grown = run_on(snapshot, grown, ["n1"] * 4)
    back = pending("ns/back", 4, queue="team", set_back=True)
    result = schedule(snapshot, [grown, back], [QueueQuota("team", 8)], T0)
    assert keys(result) == (["ns/back"], [], [])
    (resize,) = result.resized
    assert (resize.key, resize.placement.replicas) == ("ns/sweep", 2)  # back to what it asked for, no lower


def test_a_job_request_from_a_training_job() -> None:
    manifest = (
        a_training_job("llm")
        .namespace("ml")
        .replicas(4)
        .gpus(8)
        .elastic(2, 6)
        .gpu_type(H100)
        .queue("team-a")
        .priority(7)
        .required_level("Rack")
        .set("expectedDurationSeconds", 3600)
        .set("template.spec.tolerations", [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
        .obj()
    )
    manifest["metadata"]["creationTimestamp"] = "2025-03-01T11:00:00Z"
    request = JobRequest.from_training_job(TrainingJob.model_validate(manifest), capacity_types=ANY)
    assert request == JobRequest(
        key="ml/llm",
        queue="team-a",
        priority=7,
        created=T0 - HOUR,
        gpus_per_replica=8,
        replicas=4,
        min_replicas=2,
        max_replicas=6,
        gpu_type=H100,
        required_level=RACK,
        tolerations=(Toleration("dedicated", TolerationOperator.EXISTS, "", TaintEffect.NO_SCHEDULE),),
        capacity_types=ANY,
        expected_duration=HOUR,
    )


def test_a_job_taking_its_queue_quota_back_keeps_to_its_tightest_domain_as_on_every_other_path() -> None:
    def two_racks(low_on: list[str], other_on: list[str]) -> tuple[list[str], list[str], list[str]]:
        """Two racks of two 4-GPU nodes, the queue's low job and another team's on them, and a new gang: the verdict."""
        snapshot = ClusterSnapshot([*rack_nodes("z", "r1", 2, gpus=4), *rack_nodes("z", "r2", 2, gpus=4)])
        low = run_on(snapshot, pending("ns/low", 4, replicas=2, queue="team"), low_on)
        other = run_on(snapshot, pending("ns/other", 4, replicas=2, queue="others"), other_on)
        high = pending("ns/high", 4, replicas=2, queue="team", priority=10)
        return keys(schedule(snapshot, [low, other, high], [QueueQuota("team", 8), QueueQuota("others", 8)], T0))

    # Taking the low job's quota back would leave the new gang split over two racks: it waits.
    assert two_racks(["r1-n0", "r2-n0"], ["r1-n1", "r2-n1"]) == ([], ["ns/high"], [])
    # Where a rack would hold it whole, it preempts and lands there.
    assert two_racks(["r1-n0", "r1-n1"], ["r2-n0", "r2-n1"]) == (["ns/high"], [], ["ns/low"])
