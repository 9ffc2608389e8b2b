"""The contract between the operator and its workers: environment in, checkpoint report out.

Both sides import these names, so the operator that writes the environment and
the SDK that reads it cannot drift apart. The package docstring describes the
contract for people; this module is its single definition.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

CHECKPOINT_DIR_ENV = "AISCHED_CHECKPOINT_DIR"
CHECKPOINT_INTERVAL_ENV = "AISCHED_CHECKPOINT_INTERVAL_SECONDS"
RESUME_STEP_ENV = "AISCHED_RESUME_STEP"
RESUME_PATH_ENV = "AISCHED_RESUME_PATH"
GANG_GENERATION_ENV = "AISCHED_GANG_GENERATION"
TERMINATION_MESSAGE_PATH_ENV = "AISCHED_TERMINATION_MESSAGE_PATH"

# Kubernetes' default terminationMessagePath; the kubelet copies the file into
# status.containerStatuses[].state.terminated.message when the container ends.
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# The kubelet truncates a termination message beyond this many bytes.
TERMINATION_MESSAGE_MAX_BYTES = 4096
# Used when the operator passes no interval (a worker started by hand).
DEFAULT_CHECKPOINT_INTERVAL_SECONDS = 1800.0
# Exit status of a worker that stopped on SIGTERM after saving its state: EX_TEMPFAIL
# from sysexits.h ("try again later"). Not 0, which would make the pod Succeeded and
# look like a finished job; not 143 (128 + SIGTERM), which a worker killed without
# saving also returns.
CHECKPOINTED_EXIT_CODE = 75

# Bounds on what the operator takes from a report: what a worker writes is untrusted.
# The largest integer every JSON reader (JavaScript's included) holds exactly, far inside
# the API server's int64 and far beyond the steps of any training run.
MAX_REPORTED_STEP = 2**53 - 1
# A checkpoint path or URI; it goes into the next gang's environment and the job's status.
MAX_REPORTED_PATH_CHARS = 1024
# Saving a checkpoint that took longer than a day is no measurement to plan with.
MAX_REPORTED_DURATION_SECONDS = 86400.0
# A worker's clock may run a little ahead of the operator's, not more.
MAX_CLOCK_AHEAD = timedelta(minutes=10)
# No checkpoint of a job scheduled by this operator predates Unix time.
EARLIEST_REPORT_TIME = datetime(1970, 1, 1, tzinfo=UTC)
# The longest RFC 3339 time: 2025-01-01T12:00:00.123456789+14:00 and a little more.
MAX_TIME_CHARS = 40
# A report is one flat object; a line nested deeper is refused before it is parsed.
MAX_JSON_DEPTH = 32
# Digits of the largest int64; a JSON integer with more is no value a report can hold.
INT64_DIGITS = 19


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a restarted worker continues from."""

    step: int
    path: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ResumePoint | None:
        """The resume point the operator passed in; None on a fresh start."""
        env = os.environ if environ is None else environ
        raw_step = env.get(RESUME_STEP_ENV, "").strip()
        if not raw_step:
            return None
        return cls(step=_non_negative_int(RESUME_STEP_ENV, raw_step), path=env.get(RESUME_PATH_ENV) or None)


@dataclass(frozen=True)
class WorkerEnvironment:
    """Everything the operator tells a worker through its environment."""

    checkpoint_dir: str | None = None
    checkpoint_interval_seconds: float = DEFAULT_CHECKPOINT_INTERVAL_SECONDS
    resume: ResumePoint | None = None
    gang_generation: int = 0
    termination_message_path: str = DEFAULT_TERMINATION_MESSAGE_PATH

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerEnvironment:
        """Read the worker's environment; a malformed value raises ValueError naming the variable."""
        env = os.environ if environ is None else environ
        raw_interval = env.get(CHECKPOINT_INTERVAL_ENV, "").strip()
        raw_generation = env.get(GANG_GENERATION_ENV, "").strip()
        return cls(
            checkpoint_dir=env.get(CHECKPOINT_DIR_ENV) or None,
            checkpoint_interval_seconds=(
                _positive_float(CHECKPOINT_INTERVAL_ENV, raw_interval)
                if raw_interval
                else DEFAULT_CHECKPOINT_INTERVAL_SECONDS
            ),
            resume=ResumePoint.from_env(env),
            gang_generation=_non_negative_int(GANG_GENERATION_ENV, raw_generation) if raw_generation else 0,
            termination_message_path=env.get(TERMINATION_MESSAGE_PATH_ENV) or DEFAULT_TERMINATION_MESSAGE_PATH,
        )

    def to_env(self) -> dict[str, str]:
        """The variables the operator sets on a worker container; the resume ones only on a resume.

        The termination message path is left out: it follows the container's
        terminationMessagePath, which the operator sets on the pod itself.
        """
        env = {
            CHECKPOINT_INTERVAL_ENV: _format_seconds(self.checkpoint_interval_seconds),
            GANG_GENERATION_ENV: str(self.gang_generation),
        }
        if self.checkpoint_dir:
            env[CHECKPOINT_DIR_ENV] = self.checkpoint_dir
        if self.resume is not None:
            env[RESUME_STEP_ENV] = str(self.resume.step)
            if self.resume.path:
                env[RESUME_PATH_ENV] = self.resume.path
        return env


@dataclass(frozen=True)
class CheckpointReport:
    """What a worker says about the checkpoint it has just written."""

    step: int
    path: str | None
    time: datetime
    duration_seconds: float

    def to_json(self) -> str:
        """One JSON line that fits the termination message; a path too long to fit, or one the
        operator would refuse (see `parse_checkpoint_report`), is dropped rather than the report."""
        path = self.path
        if path is not None and (len(path) > MAX_REPORTED_PATH_CHARS or not path.isprintable()):
            path = None
        line = self._encode(path)
        if len(_utf8(line)) > TERMINATION_MESSAGE_MAX_BYTES:
            line = self._encode(None)
        return line

    def _encode(self, path: str | None) -> str:
        document = {
            "step": self.step,
            "path": path,
            "time": _rfc3339(self.time),
            "durationSeconds": round(self.duration_seconds, 3),
        }
        return json.dumps(document, separators=(",", ":")) + "\n"


class RejectedReportError(Exception):
    """A termination message holds a checkpoint report the operator will not take; the text says why.

    What a worker writes is untrusted: a report out of these bounds is treated as no
    report at all (the gang resumes from the last one that was good), never as a
    value to store, compare or pass on.
    """


def parse_checkpoint_report(text: str | None, *, now: datetime) -> CheckpointReport | None:
    """The report in a termination message; None when there is none.

    The last line that is a report (a JSON object with a "step") decides. Lines that are
    not reports are passed over: the message may be cut short by a SIGKILL in the middle
    of a write, or hold log lines (terminationMessagePolicy FallbackToLogsOnError). A
    report out of bounds (see `RejectedReportError`), or a message longer than a kubelet
    writes, raises RejectedReportError, and nothing else is raised whatever TEXT holds.
    NOW bounds the report's time: a clock may be a little ahead, not days.
    """
    if not text:
        return None
    # A kubelet writes at most this much; more was written into the pod's status some other way.
    if len(text) > TERMINATION_MESSAGE_MAX_BYTES or len(_utf8(text)) > TERMINATION_MESSAGE_MAX_BYTES:
        raise RejectedReportError(f"the termination message is longer than {TERMINATION_MESSAGE_MAX_BYTES} bytes")
    for line in reversed(text.strip().splitlines()):
        document = _report_document(line)
        if document is not None:
            return _report(document, now)
    return None


class _JsonObject(dict[str, Any]):
    """A JSON object, with the keys it named more than once (json keeps only the last)."""

    duplicates: frozenset[str] = frozenset()


class _Unreadable:
    """A JSON value a report can never hold: NaN, an infinity, or an integer of absurd length."""

    def __init__(self, what: str) -> None:
        self.what = what


def _report_document(line: str) -> _JsonObject | None:
    """LINE as a report object; None when it is no report (not JSON, or no object with a step)."""
    if _nested_deeper_than(line, MAX_JSON_DEPTH):
        # Refused before the parser recurses: how deep it could go would depend on the stack left.
        raise RejectedReportError(f"the report is nested more than {MAX_JSON_DEPTH} deep")
    try:
        document = json.loads(
            line,
            object_pairs_hook=_json_object,
            parse_constant=_Unreadable,
            parse_int=_json_int,
        )
    except RecursionError:
        raise RejectedReportError(f"the report is nested more than {MAX_JSON_DEPTH} deep") from None
    except ValueError:
        return None
    return document if isinstance(document, _JsonObject) and "step" in document else None


def _nested_deeper_than(line: str, limit: int) -> bool:
    """Whether LINE opens more than LIMIT arrays or objects inside each other (outside strings)."""
    if line.count("[") + line.count("{") <= limit:
        return False  # what every report line is: no need to look closer
    depth, in_string, escaped = 0, False, False
    for char in line:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def _json_object(pairs: list[tuple[str, Any]]) -> _JsonObject:
    document = _JsonObject(pairs)
    if len(document) < len(pairs):
        keys = [key for key, _ in pairs]
        document.duplicates = frozenset(key for key in document if keys.count(key) > 1)
    return document


def _json_int(digits: str) -> int | _Unreadable:
    # Past int64's 19 digits no field of a report can be meant; converting thousands of digits costs time.
    return int(digits) if len(digits) <= INT64_DIGITS else _Unreadable(f"an integer of {len(digits)} digits")


def _report(document: _JsonObject, now: datetime) -> CheckpointReport:
    if document.duplicates:
        # Two readers of one report could take different values: which one was meant?
        raise RejectedReportError(f"the report names {_names(document.duplicates)} more than once")
    return CheckpointReport(
        step=_step(document["step"]),
        path=_path(document.get("path")),
        time=_time(document.get("time"), now),
        duration_seconds=_duration(document.get("durationSeconds", 0.0)),
    )


def _step(value: object) -> int:
    if type(value) is not int:
        raise RejectedReportError(f"step is {_describe(value)}, not a whole number from 0 to {MAX_REPORTED_STEP}")
    if not 0 <= value <= MAX_REPORTED_STEP:
        raise RejectedReportError(f"step {value} is out of range (0 to {MAX_REPORTED_STEP})")
    return value


def _path(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RejectedReportError(f"path is {_describe(value)}, not a string")
    if len(value) > MAX_REPORTED_PATH_CHARS:
        raise RejectedReportError(f"path is {len(value)} characters long, more than {MAX_REPORTED_PATH_CHARS}")
    if not value.isprintable():
        # It goes into the next gang's environment and into `kubectl describe`: no control characters.
        raise RejectedReportError("path holds characters that are not printable")
    return value


def _time(value: object, now: datetime) -> datetime:
    if not isinstance(value, str):
        raise RejectedReportError(f"time is {_describe(value)}, not an RFC 3339 time")
    if len(value) > MAX_TIME_CHARS:
        raise RejectedReportError(f"time is {len(value)} characters long, more than a time takes")
    try:
        stated = datetime.fromisoformat(value)
    except ValueError:
        raise RejectedReportError("time is not an RFC 3339 time") from None
    if stated.tzinfo is None:
        raise RejectedReportError("time has no offset from UTC")
    try:
        time = stated.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+14:00 falls before the first time a datetime holds
        raise RejectedReportError("time is before year 1 in UTC") from None
    if time < EARLIEST_REPORT_TIME:
        raise RejectedReportError(f"time {_rfc3339(time)} is before {_rfc3339(EARLIEST_REPORT_TIME)}")
    if time > now + MAX_CLOCK_AHEAD:
        raise RejectedReportError(f"time {_rfc3339(time)} is in the future (it is {_rfc3339(now)})")
    return time


def _duration(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RejectedReportError(f"durationSeconds is {_describe(value)}, not a number of seconds")
    if not (math.isfinite(value) and 0 <= value <= MAX_REPORTED_DURATION_SECONDS):
        raise RejectedReportError(f"durationSeconds {value} is out of range (0 to {MAX_REPORTED_DURATION_SECONDS:g})")
    return float(value)


def _describe(value: object) -> str:
    """What VALUE is, in a few words that never quote what a worker wrote at length."""
    if isinstance(value, _Unreadable):
        return value.what
    kinds: tuple[tuple[type, str], ...] = (
        (bool, "a boolean"),  # before int, which it is a kind of
        (str, "a string"),
        (float, "a fractional number"),
        (int, "an integer"),
        (list, "a list"),
        (dict, "an object"),
    )
    return next((words for kind, words in kinds if isinstance(value, kind)), "null")


def _names(keys: frozenset[str]) -> str:
    shown = sorted(keys)[:3]
    return ", ".join(repr(key[:32]) for key in shown) + (" and others" if len(keys) > len(shown) else "")


def _utf8(text: str) -> bytes:
    # Lone surrogates (a JSON \\ud800 escape) have no UTF-8 form; counted, never raised on.
    return text.encode("utf-8", "surrogatepass")


def _rfc3339(time: datetime) -> str:
    aware = time if time.tzinfo is not None else time.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def _non_negative_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


def _positive_float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {raw!r}")
    return value
