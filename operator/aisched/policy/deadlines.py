"""The time a TrainingJob can spare: the slack its deadline leaves, the grace its workers get to save.

Pure arithmetic on plain numbers and `now`: the deadline gauge and the spot checkpoint
interval take the slack from here, and every stop of a gang on a notice takes the grace.
"""

from __future__ import annotations

from datetime import datetime

# Taken off the spot notice window: the pod's own teardown after the save.
CHECKPOINT_GRACE_MARGIN_S = 10
# A notice shorter than the margin still leaves the workers this long to flush a save.
MIN_CHECKPOINT_GRACE_S = 5


def deadline_slack_seconds(deadline: datetime, now: datetime, work_seconds: float, *overheads_seconds: float) -> float:
    """Seconds to spare if the job started now: the time to DEADLINE, less its work and each overhead.

    Negative once the deadline cannot be met. The overheads are taken off one by one,
    in the order given, so every caller gets the very figure it got when it did the sum itself.
    """
    slack = (deadline - now).total_seconds() - work_seconds
    for overhead in overheads_seconds:
        slack -= overhead
    return slack


def checkpoint_grace_seconds(notice_seconds: int) -> int:
    """Termination grace of workers that checkpoint on SIGTERM when their capacity is reclaimed.

    They get the whole notice window less a margin for the pod to be torn down.
    """
    return max(MIN_CHECKPOINT_GRACE_S, notice_seconds - CHECKPOINT_GRACE_MARGIN_S)
