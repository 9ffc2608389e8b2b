"""Leader election on a coordination.k8s.io Lease, so two replicas never act at once.

The standby replica waits in `acquire`; the leader renews the lease every
`retry_seconds` and gives up (the process then exits and restarts as a standby)
if it cannot renew within `renew_deadline_seconds`, well before the lease
expires for others at `lease_seconds`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


def _micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaseElector:
    api_client: client.ApiClient
    namespace: str
    name: str
    identity: str
    lease_seconds: int = 15
    renew_deadline_seconds: int = 10
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        self._api = client.CoordinationV1Api(self.api_client)

    async def acquire(self) -> None:
        """Return once this replica holds the lease."""
        announced = False
        while not await asyncio.to_thread(self._try_acquire_or_renew):
            if not announced:
                log.info("standing by: another replica holds lease %s/%s", self.namespace, self.name)
                announced = True
            await asyncio.sleep(self.retry_seconds)
        log.info("leading: holding lease %s/%s as %s", self.namespace, self.name, self.identity)

    async def keep_renewing(self) -> None:
        """Renew until a renewal deadline is missed; then return (leadership is lost)."""
        last_renewal = datetime.now(UTC)
        while True:
            await asyncio.sleep(self.retry_seconds)
            try:
                renewed = await asyncio.to_thread(self._try_acquire_or_renew)
            except Exception:
                log.exception("renewing the lease failed")
                renewed = False
            now = datetime.now(UTC)
            if renewed:
                last_renewal = now
            elif now - last_renewal > timedelta(seconds=self.renew_deadline_seconds):
                log.error("lost the lease %s/%s", self.namespace, self.name)
                return

    def _try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        try:
            lease: Any = self._api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
        except ApiException as error:
            if error.status != 404:
                raise
            return self._create(now)
        current = json.loads(lease.data)
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = spec.get("renewTime")
        duration = spec.get("leaseDurationSeconds") or self.lease_seconds
        expired = renewed is None or datetime.fromisoformat(renewed) + timedelta(seconds=duration) < now
        if holder not in (None, "", self.identity) and not expired:
            return False
        transitions = spec.get("leaseTransitions") or 0
        current["spec"] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": _micro_time(now),
            "acquireTime": spec.get("acquireTime") if holder == self.identity else _micro_time(now),
            "leaseTransitions": transitions if holder == self.identity else transitions + 1,
        }
        try:
            # resourceVersion in the body makes this a compare-and-swap.
            self._api.replace_namespaced_lease(self.name, self.namespace, current)
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True

    def _create(self, now: datetime) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            self._api.create_namespaced_lease(self.namespace, body)
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True
