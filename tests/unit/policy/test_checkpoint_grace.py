"""A checkpoint longer than the grace on a stop is a condition before a notice finds out (policy.checkpoint_grace)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aisched.api import ConditionStatus
from aisched.api.training_job import TrainingJob, TrainingJobPhase, TrainingJobStatus
from aisched.policy.checkpoint_grace import CHECKPOINT_FITS_GRACE, checkpoint_grace_condition
from tests.builders import a_training_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RUNNING = TrainingJobStatus(phase=TrainingJobPhase.PLACING, gpus=8)


def a_job(cost: int | None) -> TrainingJob:
    builder = a_training_job("llm").namespace("ns").gpus(8)
    if cost is not None:
        builder.set("checkpoint", {"path": "/ckpt", "costSeconds": cost})
    obj = builder.obj()
    obj["metadata"]["generation"] = 2
    return TrainingJob.model_validate(obj)


def test_a_save_longer_than_the_grace_is_a_false_condition_that_says_what_to_change() -> None:
    status = checkpoint_grace_condition(a_job(300), RUNNING, 110, T0)
    (condition,) = [c for c in status.conditions if c.type == CHECKPOINT_FITS_GRACE]
    assert (condition.status, condition.reason) == (ConditionStatus.FALSE, "CheckpointLongerThanGrace")
    assert "takes 300s" in condition.message and "get 110s" in condition.message
    assert condition.observed_generation == 2
    assert RUNNING.conditions == []  # the status given is left as it was


def test_a_save_that_fits_is_true_and_unchanged_verdicts_keep_their_time() -> None:
    first = checkpoint_grace_condition(a_job(110), RUNNING, 110, T0)
    again = checkpoint_grace_condition(a_job(110), first, 110, T0 + timedelta(hours=1))
    (condition,) = [c for c in again.conditions if c.type == CHECKPOINT_FITS_GRACE]
    assert (condition.status, condition.last_transition_time) == (ConditionStatus.TRUE, T0)
    assert again is first


def test_a_job_without_checkpoints_gets_no_condition() -> None:
    assert checkpoint_grace_condition(a_job(None), RUNNING, 110, T0) is RUNNING
