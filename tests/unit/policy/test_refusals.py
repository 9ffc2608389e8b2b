"""A gang whose workers the API server refuses (aisched.policy.refusals)."""

from __future__ import annotations

from datetime import UTC, datetime

from aisched.api import ConditionStatus
from aisched.api.training_job import TrainingJob, TrainingJobPhase, TrainingJobStatus
from aisched.policy.refusals import FAILED_CREATE_RELEASE, failed_create, refusal_retry_at, workers_created
from tests.builders import a_training_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Phase = TrainingJobPhase


def a_job(status: TrainingJobStatus, generation: int = 3) -> TrainingJob:
    obj = a_training_job("llm").namespace("ns").gpus(8).obj()
    obj["metadata"]["generation"] = generation
    job = TrainingJob.model_validate(obj)
    job.status = status
    return job


def test_refused_workers_are_a_condition_until_the_bound_then_the_gang_gives_its_gpus_back_and_sits_out() -> None:
    placing = TrainingJobStatus(phase=Phase.PLACING, reason="Admitted", gpus=8, observed_generation=3)
    job = a_job(placing)
    first = failed_create(job, placing, "forbidden: privileged", T0)
    again = failed_create(a_job(first), first, "forbidden: privileged", T0 + FAILED_CREATE_RELEASE / 2)
    assert (again.phase, again.gpus) == (Phase.PLACING, 8)
    (created,) = [c for c in again.conditions if c.type == "WorkersCreated"]
    assert (created.status, created.reason, created.last_transition_time) == (ConditionStatus.FALSE, "FailedCreate", T0)

    released_at = T0 + FAILED_CREATE_RELEASE
    released = failed_create(a_job(again), again, "forbidden: privileged", released_at)
    assert (released.phase, released.reason, released.gpus) == (Phase.QUEUED, "FailedCreate", 0)
    assert "WorkersCreated" not in {c.type for c in released.conditions}  # the next placement has a bound of its own
    assert refusal_retry_at(a_job(released), released_at) == released_at + FAILED_CREATE_RELEASE
    assert refusal_retry_at(a_job(released), released_at + FAILED_CREATE_RELEASE) is None
    assert refusal_retry_at(a_job(released, generation=4), released_at) is None  # a new spec is tried at once


def test_created_workers_end_a_refusal_and_add_no_condition_otherwise() -> None:
    placing = TrainingJobStatus(phase=Phase.PLACING, gpus=8)
    assert workers_created(a_job(placing), placing, T0) is placing
    refused = failed_create(a_job(placing), placing, "forbidden", T0)
    (created,) = [c for c in workers_created(a_job(refused), refused, T0).conditions if c.type == "WorkersCreated"]
    assert created.status == ConditionStatus.TRUE
