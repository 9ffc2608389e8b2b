"""In-container SDK for training code: resume point, checkpoint interval, SIGTERM checkpointing.

Standard library only: it is imported inside user images that have nothing of aisched's.

The contract with the operator
------------------------------
The operator sets on every worker container:

``AISCHED_CHECKPOINT_DIR``
    Where to save checkpoints (``spec.checkpoint.path``); absent when the job names none.
``AISCHED_CHECKPOINT_INTERVAL_SECONDS``
    Seconds of training between periodic checkpoints: the Young/Daly optimum for
    the capacity the gang runs on, or ``spec.checkpoint.intervalSeconds``.
``AISCHED_RESUME_STEP`` and ``AISCHED_RESUME_PATH``
    The checkpoint to continue from (step, and where it was saved). Both are
    absent on a fresh start; the path is absent when the worker reported none.
``AISCHED_GANG_GENERATION``
    How many times the gang has been (re)started: 0 first, then 1, 2, ...

The operator asks a worker to stop with SIGTERM, within the termination grace
period it fits to the spot notice. The worker then saves, reports, and exits
with ``CHECKPOINTED_EXIT_CODE`` (75, EX_TEMPFAIL: "stopped to be resumed").

A worker reports each checkpoint as one JSON line, overwriting its container's
termination message file (``/dev/termination-log`` unless
``AISCHED_TERMINATION_MESSAGE_PATH`` names another, which must match the
container's ``terminationMessagePath``)::

    {"step": 1200, "path": "/ckpt/step-000001200.pt", "time": "2025-01-01T12:00:00.000Z",
     "durationSeconds": 41.5}

The kubelet copies that file into ``status.containerStatuses[].state.terminated
.message`` (at most 4096 bytes) when the container ends, whatever ended it, and
the operator reads it back with ``parse_checkpoint_report``. It takes nothing on
trust: a report whose step is past ``MAX_REPORTED_STEP``, whose path is longer
than ``MAX_REPORTED_PATH_CHARS`` or unprintable, whose time is not a real time up
to a few minutes ahead of the operator's clock, or whose duration is not a finite
number of seconds up to a day is rejected (a Warning event on the job), and the
gang resumes from the last checkpoint that was good.

Distributed training (ranks that stop at the same step, torch.distributed.checkpoint,
the whole training state) is `aisched.workload.distributed`; docs/torchrun.md says what
torchrun and torch.distributed get from the operator.

Use in a training loop::

    from aisched.workload import Checkpointer

    checkpointer = Checkpointer(save=lambda step: save_my_state(step))
    checkpointer.install_sigterm_handler()
    start = checkpointer.resume.step + 1 if checkpointer.resume else 0
    for step in range(start, total_steps):
        train_one_step()
        checkpointer.maybe_checkpoint(step)
"""

from aisched.workload.checkpointer import Agreement, Checkpointer, PendingSave, SaveFunction, report_checkpoint
from aisched.workload.contract import (
    CHECKPOINT_DIR_ENV,
    CHECKPOINT_INTERVAL_ENV,
    CHECKPOINTED_EXIT_CODE,
    DEFAULT_CHECKPOINT_INTERVAL_SECONDS,
    DEFAULT_TERMINATION_MESSAGE_PATH,
    GANG_GENERATION_ENV,
    MAX_REPORTED_PATH_CHARS,
    MAX_REPORTED_STEP,
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

__all__ = [
    "CHECKPOINTED_EXIT_CODE",
    "CHECKPOINT_DIR_ENV",
    "CHECKPOINT_INTERVAL_ENV",
    "DEFAULT_CHECKPOINT_INTERVAL_SECONDS",
    "DEFAULT_TERMINATION_MESSAGE_PATH",
    "GANG_GENERATION_ENV",
    "MAX_REPORTED_PATH_CHARS",
    "MAX_REPORTED_STEP",
    "RESUME_PATH_ENV",
    "RESUME_STEP_ENV",
    "TERMINATION_MESSAGE_MAX_BYTES",
    "TERMINATION_MESSAGE_PATH_ENV",
    "Agreement",
    "CheckpointReport",
    "Checkpointer",
    "PendingSave",
    "RejectedReportError",
    "ResumePoint",
    "SaveFunction",
    "WorkerEnvironment",
    "parse_checkpoint_report",
    "report_checkpoint",
]
