"""Reads of outside sources beside the loop: one fetch per key at a time, under a deadline, behind a circuit.

The controllers' loops must never wait on a carbon API or a Prometheus: a source that hangs,
or drips its answer a byte at a time (which resets every per-read timeout), would hold up
admission and spot handling with it. So a caller starts a fetch here and goes on with what it
already has; the fetch runs as its own task, bounded as a whole by `deadline_seconds` (its
retries included), and hands its value to the caller's `keep` when it succeeds. Failures count
towards a circuit (`aisched.policy.circuit`), which, open, keeps the source from being asked
about it for a while.

Circuits are per subject (a carbon zone), not per source: what a tenant names is read for it
alone, so jobs naming zones the source does not know open those zones' circuits and leave every
other zone's asked. Only subjects whose last fetch failed are kept, at most `max_circuits` of
them, the least recently failed forgotten first: a tenant inventing zones grows nothing past
that, and a forgotten zone is at worst asked once more.

Nor may a tenant make the source be asked without end: subjects never answered before (an invented
zone each job) are fetched at most `new_subjects_per_minute` a minute, from a small burst. Subjects
the source has answered are remembered (as many as circuits) and never wait for that budget, so
the zones a cluster runs in are asked as before whatever a tenant invents; a new one the budget
turns away is asked on a later pass, and meanwhile has no answer (the loop goes on without carbon).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from datetime import datetime

from aisched.policy.circuit import Breaker, Circuit, after_failure, allows

log = logging.getLogger(__name__)
MAX_CIRCUITS = 256
"""Subjects with a failing fetch kept at once; far more than the zones a cluster runs in."""
NEW_SUBJECTS_PER_MINUTE = 6.0
NEW_SUBJECTS_BURST = 8


class FetchTimeoutError(TimeoutError):
    """A fetch that took longer than its deadline, retries and all."""


@dataclass(frozen=True)
class _Failing:
    """A subject whose fetches fail: its circuit and the latest failure."""

    circuit: Circuit
    error: Exception


class BackgroundFetcher:
    def __init__(
        self,
        name: str,
        *,
        deadline_seconds: float,
        breaker: Breaker,
        clock: Callable[[], datetime],
        max_circuits: int = MAX_CIRCUITS,
        new_subjects_per_minute: float = NEW_SUBJECTS_PER_MINUTE,
        new_subjects_burst: int = NEW_SUBJECTS_BURST,
    ) -> None:
        self.name = name
        self.deadline_seconds = deadline_seconds
        self.breaker = breaker
        self.clock = clock
        self.max_circuits = max_circuits
        self.last_error: Exception | None = None
        """The failure of the latest fetch of any subject (None once one succeeds): for the log."""
        self._failing: OrderedDict[Hashable, _Failing] = OrderedDict()
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}
        self._answered: OrderedDict[Hashable, None] = OrderedDict()
        """Subjects the source answered, the most recent last (at most `max_circuits`): never budgeted."""
        self._new_per_second = new_subjects_per_minute / 60.0
        self._new_burst = float(new_subjects_burst)
        self._new_tokens = float(new_subjects_burst)
        self._new_refilled_at: datetime | None = None

    def circuit(self, subject: Hashable) -> Circuit:
        """The circuit of one subject's fetches; a subject not failing has a closed one."""
        failing = self._failing.get(subject)
        return failing.circuit if failing is not None else Circuit()

    def error(self, subject: Hashable) -> Exception | None:
        """Why the latest fetch of SUBJECT failed; None when it did not (or it is forgotten)."""
        failing = self._failing.get(subject)
        return failing.error if failing is not None else None

    def failing_subjects(self) -> int:
        return len(self._failing)

    def fetching(self, key: Hashable) -> bool:
        task = self._tasks.get(key)
        return task is not None and not task.done()

    def start(
        self,
        key: Hashable,
        fetch: Callable[[], Awaitable[object]],
        keep: Callable[[object], None],
        *,
        subject: Hashable | None = None,
        budgeted: bool = True,
    ) -> bool:
        """Fetch for `key` unless a fetch for it runs already or its subject's circuit is open (the subject
        is the key unless named: a forecast and a current intensity share their zone's); True if this
        started one. A subject never answered waits for the new-subject budget unless not `budgeted`:
        what the operator itself depends on (a running job's zone, met again after a restart), which
        a tenant cannot multiply as it can invented zones.

        Only the caller that started a fetch should wait for it: the others go on at once, so
        however many passes or jobs ask meanwhile, a hung source costs the loop one wait per fetch.
        """
        subject = key if subject is None else subject
        if self.fetching(key) or not allows(self.circuit(subject), self.clock()):
            return False
        known = subject in self._answered or subject in self._failing
        if budgeted and not known and not self._take_new_subject():
            return False
        task = asyncio.create_task(self._run(subject, fetch, keep), name=f"{self.name}-fetch")
        self._tasks[key] = task
        task.add_done_callback(lambda done: self._forget_task(key, done))
        return True

    def _take_new_subject(self) -> bool:
        """One fetch of a subject never answered, from the budget; False when it is spent for now."""
        now = self.clock()
        if self._new_refilled_at is not None:
            elapsed = max(0.0, (now - self._new_refilled_at).total_seconds())
            self._new_tokens = min(self._new_burst, self._new_tokens + elapsed * self._new_per_second)
        self._new_refilled_at = now
        if self._new_tokens < 1.0:
            return False
        self._new_tokens -= 1.0
        return True

    def _forget_task(self, key: Hashable, done: asyncio.Task[None]) -> None:
        """A fetch ended: no entry is kept for it, so keys asked once (invented zones) cost nothing after."""
        if self._tasks.get(key) is done:
            del self._tasks[key]

    async def wait(self, key: Hashable, seconds: float) -> None:
        """Wait up to `seconds` for the fetch of `key` to end (it goes on if it does not)."""
        task = self._tasks.get(key)
        if task is not None and not task.done() and seconds > 0:
            await asyncio.wait({task}, timeout=seconds)

    async def settle(self) -> None:
        """Wait for every fetch under way to end (tests; shutdown)."""
        await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    def cancel(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()

    async def _run(
        self, subject: Hashable, fetch: Callable[[], Awaitable[object]], keep: Callable[[object], None]
    ) -> None:
        try:
            async with asyncio.timeout(self.deadline_seconds):  # wait_for may swallow a cancellation on 3.11
                value = await fetch()
        except TimeoutError:
            self._failed(subject, FetchTimeoutError(f"no answer within {self.deadline_seconds:g} s"))
        except Exception as error:  # whatever the source raised: counted, kept for the caller to report
            self._failed(subject, error)
        else:
            self._failing.pop(subject, None)  # closed: a closed circuit is no entry
            self._answered.pop(subject, None)
            self._answered[subject] = None
            while len(self._answered) > self.max_circuits:
                self._answered.popitem(last=False)
            self.last_error = None
            keep(value)

    def _failed(self, subject: Hashable, error: Exception) -> None:
        before = self.circuit(subject)
        circuit = after_failure(before, self.breaker, self.clock())
        self._failing.pop(subject, None)
        self._failing[subject] = _Failing(circuit, error)  # the most recent failure last
        while len(self._failing) > self.max_circuits:
            self._failing.popitem(last=False)
        self.last_error = error
        if circuit.is_open and not before.is_open:
            log.warning(
                "%s failed %d times in a row for %s (%s); not asking it about that again for %s",
                self.name,
                circuit.failures,
                subject,
                error,
                circuit.open_for,
            )
        else:
            log.warning("%s failed for %s: %s", self.name, subject, error)
