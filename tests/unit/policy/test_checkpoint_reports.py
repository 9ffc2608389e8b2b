"""Reading worker reports (aisched.policy.checkpoint_reports): a rejected one is no report, and no
report, whatever it says, makes a status the API server refuses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.api.training_job import CheckpointRecord, TrainingJobStatus
from aisched.policy.checkpoint_reports import read_report, rejection_message
from aisched.policy.job_status import record_checkpoints
from aisched.workload.contract import CheckpointReport

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LAST_GOOD = CheckpointRecord(step=100, path="/ckpt/100", time=NOW - timedelta(hours=1))
INT64 = range(-(2**63), 2**63)
POISONED = (
    json.dumps({"step": 200, "path": "/ckpt/200", "time": "0001-01-01T00:00:00+14:00"}),
    json.dumps({"step": 2**80, "path": "/ckpt/huge", "time": "2026-03-01T11:30:00Z"}),
)


def good(step: int) -> str:
    return CheckpointReport(step, f"/ckpt/{step}", NOW - timedelta(minutes=5), 3.0).to_json()


def test_each_poisoned_report_is_rejected_with_a_reason_and_no_report() -> None:
    for message in POISONED:
        reading = read_report(message, NOW)
        assert reading.report is None
        assert reading.rejection


def test_a_rejected_report_leaves_the_last_good_checkpoint_as_the_resume_point() -> None:
    for message in POISONED:
        alone = TrainingJobStatus(replicas=1, last_checkpoint=LAST_GOOD)
        assert record_checkpoints(alone, [("0", read_report(message, NOW).report)]) == alone
        # A gang whose other rank saved further still resumes where every rank's good report says.
        pair = TrainingJobStatus(replicas=2, last_checkpoint=LAST_GOOD)
        readings = [("0", read_report(good(300), NOW).report), ("1", read_report(message, NOW).report)]
        assert record_checkpoints(pair, readings).last_checkpoint == LAST_GOOD


def test_the_warning_names_the_worker_the_reason_and_the_checkpoint_kept() -> None:
    message = rejection_message("llm-g2-w1", "1", "step is out of range", LAST_GOOD)
    assert "llm-g2-w1" in message and "rank 1" in message and "step is out of range" in message
    assert "step 100" in message
    assert "no checkpoint" in rejection_message("llm-g1-w0", None, "time is in the future", None)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**53, 2**63, 2**80, -1, 10**40])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
MESSAGES = (
    st.builds(
        lambda step, path, time, duration: json.dumps(
            {"step": step, "path": path, "time": time, "durationSeconds": duration}
        ),
        st.integers(min_value=-1, max_value=2**70) | JSON_VALUES,
        st.none() | st.text(max_size=1100) | JSON_VALUES,
        st.datetimes(timezones=st.timezones()).map(datetime.isoformat) | JSON_VALUES,
        st.floats(allow_nan=True, allow_infinity=True) | JSON_VALUES,
    )
    | st.text()
    | st.none()
)


def ints_in(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, dict):
        return [i for v in value.values() for i in ints_in(v)]
    if isinstance(value, list):
        return [i for v in value for i in ints_in(v)]
    return []


@settings(max_examples=300)
@given(st.lists(MESSAGES, min_size=1, max_size=3), st.none() | st.just(LAST_GOOD))
def test_the_status_built_from_any_reports_is_one_the_api_server_accepts(
    messages: list[str | None], last: CheckpointRecord | None
) -> None:
    status = TrainingJobStatus(replicas=len(messages), last_checkpoint=last)
    readings = [(str(rank), read_report(message, NOW).report) for rank, message in enumerate(messages)]
    wire = record_checkpoints(status, readings).to_wire()
    body = json.dumps(wire, allow_nan=False)  # the API server takes no NaN or Infinity
    assert all(i in INT64 for i in ints_in(wire))  # nor an integer past int64 (a 422 on every write)
    recorded = TrainingJobStatus.model_validate(json.loads(body)).last_checkpoint
    if recorded is not None:
        assert 0 <= recorded.step < 2**53
        assert datetime(1970, 1, 1, tzinfo=UTC) <= recorded.time <= NOW + timedelta(minutes=10)
        assert recorded.path is None or (len(recorded.path) <= 1024 and recorded.path.isprintable())
