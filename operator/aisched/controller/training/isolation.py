"""One job's failure is that job's alone: the guard each cluster-wide stage puts around each job.

The scheduling cycle, emissions, chunk ends and reporting each go over every job. A job
one of them cannot handle (an object this operator's model refuses, a value its arithmetic
cannot take, a status write the API server refuses) is left out of that stage and tried
again after a backoff, while the stage goes on with every other job. The scheduling cycle
also tells the job's user why, in its status: reason InvalidSpec (the field, its value and
what is wrong with it) or CannotSchedule (the error, and where it was raised).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import traceback
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from aisched.api import TrainingJob
from aisched.api.training_job import TrainingJobStatus
from aisched.controller.training.store import JobKey, JobStore
from aisched.controller.training.writer import StatusWriter
from aisched.controller.workqueue import FailureBackoff, WorkQueue
from aisched.kube.client import KubeClient
from aisched.metrics import Metrics
from aisched.policy.job_status import CANNOT_SCHEDULE, INVALID_SPEC, set_aside, taken_back
from aisched.policy.tenancy import Refusal

log = logging.getLogger(__name__)
# Status writes the scheduling cycle collects while it reads the jobs, to make them together.
CycleWrites = list[Callable[[], Awaitable[bool]]]

# The stages that go over every job, as the logs and the per-job backoff name them.
SCHEDULING = "scheduling"
EMISSIONS = "estimating emissions"
CHUNK_ENDS = "ending carbon chunks"
REPORTING = "reporting"
GUARDED_STAGES = (SCHEDULING, EMISSIONS, CHUNK_ENDS, REPORTING)
# A value quoted in a condition message is cut here: the message is for a person, not a dump.
MAX_QUOTED_VALUE = 80
MAX_ERRORS_LISTED = 3


class StageGuard:
    """Which jobs each guarded stage failed on lately, and the guard each stage puts around each job."""

    def __init__(
        self,
        store: JobStore,
        writer: StatusWriter,
        kube: KubeClient,
        queue: WorkQueue[JobKey],
        metrics: Metrics,
    ) -> None:
        self._store = store
        self._writer = writer
        self._kube = kube
        self._queue = queue
        self._metrics = metrics
        # Jobs a cluster-wide stage failed on, per (stage, job): each waits out its backoff before that
        # stage tries it again; the generation of each job the scheduling cycle set aside, so a new
        # spec is tried at once.
        self._backoff: FailureBackoff[tuple[str, JobKey]] = FailureBackoff()
        self._set_aside_generation: dict[JobKey, object] = {}

    def sits_out(self, stage: str, key: JobKey) -> bool:
        """STAGE failed on KEY lately, and KEY waits out its backoff before STAGE tries it again."""
        return self._backoff.waiting((stage, key))

    @contextlib.contextmanager
    def isolated(self, stage: str, key: JobKey) -> Iterator[None]:
        """One job's share of STAGE: a failure is logged, counted and retried after a backoff,
        and goes no further than this block, so the stage carries on with the next job."""
        try:
            yield
        except Exception:
            delay = self._failed(stage, key)
            log.exception("%s failed for TrainingJob %s/%s; it sits that out for %.3g s", stage, *key, delay)
        else:
            self._backoff.succeeded((stage, key))

    def _failed(self, stage: str, key: JobKey) -> float:
        delay = self._backoff.failed((stage, key))
        self._metrics.process.record_reconcile_error("TrainingJob")
        # A pass comes when the wait is over, rather than at the next resync.
        self._queue.add_after(key, delay)
        return delay

    def forget(self, key: JobKey) -> None:
        for stage in GUARDED_STAGES:
            self._backoff.succeeded((stage, key))
        self._set_aside_generation.pop(key, None)

    # -- the scheduling cycle ---------------------------------------------------

    def still_set_aside(self, key: JobKey, obj: dict[str, Any]) -> bool:
        """The cycle set KEY aside and its backoff runs; a new spec (generation) is tried at once."""
        if key not in self._set_aside_generation:
            return False
        if self._set_aside_generation[key] != obj["metadata"].get("generation"):
            self._backoff.succeeded((SCHEDULING, key))
            return False
        return self.sits_out(SCHEDULING, key)

    async def set_aside(self, obj: dict[str, Any], job: TrainingJob | None, error: Exception, now: datetime) -> None:
        """Leave the job out of the scheduling cycle until its backoff has passed, and say why in its status."""
        metadata = obj["metadata"]
        key: JobKey = (metadata["namespace"], metadata["name"])
        delay = self._failed(SCHEDULING, key)
        generation = metadata.get("generation")
        self._set_aside_generation[key] = generation
        reason, message = why_set_aside(error)
        log.warning(
            "TrainingJob %s/%s is left out of the scheduling cycle for %.3g s: %s: %s",
            *key,
            delay,
            reason,
            message,
            exc_info=error if reason == CANNOT_SCHEDULE else None,
        )
        current = job.status if job is not None else _readable_status(obj)
        updated = set_aside(current, reason, message, now, generation)
        if updated == current:
            return
        # The write that failed may be the one that refuses this too: the log has said why already.
        try:
            self._kube.post_event(obj, "Warning", reason, message)
            if job is not None:
                await self._writer.write(obj, job, updated)
            else:
                await self._writer.write_unreadable(obj, updated)
        except Exception:
            log.exception("cannot write why TrainingJob %s/%s is left out of the scheduling cycle", *key)

    def taken_back(
        self, key: JobKey, obj: dict[str, Any], job: TrainingJob, now: datetime, writes: CycleWrites
    ) -> None:
        """KEY went through the cycle's reading of it: a gang the cycle had set aside is in its reach again."""
        if key in self._set_aside_generation:
            del self._set_aside_generation[key]
            self._backoff.succeeded((SCHEDULING, key))
        # Read off the status rather than the memory above, so a restarted operator clears it too.
        updated = taken_back(job, now)
        if updated is not job.status:
            self.write_in_cycle(writes, obj, job, updated, now)

    async def carried_out(
        self, obj: dict[str, Any], job: TrainingJob, now: datetime, action: Callable[[], Awaitable[None]]
    ) -> bool:
        """Carry out one job's share of the cycle's decision; a failure sets that job aside, and no other."""
        try:
            await action()
        except Exception as error:
            await self.set_aside(obj, job, error, now)
            return False
        return True

    def write_in_cycle(
        self, writes: CycleWrites, obj: dict[str, Any], job: TrainingJob, status: TrainingJobStatus, now: datetime
    ) -> None:
        """A status write of the scheduling cycle's, made with the others it asks for, guarded as they are."""
        writes.append(
            functools.partial(self.carried_out, obj, job, now, functools.partial(self._writer.write, obj, job, status))
        )


class QueueRefusalError(Exception):
    """The job's queue does not take it (`aisched.policy.tenancy`): its namespace, priority or tolerations."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def why_set_aside(error: Exception) -> tuple[str, str]:
    """The reason and message of the condition a job the scheduling cycle cannot handle gets."""
    if isinstance(error, QueueRefusalError):
        return error.refusal.reason, error.refusal.message
    if isinstance(error, ValidationError):
        problems = [_describe_problem(e) for e in error.errors()[:MAX_ERRORS_LISTED]]
        more = error.error_count() - len(problems)
        if more > 0:
            problems.append(f"and {more} more")
        return INVALID_SPEC, "this operator cannot read the job: " + "; ".join(problems)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if "/aisched/" in f.filename]
    where = (
        f" in {frames[-1].name} ({frames[-1].filename.rsplit('/aisched/', 1)[-1]}:{frames[-1].lineno})"
        if frames
        else ""
    )
    return CANNOT_SCHEDULE, f"the scheduler cannot handle the job: {type(error).__name__}{where}: {error}"


def _describe_problem(error: Any) -> str:
    field = ".".join(str(part) for part in error["loc"])
    value = repr(error.get("input"))
    if len(value) > MAX_QUOTED_VALUE:
        value = value[: MAX_QUOTED_VALUE - 3] + "..."
    return f"{field}: {error['msg']} (got {value})"


def _readable_status(obj: dict[str, Any]) -> TrainingJobStatus:
    """The status of an object the model refuses, as far as it reads; empty when it does not."""
    try:
        return TrainingJobStatus.model_validate(obj.get("status") or {})
    except ValidationError:
        return TrainingJobStatus()
