"""An interruptible carbon-aware job run in chunks: what happens at a chunk's edges.

The planner (:mod:`aisched.policy.carbon.planning`) splits the work into chunks in the cleanest
hours; the operator runs the current one and, at its end, asks again. The state that
carries a job from chunk to chunk is in its status (the end of the chunk running now,
the work done in chunks that ended), so these functions take it, and the time, as
arguments and keep nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from aisched.policy.carbon.plan import CarbonPlan

# Reason of the Checkpointing phase a job enters at a planned pause; the lifecycle
# sends such a job to Deferred, not back to the queue, once its gang is down.
CHUNK_ENDED = "ChunkEnded"
PAUSED_BETWEEN_CHUNKS = "PausedBetweenChunks"
# A save with no cost given is taken to take a minute (CheckpointSpec's default); the
# margin covers the pod's own teardown after the save.
DEFAULT_CHECKPOINT_COST_S = 60
GRACE_MARGIN_S = 10


@dataclass(frozen=True)
class ChunkEnd:
    """What a running job does when its chunk ends.

    Paused: it checkpoints and waits until `until`, the start of its next chunk.
    Carrying on: it runs to `until`, the end of the chunk it is now in, or to completion (None).
    """

    pause: bool
    until: datetime | None
    message: str


def work_left(expected_duration: timedelta, done_seconds: float | None) -> timedelta | None:
    """The work still to do; None once the expected duration is used up (then it runs to completion)."""
    # Compared as seconds: work done (from a status anyone may write) can lie beyond what a timedelta holds.
    done = max(0.0, done_seconds or 0.0)
    if done >= expected_duration.total_seconds():
        return None
    return expected_duration - timedelta(seconds=done)


def current_chunk_end(plan: CarbonPlan, now: datetime) -> datetime | None:
    """When the chunk a job starting (or carrying on) now ends; None when it runs to completion."""
    if plan.is_deferred(now) or len(plan.chunks) < 2:
        return None
    return plan.chunks[0].end


def work_in_chunk(running_since: datetime, now: datetime, *, resumed: bool, restore: timedelta) -> float:
    """Seconds of work a chunk that ends now did: its running time, less the restore a resumed
    gang spends first (counting it as work would leave too little time for the rest)."""
    ran = now - running_since - (restore if resumed else timedelta(0))
    return max(0.0, ran.total_seconds())


def at_chunk_end(plan: CarbonPlan | None, now: datetime) -> ChunkEnd:
    """Pause until the next chunk, or carry on, as the re-plan made at the chunk's end says.

    No plan (the expected work is used up) means carrying on to completion; so does a plan
    that starts now in one piece, which is what a failing source or a short forecast gives.
    """
    if plan is None:
        return ChunkEnd(False, None, "the expected work is done; running to completion")
    if plan.is_deferred(now):
        return ChunkEnd(
            True, plan.start, f"paused between chunks until {plan.start:%Y-%m-%d %H:%M:%S} UTC: {plan.message}"
        )
    end = current_chunk_end(plan, now)
    if end is None:
        return ChunkEnd(False, None, f"running to completion: {plan.message}")
    return ChunkEnd(False, end, f"carrying on until {end:%Y-%m-%d %H:%M:%S} UTC: {plan.message}")


def pause_grace_seconds(checkpoint_cost_seconds: int | None) -> int:
    """Termination grace for a planned pause: time for the save, with room for a slow one.

    No notice window bounds it, as it bounds a spot interruption's; a save that runs over
    is killed and loses the chunk's work since the last periodic checkpoint.
    """
    cost = checkpoint_cost_seconds or DEFAULT_CHECKPOINT_COST_S
    return math.ceil(1.5 * cost) + GRACE_MARGIN_S
