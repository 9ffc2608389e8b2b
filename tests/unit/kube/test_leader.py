"""The elector against an in-memory Lease with faults: refusals, hangs, skewed clocks. Fake loop clock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client.exceptions import ApiException

from aisched.kube.leader import LeaseElector
from aisched.policy.leader import LeaseRecord

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]
WALL = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@dataclass
class MemoryLease:
    """One Lease, compare-and-swap on a version; `fail` and `hang` inject faults per operation."""

    record: LeaseRecord | None = None
    version: int = 0
    fail: list[int] = field(default_factory=list)
    """Statuses the next reads answer with, one each (429, 500 ...)."""
    hang_writes: bool = False
    writes: int = 0

    async def read(self) -> tuple[LeaseRecord, str] | None:
        if self.fail:
            raise ApiException(status=self.fail.pop(0), reason="injected")
        return None if self.record is None else (self.record, str(self.version))

    async def create(self, record: LeaseRecord) -> bool:
        if self.record is not None:
            return False
        return await self._write(record)

    async def replace(self, record: LeaseRecord, version: str) -> bool:
        if version != str(self.version):
            return False
        return await self._write(record)

    async def _write(self, record: LeaseRecord) -> bool:
        if self.hang_writes:
            await asyncio.Event().wait()
        self.record, self.version, self.writes = record, self.version + 1, self.writes + 1
        return True


def elector(lease: MemoryLease, identity: str, skew: timedelta = timedelta(0)) -> LeaseElector:
    """An elector on the fake loop clock, whose wall clock runs `skew` off the true time."""
    loop = asyncio.get_running_loop()
    return LeaseElector(
        lease,
        identity,
        lease_seconds=15,
        renew_deadline_seconds=10,
        retry_seconds=2,
        clock=loop.time,
        wall=lambda: WALL + skew + timedelta(seconds=loop.time()),
        jitter=lambda: 0.0,
    )


async def test_a_standby_survives_429_and_5xx_and_then_leads() -> None:
    lease = MemoryLease(fail=[429, 500, 503])
    me = elector(lease, "me")
    await asyncio.wait_for(me.acquire(), timeout=60)
    assert lease.record is not None and lease.record.holder == "me"
    assert me.may_write()


async def test_a_standby_waits_a_whole_lease_after_the_record_last_changed() -> None:
    lease = MemoryLease(record=LeaseRecord("other", 15, renew_time="whenever"))
    loop = asyncio.get_running_loop()
    start = loop.time()
    await elector(lease, "me").acquire()
    waited = loop.time() - start
    assert 15 <= waited <= 15 + 2 * 2.2  # one lease, then at most one jittered retry
    assert lease.record is not None and lease.record.transitions == 1


async def test_a_holder_whose_clock_is_far_behind_keeps_the_lease_while_it_renews() -> None:
    # Its renewTime is a day old by our clock; a standby comparing clocks would take over at once.
    lease = MemoryLease()
    holder = elector(lease, "holder", skew=-timedelta(days=1))
    await holder.acquire()
    renewing = asyncio.create_task(holder.keep_renewing())
    standby = asyncio.create_task(elector(lease, "standby", skew=timedelta(days=1)).acquire())
    await asyncio.sleep(120)
    assert not standby.done()
    assert lease.record is not None and lease.record.holder == "holder" and holder.may_write()
    renewing.cancel()
    standby.cancel()


async def test_a_hung_renewal_stops_the_leader_before_a_standby_may_take_over() -> None:
    lease = MemoryLease()
    loop = asyncio.get_running_loop()
    leader = elector(lease, "leader")
    await leader.acquire()
    renewed = loop.time()
    lease.hang_writes = True
    await asyncio.wait_for(leader.keep_renewing(), timeout=30)  # returns: leadership lost, no hang
    stopped = loop.time()
    assert not leader.may_write()
    assert stopped <= renewed + 10 + 0.01
    # A standby that saw the last renewal the moment it was made may take over only at renewed + 15.
    lease.hang_writes = False
    standby = elector(lease, "standby")
    await standby.acquire()
    assert loop.time() >= renewed + 15 > stopped


async def test_a_blocked_loop_closes_the_fence_before_anything_else_runs() -> None:
    lease = MemoryLease()
    clock = [0.0]
    leader = replace(elector(lease, "leader"), clock=lambda: clock[0])
    await leader.acquire()
    assert leader.may_write()
    clock[0] += 11  # the loop did not run for 11 s: no renewal could be made meanwhile
    assert not leader.may_write()


async def test_renewals_never_outlive_the_deadline_of_a_hung_api() -> None:
    lease = MemoryLease()
    loop = asyncio.get_running_loop()
    leader = elector(lease, "leader")
    await leader.acquire()
    await asyncio.sleep(0)
    renewing = asyncio.create_task(leader.keep_renewing())
    await asyncio.sleep(5)
    writes = lease.writes
    assert writes >= 2  # renewing every retry period
    lease.hang_writes = True
    start = loop.time()
    await asyncio.wait_for(renewing, timeout=30)
    assert loop.time() - start <= 10


async def test_a_leader_that_stops_hands_the_lease_over_at_the_next_retry() -> None:
    lease = MemoryLease()
    leader = elector(lease, "old")
    await leader.acquire()
    await leader.release()
    assert not leader.may_write()  # its writes stop before the lease is handed back
    assert lease.record is not None and lease.record.holder == ""
    loop = asyncio.get_running_loop()
    start = loop.time()
    await elector(lease, "new").acquire()
    assert loop.time() - start < 1  # not a whole lease
    assert lease.record.holder == "new"


async def test_a_release_leaves_a_lease_another_replica_took_alone() -> None:
    lease = MemoryLease()
    leader = elector(lease, "old")
    await leader.acquire()
    assert lease.record is not None
    lease.record = replace(lease.record, holder="thief")
    await leader.release()
    assert lease.record.holder == "thief" and not leader.may_write()
