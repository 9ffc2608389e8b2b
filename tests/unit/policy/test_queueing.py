"""Quota arithmetic and the order pending jobs are considered in."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from aisched.api.queue import Queue
from aisched.policy.queueing import MILLI, QueueQuota, QuotaLedger, fair_order

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Job:
    key: str
    queue: str
    priority: int = 0
    created: datetime = T0


def ledger(*quotas: QueueQuota) -> QuotaLedger:
    return QuotaLedger({q.name: q for q in quotas}, cluster_gpus=128)


def test_fifo_within_a_queue_and_priority_first() -> None:
    jobs = [
        Job("ns/late", "a", created=T0 + timedelta(minutes=2)),
        Job("ns/early", "a", created=T0),
        Job("ns/urgent", "a", priority=5, created=T0 + timedelta(minutes=9)),
    ]
    order = [j.key for j in fair_order(jobs, ledger(QueueQuota("a", 16)))]
    assert order == ["ns/urgent", "ns/early", "ns/late"]


def test_the_queue_furthest_below_its_weighted_share_goes_first_and_shares_are_reread() -> None:
    books = ledger(QueueQuota("a", 16), QueueQuota("b", 16, weight=2))
    books.charge("a", 8 * MILLI, None)  # share 0.5
    books.charge("b", 12 * MILLI, None)  # share 12/16/2 = 0.375
    jobs = [Job(f"ns/a{i}", "a", created=T0) for i in range(2)] + [Job(f"ns/b{i}", "b", created=T0) for i in range(2)]
    order = []
    for job in fair_order(jobs, books):
        order.append(job.key)
        books.charge(job.queue, 4 * MILLI, None)  # admitting moves the queue back
    # b (0.375) -> b is now 0.5 and ties with a: a is taken by created/key -> a then b ...
    assert order == ["ns/b0", "ns/a0", "ns/b1", "ns/a1"]


def test_a_higher_priority_head_beats_a_lower_share() -> None:
    books = ledger(QueueQuota("a", 16), QueueQuota("b", 16))
    books.charge("a", 16 * MILLI, None)
    jobs = [Job("ns/b", "b"), Job("ns/a", "a", priority=1)]
    assert next(j.key for j in fair_order(jobs, books)) == "ns/a"


def test_within_nominal_always_allowed_even_without_cohort() -> None:
    books = ledger(QueueQuota("a", 16))
    books.charge("a", 8 * MILLI, None)
    assert books.allowance("a", None, 8 * MILLI).refusal is None
    refused = books.allowance("a", None, 9 * MILLI)
    assert refused.refusal == (
        "queue a has 8 of its 16 GPUs free and this asks for 9; it is in no cohort, so it cannot borrow"
    )


def test_borrowing_takes_idle_cohort_quota_up_to_the_limit() -> None:
    books = ledger(
        QueueQuota("a", 8, cohort="research", borrowing_limit=8),
        QueueQuota("b", 16, cohort="research"),
    )
    books.charge("a", 8 * MILLI, None)
    books.charge("b", 4 * MILLI, None)
    assert books.allowance("a", None, 8 * MILLI).max_milli == 8 * MILLI  # limit 8, though b leaves 12 idle
    assert books.allowance("a", None, 8 * MILLI).refusal is None
    books.charge("a", 8 * MILLI, None)
    assert books.borrowed("a") == 8 * MILLI
    assert books.allowance("a", None, 1 * MILLI).refusal == (
        "queue a is borrowing: 16 GPUs in use on a quota of 8; borrowing limit reached (8 of 8 borrowed)"
    )
    assert books.allowance("b", None, 4 * MILLI).refusal is None  # b's own quota is still guaranteed


def test_borrowing_stops_when_the_cohort_has_nothing_idle() -> None:
    books = ledger(QueueQuota("a", 8, cohort="c"), QueueQuota("b", 8, cohort="c"))
    books.charge("a", 8 * MILLI, None)
    books.charge("b", 6 * MILLI, None)
    assert books.allowance("a", None, 2 * MILLI).refusal is None
    assert books.allowance("a", None, 3 * MILLI).refusal == (
        "queue a is at its quota: 8 of 8 GPUs in use; cohort c has 2 idle GPUs to lend"
    )


def test_gpu_type_quotas_are_hard_caps() -> None:
    books = ledger(QueueQuota("a", 32, gpu_type_quotas={"H100": 8}, cohort="c"), QueueQuota("b", 64, cohort="c"))
    books.charge("a", 8 * MILLI, "H100")
    refused = books.allowance("a", "H100", 1 * MILLI)
    assert refused.refusal == "queue a allows 8 H100 GPUs and 8 are in use; this asks for 1"
    untyped = books.allowance("a", None, 4 * MILLI)
    assert untyped.refusal is None
    assert untyped.blocked_gpu_types == frozenset({"H100"})


def test_quota_from_a_queue_object() -> None:
    queue = Queue.model_validate(
        {
            "metadata": {"name": "team-a"},
            "spec": {
                "nominalGPUs": 32,
                "gpuTypeQuotas": [{"gpuType": "H100", "gpus": 16}],
                "weight": 3,
                "cohort": "research",
                "borrowing": {"limitGPUs": 8},
            },
        }
    )
    assert QueueQuota.from_queue(queue) == QueueQuota(
        "team-a", 32, {"H100": 16}, weight=3, cohort="research", borrowing_enabled=True, borrowing_limit=8
    )
