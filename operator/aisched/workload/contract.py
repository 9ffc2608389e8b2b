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
from datetime import UTC, datetime
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
        """One JSON line that fits the termination message; a path too long to fit is dropped."""
        line = self._encode(self.path)
        if len(line.encode()) > TERMINATION_MESSAGE_MAX_BYTES:
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


def parse_checkpoint_report(text: str | None) -> CheckpointReport | None:
    """The last valid report in a termination message; None when there is none.

    Tolerant by design: the message may be empty, cut short by a SIGKILL in the
    middle of a write, or hold log lines (terminationMessagePolicy
    FallbackToLogsOnError), and none of that may break the operator.
    """
    if not text:
        return None
    for line in reversed(text.strip().splitlines()):
        report = _parse_report_line(line)
        if report is not None:
            return report
    return None


def _parse_report_line(line: str) -> CheckpointReport | None:
    """The report on LINE; None when it is not one, whatever is wrong with it."""
    document = _json_object(line)
    if document is None:
        return None
    step, path = document.get("step"), document.get("path")
    duration, stamp = document.get("durationSeconds", 0.0), document.get("time")
    if type(step) is not int or step < 0 or not isinstance(stamp, str):
        return None
    if (path is not None and not isinstance(path, str)) or not _finite_seconds(duration):
        return None
    time = _aware_time(stamp)
    if time is None:
        return None
    return CheckpointReport(step=step, path=path, time=time.astimezone(UTC), duration_seconds=float(duration))


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        document = json.loads(line)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def _finite_seconds(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _aware_time(stamp: str) -> datetime | None:
    """STAMP as a time with its offset; None when it is not one."""
    try:
        time = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return time if time.tzinfo is not None else None


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
