"""Each Queue as the cycle reads it (its quota) and as it reports it (its usage, written to its status)."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from aisched.api import Queue
from aisched.controller.cluster_state import ClusterState
from aisched.kube.client import KubeClient
from aisched.metrics import Metrics
from aisched.policy.queueing import QueueQuota, with_locked_default
from aisched.policy.scheduler import QueueUsage, ScheduleResult

log = logging.getLogger(__name__)


class QueueStatus:
    def __init__(self, state: ClusterState, kube: KubeClient, metrics: Metrics) -> None:
        self._state = state
        self._kube = kube
        self._metrics = metrics
        self._refused: dict[str, dict[str, Any]] = {}
        """Queue objects the model refuses, each version logged once."""

    def quotas(self) -> list[QueueQuota]:
        """The quotas of the Queues this operator can read; the work of one it cannot waits, as for a missing
        queue, but for the default queue's, which gets the locked one (`with_locked_default`)."""
        quotas = []
        for name, obj in self._state.queues.items():
            try:
                quotas.append(QueueQuota.from_queue(Queue.model_validate(obj)))
            except ValidationError as error:
                if self._refused.get(name) is not obj:  # once per version of the object, not per cycle
                    log.error("cannot read Queue %s: %s; its work waits as for a missing queue", name, error)
                    self._refused[name] = obj
        return with_locked_default(quotas)

    async def report(self, result: ScheduleResult) -> None:
        """Each Queue's usage this cycle, to its gauges and its status (written only when it changed)."""
        for name, usage in result.queues.items():
            obj = self._state.queues.get(name)
            if obj is None:
                continue
            # One Queue whose status cannot be written (or read) leaves the others' to be written.
            try:
                await self._report(name, obj, usage)
            except Exception:
                log.exception("reporting the usage of Queue %s failed; the next cycle tries again", name)

    async def _report(self, name: str, obj: dict[str, Any], usage: QueueUsage) -> None:
        queue = Queue.model_validate(obj)
        self._metrics.workload.record_queue(
            name,
            nominal_gpus=queue.spec.nominal_gpus,
            used_gpus=usage.used_milli / 1000,
            borrowed_gpus=usage.borrowed_gpus,
        )
        status = queue.status.model_copy(deep=True)
        status.used_gpus, status.borrowed_gpus = usage.used_gpus, usage.borrowed_gpus
        status.admitted_jobs, status.pending_jobs = usage.admitted_jobs, usage.pending_jobs
        status.observed_generation = obj["metadata"].get("generation")
        if status != queue.status:
            await self._kube.patch_status("queues", None, name, status.to_wire())
            self._state.queues[name] = {**obj, "status": status.to_wire()}
