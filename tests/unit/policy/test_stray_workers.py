"""What makes a pod a stray of a TrainingJob, and what taking one back needs: pure decisions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from aisched.kube.builders import worker_pod_name
from aisched.policy.stray_workers import (
    ORPHAN_GRACE,
    PodMarks,
    Removal,
    WorkerName,
    orphan_due,
    removal,
    stray_of,
    worker_name,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# DNS-1123 subdomain names, as a TrainingJob's: what the API server lets a tenant choose.
JOB_NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,40}[a-z0-9])?", fullmatch=True)
WORKER = PodMarks(
    namespace="ns",
    name="llm-g3-w1",
    kind="TrainingJob",
    job="llm",
    generation="3",
    rank="1",
    terminating=False,
    tracked=True,
)


@given(JOB_NAMES, st.integers(0, 10**9 - 1), st.integers(0, 4095))
def test_every_name_the_builders_give_a_worker_reads_back_as_it_was_made(job: str, generation: int, rank: int) -> None:
    assert worker_name(worker_pod_name(job, generation, rank)) == WorkerName(job, generation, rank)


def test_a_job_whose_own_name_looks_like_a_workers_is_read_right() -> None:
    assert worker_name("a-g1-w0-g2-w5") == WorkerName("a-g1-w0", 2, 5)
    for name in ("llm-worker-0", "llm-g1", "g1-w0", "llm-g1-w", "llm-gx-w0", "llm-g1-w0-", "svc-0a1b2c3d4e-7"):
        assert worker_name(name) is None, name


def test_a_worker_labelled_as_its_name_says_is_no_stray() -> None:
    assert stray_of(WORKER) is None


def test_a_pod_named_as_a_worker_whose_labels_disagree_is_a_stray_of_the_job_its_name_names() -> None:
    for changed in (
        replace(WORKER, kind=None, job=None, generation=None, rank=None),  # every label taken off
        replace(WORKER, job=None),
        replace(WORKER, job="other"),  # passed off as another job's
        replace(WORKER, rank="0"),
        replace(WORKER, generation="4"),
        replace(WORKER, kind="InferenceService"),
    ):
        assert stray_of(changed) == ("ns", "llm"), changed


def test_a_pod_named_as_no_worker_is_no_stray_whatever_its_labels() -> None:
    assert stray_of(replace(WORKER, name="mine", kind=None, job=None)) is None
    assert stray_of(replace(WORKER, name="llm-worker-1")) is None


def test_taking_a_pod_back_deletes_it_unless_going_and_lets_the_finalizer_go() -> None:
    assert removal(WORKER) == Removal("ns", "llm-g3-w1", delete=True, release=True)
    assert removal(replace(WORKER, tracked=False)) == Removal("ns", "llm-g3-w1", delete=True, release=False)
    assert removal(replace(WORKER, terminating=True)) == Removal("ns", "llm-g3-w1", delete=False, release=True)
    assert removal(replace(WORKER, terminating=True, tracked=False)) is None
    assert removal(WORKER, release=False) == Removal("ns", "llm-g3-w1", delete=True, release=False)
    assert removal(replace(WORKER, terminating=True), release=False) is None


def test_a_pod_of_a_gone_job_is_the_operators_to_delete_once_the_collector_had_its_turn() -> None:
    assert not orphan_due(T0, T0)
    assert not orphan_due(T0, T0 + ORPHAN_GRACE - timedelta(microseconds=1))
    assert orphan_due(T0, T0 + ORPHAN_GRACE)
    assert orphan_due(T0, T0 + timedelta(seconds=5), grace=timedelta(seconds=5))
