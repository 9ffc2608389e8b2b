"""Leader election against the real API server, with faults: never two writers.

Each replica is an elector on a Lease of the test's namespace, with a writer that sends a real
write (a DELETE of a pod nobody has) through a fenced KubeClient every few milliseconds, each on
its own thread and event loop, as two operator processes would be. Every write that reaches the
API client is recorded with its start and end on the one monotonic clock the threads share; the
invariant is that every write of one leader ended before the next leader's first write began.

The faults: a Lease update that lands on the server but whose answer never comes back (the worst
kind of hang: the holder cannot know it renewed), holders and standbys whose wall clocks are
hours apart, and a leader whose event loop is blocked for longer than the lease.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from aisched.kube.client import KubeClient, NotLeadingError
from aisched.kube.leader import KubeLeaseStore, LeaseElector
from aisched.policy.leader import LeaseRecord
from aisched.testing.cluster import wait_for

pytestmark = [pytest.mark.integration]
LEASE = "aisched-election-test"
LEASE_SECONDS, RENEW_DEADLINE, RETRY = 4, 3.0, 0.5


@dataclass(frozen=True)
class Write:
    replica: str
    start: float
    end: float


class HangingStore(KubeLeaseStore):
    """The real Lease; once `hang` is set, a replace lands on the server and then never answers."""

    hang: threading.Event

    async def replace(self, record: LeaseRecord, version: str) -> bool:
        landed = await super().replace(record, version)
        if self.hang.is_set():
            await asyncio.Event().wait()
        return landed


@dataclass
class Replica:
    """One elector and its writer on a thread of their own."""

    name: str
    kubeconfig: Path
    namespace: str
    writes: list[Write]
    skew: timedelta = timedelta(0)
    hang: threading.Event = field(default_factory=threading.Event)
    leading: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)
    refused: int = 0
    loop: asyncio.AbstractEventLoop | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Replica:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def block_loop(self, seconds: float) -> None:
        """Freeze the replica's event loop, as a long synchronous call in a handler would."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(time.sleep, seconds)

    async def _run(self) -> None:
        self.loop = asyncio.get_running_loop()
        api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        store = HangingStore(api_client, self.namespace, LEASE, request_timeout_seconds=RENEW_DEADLINE)
        store.hang = self.hang
        elector = LeaseElector(
            store,
            self.name,
            lease_seconds=LEASE_SECONDS,
            renew_deadline_seconds=RENEW_DEADLINE,
            retry_seconds=RETRY,
            wall=lambda: datetime.now(UTC) + self.skew,
        )
        kube = KubeClient(api_client, request_timeout_seconds=5.0, fence=elector.may_write)
        self._record_deletes(kube)
        tasks = [asyncio.create_task(self._elect(elector)), asyncio.create_task(self._write(kube))]
        await asyncio.to_thread(self._stop.wait)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        api_client.close()
        api_client.rest_client.pool_manager.clear()  # close() leaves its connections open

    async def _elect(self, elector: LeaseElector) -> None:
        await elector.acquire()
        self.leading.set()
        await elector.keep_renewing()
        self.lost.set()

    async def _write(self, kube: KubeClient) -> None:
        while True:
            try:
                await kube.delete_pod(self.namespace, "nobody")
            except NotLeadingError:
                self.refused += 1
            await asyncio.sleep(0.02)

    def _record_deletes(self, kube: KubeClient) -> None:
        """Every delete that passed the fence, with when it was sent and when it was answered."""
        send = kube.core.delete_namespaced_pod

        def recorded(*args: Any, **kwargs: Any) -> Any:
            start = time.monotonic()
            try:
                return send(*args, **kwargs)
            finally:
                self.writes.append(Write(self.name, start, time.monotonic()))

        kube.core.delete_namespaced_pod = recorded


@pytest.fixture
def replicas(kubeconfig: Path, namespace: str) -> Iterator[list[Replica]]:
    made: list[Replica] = []
    yield made
    for replica in made:
        replica.stop()


def never_two_writers(writes: list[Write]) -> list[str]:
    """The order in which replicas wrote, asserting that each handover was clean."""
    ordered = sorted(writes, key=lambda w: w.start)
    leaders: list[str] = []
    for write in ordered:
        if not leaders or leaders[-1] != write.replica:
            assert write.replica not in leaders, f"{write.replica} wrote again after another replica led"
            leaders.append(write.replica)
    for before, after in itertools.pairwise(leaders):
        last = max(w.end for w in writes if w.replica == before)
        first = min(w.start for w in writes if w.replica == after)
        assert last < first, f"{before} still wrote {last - first:.3f} s after {after} began"
    return leaders


def writes_of(replica: Replica) -> int:
    return sum(1 for w in replica.writes if w.replica == replica.name)


def test_a_hung_lease_update_stops_the_leader_before_the_standby_writes(
    kubeconfig: Path, namespace: str, replicas: list[Replica]
) -> None:
    writes: list[Write] = []
    first = Replica("first", kubeconfig, namespace, writes).start()
    replicas.append(first)
    wait_for(first.leading.is_set, 30, "the first replica to lead")
    second = Replica("second", kubeconfig, namespace, writes).start()
    replicas.append(second)
    wait_for(lambda: writes_of(first) > 10, 30, "the leader to write")

    first.hang.set()
    hung = time.monotonic()
    wait_for(first.lost.is_set, 30, "the leader to give up its hung renewal")
    assert time.monotonic() - hung < RENEW_DEADLINE + RETRY + 1
    wait_for(second.leading.is_set, 30, "the standby to take over")
    wait_for(lambda: writes_of(second) > 10, 30, "the new leader to write")
    assert never_two_writers(writes) == ["first", "second"]
    assert first.refused > 0  # its writer kept trying, and the fence kept the writes from going out


def test_clocks_hours_apart_never_make_a_standby_take_a_renewed_lease(
    kubeconfig: Path, namespace: str, replicas: list[Replica]
) -> None:
    writes: list[Write] = []
    # The holder's renewTime reads two hours old to the standby: a standby judging by the clocks
    # would take over at once, and each would then act beside the other.
    holder = Replica("holder", kubeconfig, namespace, writes, skew=-timedelta(hours=1)).start()
    replicas.append(holder)
    wait_for(holder.leading.is_set, 30, "the holder to lead")
    standby = Replica("standby", kubeconfig, namespace, writes, skew=timedelta(hours=1)).start()
    replicas.append(standby)
    time.sleep(3 * LEASE_SECONDS)  # three whole leases: a skew-driven take-over would have happened
    assert not standby.leading.is_set() and not holder.lost.is_set()
    assert writes_of(standby) == 0
    assert never_two_writers(writes) == ["holder"]


def test_a_blocked_leader_loop_writes_nothing_once_the_standby_took_over(
    kubeconfig: Path, namespace: str, replicas: list[Replica]
) -> None:
    writes: list[Write] = []
    first = Replica("first", kubeconfig, namespace, writes).start()
    replicas.append(first)
    wait_for(first.leading.is_set, 30, "the first replica to lead")
    second = Replica("second", kubeconfig, namespace, writes).start()
    replicas.append(second)
    wait_for(lambda: writes_of(first) > 10, 30, "the leader to write")

    blocked_for = LEASE_SECONDS + 4
    first.block_loop(blocked_for)
    blocked = time.monotonic()
    wait_for(second.leading.is_set, 30, "the standby to take over from the frozen leader")
    wait_for(lambda: writes_of(second) > 10, 30, "the new leader to write")
    # Let the frozen loop wake and its writer and renewal run into the fence.
    time.sleep(max(0.0, blocked + blocked_for + 2 - time.monotonic()))
    wait_for(first.lost.is_set, 30, "the woken leader to see its lease lost")
    assert never_two_writers(writes) == ["first", "second"]
    assert first.refused > 0
