"""Worker reports are untrusted input (#27): whatever a termination message holds, the parser
returns bounded values, None, or its own rejection, and nothing else."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.workload.contract import (
    EARLIEST_REPORT_TIME,
    MAX_CLOCK_AHEAD,
    MAX_REPORTED_DURATION_SECONDS,
    MAX_REPORTED_PATH_CHARS,
    MAX_REPORTED_STEP,
    TERMINATION_MESSAGE_MAX_BYTES,
    CheckpointReport,
    RejectedReportError,
    parse_checkpoint_report,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GOOD_TIME = "2026-03-01T11:00:00Z"
INT64_MAX = 2**63 - 1


def line(**fields: Any) -> str:
    """A report line with FIELDS over a good one's (a field set to ... is left out)."""
    document: dict[str, Any] = {"step": 100, "path": "/ckpt/100", "time": GOOD_TIME, "durationSeconds": 2.5}
    document.update(fields)
    return json.dumps({k: v for k, v in document.items() if v is not ...})


def assert_bounded(report: CheckpointReport) -> None:
    assert type(report.step) is int and 0 <= report.step <= MAX_REPORTED_STEP <= INT64_MAX
    assert report.path is None or (0 < len(report.path) <= MAX_REPORTED_PATH_CHARS and report.path.isprintable())
    assert report.time.utcoffset() == timedelta(0)
    assert EARLIEST_REPORT_TIME <= report.time <= NOW + MAX_CLOCK_AHEAD
    assert math.isfinite(report.duration_seconds) and 0 <= report.duration_seconds <= MAX_REPORTED_DURATION_SECONDS


def parse_or_rejection(message: str | None) -> CheckpointReport | RejectedReportError | None:
    """The parser's answer; any exception other than its own rejection fails the test."""
    try:
        report = parse_checkpoint_report(message, now=NOW)
    except RejectedReportError as rejected:
        answer: CheckpointReport | RejectedReportError | None = rejected
    else:
        answer = report
    if isinstance(answer, RejectedReportError):
        assert 0 < len(str(answer)) <= 300  # an event message that never echoes the input at length
    elif answer is not None:
        assert_bounded(answer)
    return answer


# -- anything at all -------------------------------------------------------------------------


@given(st.text())
def test_any_text_is_a_bounded_report_none_or_a_rejection(message: str) -> None:
    parse_or_rejection(message)


@given(st.binary(max_size=5000))
def test_any_bytes_a_kubelet_could_hand_over_are_a_bounded_report_none_or_a_rejection(raw: bytes) -> None:
    parse_or_rejection(raw.decode("utf-8", errors="replace"))


EXTREME_INTS = st.sampled_from([-1, 0, 2**31, 2**53, 2**53 - 1, 2**63 - 1, 2**63, 2**64, 2**80, -(2**63), 10**300])
EXTREME_FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([1e308, -0.0, 5e-324])
JSON_SCALARS = st.none() | st.booleans() | st.integers() | EXTREME_INTS | EXTREME_FLOATS | st.text(max_size=50)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
)
TIMES = (
    st.datetimes(timezones=st.timezones()).map(lambda t: t.isoformat())
    | st.datetimes().map(lambda t: t.isoformat())  # no offset
    | st.sampled_from(["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "1969-12-31T23:59:59Z", ""])
    | st.text(max_size=60)
)
PATHS = (
    st.none() | st.text(max_size=2 * MAX_REPORTED_PATH_CHARS) | st.sampled_from(["\x00", "a\nb", "\ud800", "\x1b[2J"])
)


@settings(max_examples=300)
@given(
    step=JSON_VALUES | EXTREME_INTS,
    path=PATHS | JSON_VALUES,
    stamp=TIMES | JSON_VALUES,
    duration=EXTREME_FLOATS | EXTREME_INTS | JSON_VALUES,
    extra=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3),
)
def test_reports_of_any_shape_and_extreme_values_are_bounded_or_rejected(
    step: object, path: object, stamp: object, duration: object, extra: dict[str, Any]
) -> None:
    document = {**extra, "step": step, "path": path, "time": stamp, "durationSeconds": duration}
    answer = parse_or_rejection(json.dumps(document))  # NaN and Infinity as Python writes them
    assert not isinstance(answer, CheckpointReport) or answer.step == step


@given(st.integers(min_value=0, max_value=MAX_REPORTED_STEP), st.floats(0, MAX_REPORTED_DURATION_SECONDS))
def test_every_report_within_the_bounds_is_taken_as_written(step: int, duration: float) -> None:
    report = parse_checkpoint_report(line(step=step, durationSeconds=duration), now=NOW)
    assert report == CheckpointReport(step, "/ckpt/100", datetime(2026, 3, 1, 11, 0, tzinfo=UTC), duration)


# -- the attacks, one by one -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "why"),
    [
        # The two that halted jobs: an OverflowError on every reconcile, a 422 on every status write.
        (line(time="0001-01-01T00:00:00+14:00"), "before year 1"),
        (line(step=2**80), "25 digits"),
        (line(step=2**63), "out of range"),
        (line(step=MAX_REPORTED_STEP + 1), "out of range"),
        (line(step=-1), "out of range"),
        (line(step=1.5), "fractional"),
        (line(step=True), "boolean"),
        (line(step="12"), "string"),
        (line(step={"$gt": 1}), "object"),
        (line(step=[1]), "list"),
        (line(step=None), "null"),
        ('{"step": ' + "9" * 4000 + ', "time": "2026-03-01T11:00:00Z"}', "4000 digits"),
        ('{"step": 1, "step": 18446744073709551616, "time": "2026-03-01T11:00:00Z"}', "more than once"),
        ('{"step": 1, "time": "2026-03-01T11:00:00Z", "durationSeconds": NaN}', "NaN"),
        ('{"step": 1, "time": "2026-03-01T11:00:00Z", "durationSeconds": Infinity}', "Infinity"),
        ('{"step": 1, "time": "2026-03-01T11:00:00Z", "durationSeconds": 1e400}', "out of range"),
        (line(durationSeconds=-1), "out of range"),
        (line(durationSeconds=MAX_REPORTED_DURATION_SECONDS * 2), "out of range"),
        (line(durationSeconds="long"), "string"),
        (line(time="9999-12-31T23:59:59-14:00"), "before year 1"),  # past year 9999 in UTC, reads as out of range
        (line(time="2026-03-01T11:00:00"), "no offset"),
        (line(time="1969-12-31T23:59:59Z"), "before 1970"),
        (line(time="2026-03-01T13:00:00Z"), "in the future"),
        (line(time="9999-12-31T00:00:00Z"), "in the future"),
        (line(time="yesterday"), "not an RFC 3339"),
        (line(time="2026-03-01T11:00:00Z" + " " * 100), "characters long"),
        (line(time=1700000000), "integer"),
        (line(time=...), "null"),
        (line(path="/ckpt/\x00/x"), "not printable"),
        (line(path="/ckpt/\n/x"), "not printable"),
        (line(path="/ckpt/\x1b[31m"), "not printable"),
        (line(path="\ud800"), "not printable"),
        (line(path="/" + "p" * MAX_REPORTED_PATH_CHARS), "characters long"),
        (line(path=3), "integer"),
        ('{"step": ' + "[" * 2000 + "]" * 2000 + "}", "nested more than 32 deep"),
        ("[" * 3000, "nested more than 32 deep"),  # unreadable, so not known to be no report: refused all the same
        (line(path="/" + "p" * 900) + "\n" + "x" * TERMINATION_MESSAGE_MAX_BYTES, "longer than 4096 bytes"),
        ("é" * (TERMINATION_MESSAGE_MAX_BYTES // 2 + 1), "longer than 4096 bytes"),  # few characters, many bytes
    ],
)
def test_each_known_attack_is_rejected_saying_why(message: str, why: str) -> None:
    with pytest.raises(RejectedReportError, match=re.escape(why)):
        parse_checkpoint_report(message, now=NOW)


def test_the_last_report_decides_so_a_poisoned_one_is_not_passed_over_for_an_older_one() -> None:
    message = line(step=100) + "\n" + line(step=2**80) + "\n"
    with pytest.raises(RejectedReportError):
        parse_checkpoint_report(message, now=NOW)


@pytest.mark.parametrize(
    "message",
    [
        '{"level": "info", "msg": "epoch done", "loss": NaN}',  # a structured log line is no report
        '{"step": 1, "time": "2026-03-01T11:0',  # cut short by a SIGKILL
        "\x00\x00\x00",
        "\ufffd\ufffd not utf-8",
    ],
)
def test_lines_that_are_no_report_are_passed_over(message: str) -> None:
    assert parse_checkpoint_report(message, now=NOW) is None
    older = line(step=7)
    report = parse_checkpoint_report(older + "\n" + message, now=NOW)
    assert report is not None and report.step == 7


def test_a_time_a_little_ahead_of_the_operator_and_any_offset_is_taken_in_utc() -> None:
    report = parse_checkpoint_report(line(time="2026-03-01T12:05:00+00:00"), now=NOW)
    assert report is not None and report.time == NOW + timedelta(minutes=5)
    report = parse_checkpoint_report(line(time="2026-03-02T01:59:00+14:00"), now=NOW)
    assert report is not None and report.time == datetime(2026, 3, 1, 11, 59, tzinfo=UTC)


def test_the_sdk_never_writes_a_report_the_operator_refuses_for_its_path() -> None:
    for path in ("/" + "p" * MAX_REPORTED_PATH_CHARS, "/ckpt/\n"):
        written = CheckpointReport(5, path, NOW, 1.0).to_json()
        assert parse_checkpoint_report(written, now=NOW) == CheckpointReport(5, None, NOW, 1.0)
