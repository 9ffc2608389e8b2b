"""Parts of GPUs are charged to the queue in GPU-equivalents (thousandths): a 30% worker is 300, so a
queue of one GPU takes three of them and not four, and fair share and attained service count the parts."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import MILLI, QUOTA_EXCEEDED, QueueQuota
from aisched.policy.scheduler import JobRequest, schedule
from aisched.policy.scheduler.service import attained_gpu_seconds
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import T0, keys, pending, run_on

ONE_GPU = [QueueQuota("tiny", 1, borrowing_limit=0)]


def fraction(key: str, milli: int, replicas: int = 1, queue: str = "tiny") -> JobRequest:
    return pending(key, 1, replicas, milli_per_replica=milli, queue=queue)


def test_a_queue_of_one_gpu_admits_three_thirty_percent_workers_but_not_four() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1, gpus=8))
    three = schedule(snapshot, [fraction("ns/three", 300, replicas=3)], ONE_GPU, T0)
    assert keys(three)[0] == ["ns/three"]
    usage = three.queues["tiny"]
    assert (usage.used_milli, usage.used_gpus, usage.room_milli) == (900, 1, 100)
    four = schedule(snapshot, [fraction("ns/four", 300, replicas=4)], ONE_GPU, T0)
    assert keys(four)[1] == ["ns/four"]
    (waiting,) = four.waiting
    assert waiting.reason == QUOTA_EXCEEDED
    assert "this asks for 1.2" in waiting.message


def test_single_workers_fill_the_quota_to_the_thousandth() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1, gpus=8))
    jobs = [fraction(f"ns/w{i}", 300) for i in range(4)]
    admitted, waiting, _ = keys(schedule(snapshot, jobs, ONE_GPU, T0))
    assert (len(admitted), len(waiting)) == (3, 1)
    # A 10% worker still fits in the last 100 thousandths.
    tenth = fraction("ns/tenth", 100, queue="tiny")
    assert "ns/tenth" in keys(schedule(snapshot, [*jobs, tenth], ONE_GPU, T0))[0]


def test_a_running_share_is_charged_what_it_holds_and_leaves_the_rest() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1, gpus=8))
    node = snapshot.nodes()[0].name
    running = run_on(snapshot, fraction("ns/run", 250, replicas=2), [node, node])
    result = schedule(snapshot, [running, fraction("ns/more", 500), fraction("ns/over", 100)], ONE_GPU, T0)
    assert result.queues["tiny"].used_milli == 500 + 500 + 0  # the running 2 x 250 and the 500 admitted
    assert keys(result)[0] == ["ns/more"] and keys(result)[1] == ["ns/over"]


def test_attained_service_counts_the_part_held() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1, gpus=8))
    node = snapshot.nodes()[0].name
    job = run_on(snapshot, fraction("ns/run", 300, replicas=2), [node, node], started=T0)
    assert attained_gpu_seconds(job, T0 + timedelta(seconds=100)) == 60.0  # 0.6 GPU for 100 s
    whole = run_on(snapshot, pending("ns/whole", 1, 2), [node, node], started=T0)
    assert attained_gpu_seconds(whole, T0 + timedelta(seconds=100)) == 200.0


def test_fair_share_orders_queues_by_the_parts_they_hold() -> None:
    """Queue a holds 0.3 of a GPU, b a whole one: a is further below its share and goes first."""
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1, gpus=8))
    node = snapshot.nodes()[0].name
    queues = [QueueQuota("a", 2), QueueQuota("b", 2)]
    held_a = run_on(snapshot, fraction("ns/a-run", 300, queue="a"), [node])
    held_b = run_on(snapshot, pending("ns/b-run", 1, queue="b"), [node])
    a_next = fraction("ns/a-next", 1000, queue="a")
    b_next = replace(pending("ns/b-next", 1, queue="b"), created=T0 - timedelta(hours=1))
    # Each queue has room for one more GPU-equivalent; 7 - 2 GPUs free: both start, a's first.
    admitted = keys(schedule(snapshot, [held_a, held_b, b_next, a_next], queues, T0))[0]
    assert admitted == ["ns/a-next", "ns/b-next"]


@given(
    milli=st.integers(1, MILLI),
    replicas=st.integers(1, 6),
    quota=st.integers(1, 4),
)
def test_charged_never_exceeds_the_quota_and_equals_what_admitted_gangs_hold(
    milli: int, replicas: int, quota: int
) -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2, gpus=8))
    jobs = [fraction(f"ns/j{i}", milli, replicas=replicas) for i in range(5)]
    result = schedule(snapshot, jobs, [QueueQuota("tiny", quota, borrowing_limit=0)], T0)
    held = sum(a.placement.replicas * milli for a in result.admitted)
    assert result.queues["tiny"].used_milli == held <= quota * MILLI
    # Nothing was left waiting for quota that the quota could still hold.
    if any(w.reason == QUOTA_EXCEEDED for w in result.waiting):
        assert held + replicas * milli > quota * MILLI
