"""When a worker pod carrying the report finalizer may go (aisched.policy.report_tracking)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from aisched.policy.report_tracking import STUCK_TERMINATING, Release, TrackedWorker, releasable

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SAVED = TrackedWorker("w0", "1", ended=True, started=True, report_step=1200, gone_by=T0, node_reachable=True)
RUNNING = TrackedWorker("w1", "1", ended=False, started=True, report_step=None, gone_by=None, node_reachable=True)


def released(*workers: TrackedWorker, recorded: int | None = None, now: datetime = T0) -> tuple[str, ...]:
    return releasable(workers, generation=1, recorded_step=recorded, now=now).finalizers


def test_a_report_is_kept_until_the_status_holds_it_or_the_gang_has_ended() -> None:
    assert released(SAVED, RUNNING) == ()  # rank 1 may still save an older step
    assert released(SAVED, RUNNING, recorded=1100) == ()
    assert released(SAVED, RUNNING, recorded=1200) == ("w0",)
    both_saved = replace(RUNNING, ended=True, report_step=1100, gone_by=T0)
    assert released(SAVED, both_saved) == ("w0", "w1")  # the gang's checkpoint is taken from all of them


def test_workers_with_nothing_to_report_go_at_once() -> None:
    no_report = replace(SAVED, report_step=None)
    never_started = replace(RUNNING, started=False, gone_by=T0)
    earlier_gang = replace(SAVED, name="old", generation="0")
    assert released(no_report, never_started, earlier_gang, RUNNING) == ("w0", "w1", "old")


def test_a_worker_stuck_terminating_goes_after_the_bound_and_is_deleted_if_its_node_is_unreachable() -> None:
    stuck = replace(RUNNING, gone_by=T0)
    assert released(stuck, now=T0 + STUCK_TERMINATING - timedelta(seconds=1)) == ()
    assert releasable([stuck], generation=1, recorded_step=None, now=T0 + STUCK_TERMINATING) == Release(("w1",), ())
    lost = replace(stuck, node_reachable=False)
    assert releasable([lost], generation=1, recorded_step=None, now=T0 + STUCK_TERMINATING) == Release(("w1",), ("w1",))


workers = st.builds(
    TrackedWorker,
    name=st.sampled_from(["w0", "w1", "w2", "w3"]),
    generation=st.sampled_from(["1", "2", None]),
    ended=st.booleans(),
    started=st.booleans(),
    report_step=st.none() | st.integers(0, 5),
    gone_by=st.none() | st.just(T0),
    node_reachable=st.booleans(),
).map(lambda w: replace(w, started=w.started or w.ended))  # a worker that ended had started


@given(st.lists(workers, max_size=6, unique_by=lambda w: w.name), st.none() | st.integers(0, 5))
def test_no_report_newer_than_the_status_leaves_while_its_gang_still_runs(
    gang: list[TrackedWorker], recorded: int | None
) -> None:
    release = releasable(gang, generation=1, recorded_step=recorded, now=T0)
    assert set(release.force_delete) <= set(release.finalizers)
    if all(w.ended for w in gang if w.generation == "1"):
        return  # the gang ended: its checkpoint was taken from all of them
    for worker in gang:
        unrecorded = worker.report_step is not None and (recorded is None or worker.report_step > recorded)
        if worker.generation == "1" and worker.ended and unrecorded:
            assert worker.name not in release.finalizers
