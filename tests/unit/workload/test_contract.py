"""The operator/worker contract: environment both ways, and the checkpoint report."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisched.workload import (
    CHECKPOINT_DIR_ENV,
    CHECKPOINT_INTERVAL_ENV,
    DEFAULT_CHECKPOINT_INTERVAL_SECONDS,
    DEFAULT_TERMINATION_MESSAGE_PATH,
    GANG_GENERATION_ENV,
    RESUME_PATH_ENV,
    RESUME_STEP_ENV,
    TERMINATION_MESSAGE_MAX_BYTES,
    TERMINATION_MESSAGE_PATH_ENV,
    CheckpointReport,
    RejectedReportError,
    ResumePoint,
    WorkerEnvironment,
    parse_checkpoint_report,
)

NOON = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def test_fresh_start_has_no_resume_point_and_defaults() -> None:
    environment = WorkerEnvironment.from_env({})
    assert environment.resume is None
    assert environment.checkpoint_dir is None
    assert environment.checkpoint_interval_seconds == DEFAULT_CHECKPOINT_INTERVAL_SECONDS
    assert environment.gang_generation == 0
    assert environment.termination_message_path == DEFAULT_TERMINATION_MESSAGE_PATH


def test_reads_what_the_operator_sets() -> None:
    environment = WorkerEnvironment.from_env(
        {
            CHECKPOINT_DIR_ENV: "/ckpt/job",
            CHECKPOINT_INTERVAL_ENV: "1234.5",
            RESUME_STEP_ENV: "900",
            RESUME_PATH_ENV: "/ckpt/job/step-900.pt",
            GANG_GENERATION_ENV: "3",
            TERMINATION_MESSAGE_PATH_ENV: "/tmp/message",
        }
    )
    assert environment == WorkerEnvironment(
        checkpoint_dir="/ckpt/job",
        checkpoint_interval_seconds=1234.5,
        resume=ResumePoint(900, "/ckpt/job/step-900.pt"),
        gang_generation=3,
        termination_message_path="/tmp/message",
    )


@given(
    checkpoint_dir=st.none() | st.text(alphabet="abc/-_", min_size=1, max_size=20),
    interval=st.integers(min_value=1, max_value=86400) | st.floats(min_value=0.5, max_value=86400),
    resume=st.none() | st.builds(ResumePoint, st.integers(0, 10**9), st.none() | st.text(alphabet="xyz/.", min_size=1)),
    generation=st.integers(0, 1000),
)
def test_what_the_operator_writes_the_worker_reads_back(
    checkpoint_dir: str | None, interval: float, resume: ResumePoint | None, generation: int
) -> None:
    written = WorkerEnvironment(checkpoint_dir, float(interval), resume, generation)
    assert WorkerEnvironment.from_env(written.to_env()) == written


def test_resume_variables_are_absent_on_a_fresh_start() -> None:
    env = WorkerEnvironment(checkpoint_dir="/c", checkpoint_interval_seconds=600).to_env()
    assert RESUME_STEP_ENV not in env
    assert RESUME_PATH_ENV not in env
    assert env[CHECKPOINT_INTERVAL_ENV] == "600"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (RESUME_STEP_ENV, "ten"),
        (RESUME_STEP_ENV, "-1"),
        (CHECKPOINT_INTERVAL_ENV, "0"),
        (CHECKPOINT_INTERVAL_ENV, "nan"),
        (CHECKPOINT_INTERVAL_ENV, "soon"),
        (GANG_GENERATION_ENV, "1.5"),
    ],
)
def test_a_malformed_variable_fails_loudly_naming_it(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        WorkerEnvironment.from_env({name: value})


def test_report_is_one_json_line_in_the_documented_shape() -> None:
    line = CheckpointReport(1200, "/ckpt/step-1200.pt", NOON, 41.5).to_json()
    assert line.endswith("\n")
    assert line.count("\n") == 1
    assert json.loads(line) == {
        "step": 1200,
        "path": "/ckpt/step-1200.pt",
        "time": "2025-01-01T12:00:00.000Z",
        "durationSeconds": 41.5,
    }


def test_report_round_trips_and_normalises_time_to_utc() -> None:
    paris = timezone(timedelta(hours=1))
    report = CheckpointReport(7, None, datetime(2025, 1, 1, 13, 0, tzinfo=paris), 2.0)
    parsed = parse_checkpoint_report(report.to_json(), now=NOON)
    assert parsed == CheckpointReport(7, None, NOON, 2.0)


def test_a_path_too_long_for_the_termination_message_is_dropped_not_truncated() -> None:
    line = CheckpointReport(5, "/" + "p" * 5000, NOON, 1.0).to_json()
    assert len(line.encode()) <= TERMINATION_MESSAGE_MAX_BYTES
    assert parse_checkpoint_report(line, now=NOON) == CheckpointReport(5, None, NOON, 1.0)


def test_the_last_valid_report_wins_over_earlier_ones_and_log_lines() -> None:
    older = CheckpointReport(1, "/a", NOON, 1.0).to_json()
    newer = CheckpointReport(2, "/b", NOON + timedelta(minutes=5), 1.0).to_json()
    message = f"Traceback (most recent call last):\n{older}{newer}some log line after\n"
    assert parse_checkpoint_report(message, now=NOON) == CheckpointReport(2, "/b", NOON + timedelta(minutes=5), 1.0)


@pytest.mark.parametrize(
    "message",
    [
        None,
        "",
        "Error: CUDA out of memory",
        '{"step": 12, "path": "/a", "time": "2025-01-01T12:00:00Z", "durationSe',  # cut by SIGKILL
        "[1, 2, 3]",
        '{"msg": "a JSON log line, with no step"}',
    ],
)
def test_garbage_is_no_report(message: str | None) -> None:
    assert parse_checkpoint_report(message, now=NOON) is None


@pytest.mark.parametrize(
    "message",
    [
        '{"step": -1, "path": "/a", "time": "2025-01-01T12:00:00Z", "durationSeconds": 1}',
        '{"step": 1.5, "path": "/a", "time": "2025-01-01T12:00:00Z", "durationSeconds": 1}',
        '{"step": true, "path": "/a", "time": "2025-01-01T12:00:00Z", "durationSeconds": 1}',
        '{"step": 1, "path": 3, "time": "2025-01-01T12:00:00Z", "durationSeconds": 1}',
        '{"step": 1, "path": "/a", "time": "yesterday", "durationSeconds": 1}',
        '{"step": 1, "path": "/a", "time": "2025-01-01T12:00:00", "durationSeconds": 1}',  # no zone
        '{"step": 1, "path": "/a", "time": "2025-01-01T12:00:00Z", "durationSeconds": "long"}',
        '{"step": 1, "path": "/a", "time": "2025-01-01T12:00:00Z", "durationSeconds": NaN}',
    ],
)
def test_a_report_with_a_wrong_value_is_rejected(message: str) -> None:
    """Rejected, not passed over: the operator says so on the job (tests/unit/workload/test_untrusted_reports.py)."""
    with pytest.raises(RejectedReportError):
        parse_checkpoint_report(message, now=NOON)
