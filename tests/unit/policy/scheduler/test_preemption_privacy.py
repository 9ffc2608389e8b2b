"""What a cycle writes about one tenant's jobs names no job of another namespace (its status and Events)."""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import schedule
from aisched.policy.scheduler.results import ScheduleResult
from tests.levels import RACK
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import HOUR, T0, pending, run_on
from tests.unit.policy.scheduler.test_backfill import _backfill_cluster

SECRETS = ("team-b", "secret-project")


def messages_of(result: ScheduleResult, namespace: str) -> list[str]:
    """Every text the cycle gives the jobs of NAMESPACE: preemptions, resizes, waits."""
    texts = [p.message for p in result.preempted if p.key.startswith(f"{namespace}/")]
    texts += [r.message for r in result.resized if r.key.startswith(f"{namespace}/")]
    texts += [w.message for w in result.waiting if w.key.startswith(f"{namespace}/")]
    return texts


def test_a_gang_preempted_for_another_namespaces_job_is_told_its_priority_not_its_name() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r0", 4))
    victims = [run_on(snapshot, pending(f"team-a/low{i}", 8, priority=0), [f"r0-n{i}"]) for i in range(4)]
    preemptor = pending("team-b/secret-project", 8, replicas=4, priority=5, required_level=RACK)
    result = schedule(snapshot, [*victims, preemptor], [], T0)
    assert sorted(p.key for p in result.preempted) == [f"team-a/low{i}" for i in range(4)]
    # Both are in the default queue: the one fact they share besides the priority.
    assert {p.message for p in result.preempted} == {
        "preempted by a job of priority 5 in queue default; it will be queued again"
    }
    assert not any(secret in text for text in messages_of(result, "team-a") for secret in SECRETS)


def test_a_gang_shrunk_for_another_namespaces_job_is_not_told_its_name() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 4))
    elastic = run_on(
        snapshot,
        pending("team-a/elastic", 8, replicas=3, min_replicas=1, max_replicas=3, priority=1, queue="shared"),
        ["r-n0", "r-n1", "r-n2"],
    )
    fixed = run_on(snapshot, pending("team-a/fixed", 8, priority=0, queue="shared"), ["r-n3"])
    hi = pending("team-b/secret-project", 8, replicas=2, priority=5, queue="shared")
    result = schedule(snapshot, [elastic, fixed, hi], [QueueQuota("shared", 32)], T0)
    (resize,) = result.resized
    assert resize.message == "shrunk from 3 to 1 replicas to make room for a job of priority 5 in queue shared"
    assert not any(secret in text for text in messages_of(result, "team-a") for secret in SECRETS)


def test_a_job_waiting_behind_another_namespaces_reservation_is_not_told_its_name() -> None:
    snapshot, running = _backfill_cluster()
    big = pending("team-b/secret-project", 8, replicas=4, required_level=RACK, created=T0 - HOUR)
    with snapshot.trial():
        snapshot.release({"r0-n0": 8})
        freed = [j for j in running if j.key != "ns/r0-0"]
        result = schedule(snapshot, [*freed, big, pending("team-a/long", 8, expected_duration=5 * HOUR)], [], T0)
    waits = {w.key: w.message for w in result.waiting}
    assert waits["team-a/long"] == (
        "the free GPUs that fit it are held for a job of priority 0 of another namespace in Rack r0 "
        "from 2025-03-01 16:00 UTC, and this job would run past that"
    )
    assert not any(secret in text for text in messages_of(result, "team-a") for secret in SECRETS)
