"""Leader election on a coordination.k8s.io Lease, so two replicas never act at once.

The rules are client-go's (`aisched.policy.leader`): a standby judges the holder's lease by
how long it has itself watched the record stay unchanged, on its own monotonic clock, never
by the holder's `renewTime`; the leader renews every `retry_seconds`, each attempt bounded
by what is left of `renew_deadline_seconds`, and once that deadline passes it stops writing
(`may_write` turns false, which `KubeClient` checks before every write) before any standby
may take the lease at `lease_seconds`. A standby logs the API server's refusals (429, 5xx,
timeouts) and tries again; it never crashes on them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from aisched.policy.leader import (
    LeaseRecord,
    Observation,
    claim,
    held_by_another,
    may_write,
    observe,
    released,
    renewal_budget,
)

log = logging.getLogger(__name__)
JITTER = 1.2  # client-go's: standbys spread their attempts over retry .. retry * (1 + JITTER)
RELEASE_SECONDS = 5.0  # a shutdown waits this long at most to hand the lease back


def micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseStore(Protocol):
    """Where the record lives; `replace` is a compare-and-swap on the version `read` returned."""

    async def read(self) -> tuple[LeaseRecord, str] | None:
        """The record and its resourceVersion; None when there is no Lease."""
        ...

    async def create(self, record: LeaseRecord) -> bool:
        """False when someone else created it first."""
        ...

    async def replace(self, record: LeaseRecord, version: str) -> bool:
        """False when the Lease changed since `version` was read."""
        ...


def _record(spec: dict[str, Any]) -> LeaseRecord:
    duration = spec.get("leaseDurationSeconds")
    transitions = spec.get("leaseTransitions")
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration_seconds=duration if isinstance(duration, int) else 0,
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=transitions if isinstance(transitions, int) else 0,
    )


def _spec(record: LeaseRecord) -> dict[str, Any]:
    return {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.duration_seconds,
        "acquireTime": record.acquire_time,
        "renewTime": record.renew_time,
        "leaseTransitions": record.transitions,
    }


@dataclass
class KubeLeaseStore:
    """The Lease on the API server; every request carries a deadline (`request_timeout_seconds`)."""

    api_client: client.ApiClient
    namespace: str
    name: str
    request_timeout_seconds: float = 5.0

    def __post_init__(self) -> None:
        self._api = client.CoordinationV1Api(self.api_client)

    async def read(self) -> tuple[LeaseRecord, str] | None:
        try:
            response: Any = await asyncio.to_thread(
                self._api.read_namespaced_lease,
                self.name,
                self.namespace,
                _preload_content=False,
                _request_timeout=self.request_timeout_seconds,
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        lease = json.loads(response.data)
        return _record(lease.get("spec") or {}), str(lease["metadata"]["resourceVersion"])

    async def create(self, record: LeaseRecord) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": _spec(record),
        }
        return await self._write(self._api.create_namespaced_lease, self.namespace, body)

    async def replace(self, record: LeaseRecord, version: str) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            # resourceVersion makes the replace a compare-and-swap: 409 if anyone wrote meanwhile.
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": version},
            "spec": _spec(record),
        }
        return await self._write(self._api.replace_namespaced_lease, self.name, self.namespace, body)

    async def _write(self, method: Callable[..., Any], *args: Any) -> bool:
        try:
            response: Any = await asyncio.to_thread(
                method, *args, _preload_content=False, _request_timeout=self.request_timeout_seconds
            )
            _ = response.data
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True


@dataclass
class LeaseElector:
    store: LeaseStore
    identity: str
    lease_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    """Monotonic seconds; all of the election's judgement runs on it. Thread-safe: `may_write` is
    asked from the API client's threads. Unit tests pass their fake loop's `time`."""
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(UTC), repr=False)
    """Only for the times written into the record, which nobody here compares."""
    jitter: Callable[[], float] = field(default=random.random, repr=False)
    _observation: Observation | None = field(default=None, init=False, repr=False)
    _renewed_at: float | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError("leader election needs retry < renew deadline < lease seconds")

    def may_write(self) -> bool:
        """True while this replica leads and its last renewal is recent enough to act on."""
        return may_write(self._renewed_at, self.renew_deadline_seconds, self.clock())

    async def acquire(self) -> None:
        """Return once this replica holds the lease; refusals and errors of the API server are waited out."""
        announced = False
        while not await self._attempt(self.lease_seconds):
            if not announced:
                log.info("standing by: another replica holds the leader lease")
                announced = True
            await asyncio.sleep(self.retry_seconds * (1 + JITTER * self.jitter()))
        log.info("leading: holding the leader lease as %s", self.identity)

    async def keep_renewing(self) -> None:
        """Renew until the renew deadline passes without a renewal; then return (leadership is lost).

        By then `may_write` is already false, so nothing this replica writes afterwards reaches
        the API server, whatever the caller still has in flight.
        """
        while True:
            await asyncio.sleep(self.retry_seconds)
            while True:
                assert self._renewed_at is not None  # acquire() ran
                budget = renewal_budget(self._renewed_at, self.renew_deadline_seconds, self.clock())
                if budget <= 0:
                    log.error("lost the leader lease: no renewal within %g s", self.renew_deadline_seconds)
                    return
                if await self._attempt(budget):
                    break
                budget = renewal_budget(self._renewed_at, self.renew_deadline_seconds, self.clock())
                await asyncio.sleep(min(self.retry_seconds, budget))

    async def release(self) -> None:
        """Stop leading and hand the lease back, so a rolling update's new replica leads within a
        retry rather than a lease. Writes stop first (the fence closes); a release that fails or
        takes longer than RELEASE_SECONDS leaves the lease to expire as it would have."""
        if self._renewed_at is None:
            return
        self._renewed_at = None
        try:
            async with asyncio.timeout(RELEASE_SECONDS):
                await self._release()
        except Exception as error:  # the lease expires on its own: nothing is lost but time
            log.warning("could not release the leader lease: %r", error)

    async def _release(self) -> None:
        found = await self.store.read()
        if found is None or found[0].holder != self.identity:
            return  # someone else's by now
        record, version = found
        if await self.store.replace(released(record, micro_time(self.wall())), version):
            log.info("released the leader lease")

    async def _attempt(self, budget: float) -> bool:
        """One try to take or renew the lease, given up after `budget` seconds; False on any failure."""
        started = self.clock()
        try:
            # Not wait_for: on 3.11 it may swallow a cancellation that comes as the answer does.
            async with asyncio.timeout(budget):
                return await self._take_or_renew(started)
        except TimeoutError:
            log.warning("the leader lease did not answer within %.1f s", budget)
        except ApiException as error:
            log.warning("the API server refused the leader lease: %s %s", error.status, error.reason)
        except Exception as error:  # connection refused, reset, unreadable: wait it out like a refusal
            log.warning("could not reach the leader lease: %r", error)
        return False

    async def _take_or_renew(self, started: float) -> bool:
        found = await self.store.read()
        wall = micro_time(self.wall())
        if found is None:
            new = claim(None, self.identity, self.lease_seconds, wall)
            if not await self.store.create(new):
                return False
        else:
            current, version = found
            self._observation = observe(self._observation, current, self.clock())
            if held_by_another(self._observation, self.identity, self.clock(), self.lease_seconds):
                return False
            new = claim(current, self.identity, self.lease_seconds, wall)
            if not await self.store.replace(new, version):
                return False
        # The renewal counts from when it was sent: the server may have applied it any time since.
        self._renewed_at = started
        self._observation = Observation(new, started)
        return True
