"""The shared work queue: client-go's semantics, on a fake loop clock (no real sleeps)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from aisched.controller.workqueue import WorkQueue

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]

Key = tuple[str, str]
A: Key = ("ns", "a")
B: Key = ("ns", "b")
C: Key = ("ns", "c")


def a_queue(resync_seconds: float = 600.0) -> WorkQueue[Key]:
    return WorkQueue(name="Thing", resync_seconds=resync_seconds, base_backoff_seconds=1.0, max_backoff_seconds=8.0)


def no_keys() -> list[Key]:
    return []


def now() -> float:
    return asyncio.get_running_loop().time()


async def test_a_key_added_many_times_is_queued_once() -> None:
    queue = a_queue()
    for _ in range(5):
        queue.add(A)
    queue.add(B)
    assert await queue.next_batch(no_keys) == {A, B}


async def test_next_batch_returns_at_once_when_keys_are_dirty_and_clears_them() -> None:
    queue = a_queue()
    queue.add(A)
    started = now()
    assert await queue.next_batch(no_keys) == {A}
    assert now() == started
    assert await queue.next_batch(no_keys, timeout=5) == set()
    assert now() == started + 5


async def test_an_add_wakes_a_waiting_loop() -> None:
    queue = a_queue()
    waiting = asyncio.create_task(queue.next_batch(no_keys))
    await asyncio.sleep(3)
    assert not waiting.done()
    queue.add(A)
    assert await waiting == {A}
    assert now() == 3


async def test_a_bare_wake_returns_an_empty_batch() -> None:
    queue = a_queue()
    waiting = asyncio.create_task(queue.next_batch(no_keys))
    await asyncio.sleep(1)
    queue.wake()
    assert await waiting == set()
    assert now() == 1


async def test_resync_makes_every_key_dirty_on_its_period() -> None:
    queue = a_queue(resync_seconds=30)
    assert await queue.next_batch(lambda: [A, B, C]) == {A, B, C}
    assert now() == 30
    assert await queue.next_batch(lambda: [A]) == {A}
    assert now() == 60


async def test_the_resync_leaves_a_failing_key_to_its_backoff() -> None:
    queue = a_queue(resync_seconds=2)

    async def reconcile(key: Key) -> None:
        if key == A:
            raise RuntimeError("a poison object")

    tried: list[tuple[float, Key]] = []
    while now() < 10:
        batch = await queue.next_batch(lambda: [A, B])
        tried += [(now(), key) for key in sorted(batch) if key == A]
        await queue.process(batch, reconcile, concurrency=1)
    # Backoff 1, 2, 4 s after each failure, not every 2-second resync.
    assert tried == [(2, A), (3, A), (5, A), (9, A)]


async def test_resync_keeps_its_time_however_busy_the_loop_is() -> None:
    queue = a_queue(resync_seconds=30)
    batches = []
    for _ in range(40):  # a watch event every second
        queue.add(A)
        batches.append(await queue.next_batch(lambda: [A, B]))
        await asyncio.sleep(1)
    assert batches.count({A, B}) == 1  # at 30 s, not never
    assert batches[30] == {A, B}


async def test_a_later_add_after_keeps_the_earlier_wake_up() -> None:
    queue = a_queue()
    queue.add_after(A, 10)
    queue.add_after(A, 20)
    assert queue.pending_timers() == 1
    assert await queue.next_batch(no_keys) == {A}
    assert now() == 10
    assert queue.pending_timers() == 0


async def test_an_earlier_add_after_replaces_the_later_wake_up() -> None:
    queue = a_queue()
    queue.add_after(A, 20)
    queue.add_after(A, 5)
    assert queue.pending_timers() == 1
    assert await queue.next_batch(no_keys) == {A}
    assert now() == 5
    # The cancelled 20 s timer does not fire.
    assert await queue.next_batch(no_keys, timeout=100) == set()
    assert now() == 105


async def test_one_timer_per_key_after_many_add_after_calls() -> None:
    queue = a_queue()
    keys = [("ns", f"k{i:04}") for i in range(1000)]
    for round_ in range(50):
        for key in keys:
            queue.add_after(key, 100 - round_)
    assert queue.pending_timers() == 1000
    assert await queue.next_batch(no_keys) == set(keys)
    assert now() == 51
    assert queue.pending_timers() == 0


async def test_add_after_with_no_delay_adds_at_once() -> None:
    queue = a_queue()
    queue.add_after(A, 0)
    assert queue.pending_timers() == 0
    assert await queue.next_batch(no_keys) == {A}
    assert now() == 0


async def test_forget_drops_the_dirty_mark_and_cancels_the_timer() -> None:
    queue = a_queue()
    queue.add(A)
    queue.add_after(A, 5)
    queue.add_after(B, 5)
    queue.forget(A)
    assert queue.pending_timers() == 1
    assert await queue.next_batch(no_keys) == set()  # add(A) woke the loop; the mark is gone
    assert await queue.next_batch(no_keys) == {B}
    assert now() == 5
    assert await queue.next_batch(no_keys, timeout=50) == set()


async def test_a_key_added_while_being_processed_comes_back_in_the_next_batch() -> None:
    queue = a_queue()
    queue.add(A)
    seen: list[Key] = []

    async def reconcile(key: Key) -> None:
        seen.append(key)
        queue.add(key)  # a watch event arrives mid-reconcile

    await queue.process(await queue.next_batch(no_keys), reconcile, concurrency=1)
    assert await queue.next_batch(no_keys) == {A}
    assert seen == [A]


async def test_process_runs_keys_in_sorted_order_and_reports_each() -> None:
    queue = a_queue()
    order: list[Key] = []
    done: list[tuple[Key, bool]] = []

    async def reconcile(key: Key) -> None:
        order.append(key)

    await queue.process({C, A, B}, reconcile, concurrency=1, on_done=lambda k, _s, failed: done.append((k, failed)))
    assert order == [A, B, C]
    assert done == [(A, False), (B, False), (C, False)]


async def test_process_bounds_concurrency() -> None:
    queue = a_queue()
    running = 0
    most = 0

    async def reconcile(_: tuple[str, str]) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(1)
        running -= 1

    await queue.process([("ns", f"k{i}") for i in range(10)], reconcile, concurrency=3)
    assert most == 3
    assert now() == 4  # ceil(10 / 3) rounds of 1 s


async def test_process_accepts_keys_that_do_not_sort() -> None:
    queue: WorkQueue[object] = WorkQueue(name="Thing", resync_seconds=60)
    seen: list[object] = []

    async def reconcile(key: object) -> None:
        seen.append(key)

    await queue.process([1, "x"], reconcile, concurrency=1)
    assert seen == [1, "x"]


async def test_a_failing_key_never_stops_the_others(caplog: pytest.LogCaptureFixture) -> None:
    queue = a_queue()
    reconciled: list[Key] = []
    done: list[tuple[Key, bool]] = []

    async def reconcile(key: Key) -> None:
        if key == B:
            raise RuntimeError("boom")
        reconciled.append(key)

    with caplog.at_level(logging.ERROR):
        await queue.process([A, B, C], reconcile, concurrency=1, on_done=lambda k, _s, failed: done.append((k, failed)))
    assert reconciled == [A, C]
    assert done == [(A, False), (B, True), (C, False)]
    assert "reconciling Thing ns/b failed; retrying in 1 s" in caplog.text
    assert queue.pending_timers() == 1


async def test_a_failing_key_backs_off_exponentially_up_to_the_maximum_and_a_success_resets_it() -> None:
    queue = a_queue()  # base 1 s, maximum 8 s
    failing = True

    async def reconcile(_: Key) -> None:
        if failing:
            raise RuntimeError("boom")

    retried_at: list[float] = []
    queue.add(A)
    for _ in range(6):
        await queue.process(await queue.next_batch(no_keys), reconcile, concurrency=1)
        started = now()
        assert await queue.next_batch(no_keys) == {A}
        retried_at.append(now() - started)
        queue.add(A)
    assert retried_at == [1, 2, 4, 8, 8, 8]

    failing = False
    await queue.process(await queue.next_batch(no_keys), reconcile, concurrency=1)
    assert queue.pending_timers() == 0
    failing = True
    queue.add(A)
    await queue.process(await queue.next_batch(no_keys), reconcile, concurrency=1)
    started = now()
    await queue.next_batch(no_keys)
    assert now() - started == 1  # back to the base


async def test_forget_resets_the_backoff() -> None:
    queue = a_queue()

    async def reconcile(_: Key) -> None:
        raise RuntimeError("boom")

    for _ in range(3):
        await queue.process([A], reconcile, concurrency=1)
    queue.forget(A)
    assert queue.pending_timers() == 0
    await queue.process([A], reconcile, concurrency=1)
    started = now()
    assert await queue.next_batch(no_keys) == {A}
    assert now() - started == 1


async def test_process_never_raises_even_when_on_done_does() -> None:
    queue = a_queue()

    async def reconcile(key: Key) -> None:
        if key == A:
            raise ValueError("bad object")

    def on_done(_key: Key, _seconds: float, _failed: bool) -> None:
        raise RuntimeError("metrics broke")

    await queue.process([A, B], reconcile, concurrency=2, on_done=on_done)


async def test_process_lets_cancellation_through() -> None:
    queue = a_queue()

    async def reconcile(_: Key) -> None:
        await asyncio.sleep(100)

    task = asyncio.create_task(queue.process([A], reconcile, concurrency=1))
    await asyncio.sleep(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_backlog_is_worked_through_in_passes_oldest_first() -> None:
    queue: WorkQueue[int] = WorkQueue(name="Thing", resync_seconds=600.0, max_batch=3)
    for key in range(7):
        queue.add(key)
    queue.add(0)  # already dirty: keeps its place
    started = now()
    assert await queue.next_batch(list) == {0, 1, 2}
    queue.add(0)  # marked again while reconciled: behind the ones waiting longer
    assert await queue.next_batch(list) == {3, 4, 5}
    assert await queue.next_batch(list) == {6, 0}
    assert now() == started  # no pass waited: the rest were due at once
    assert queue.depth() == 0
