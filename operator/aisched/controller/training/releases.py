"""Letting worker pods go once what they reported is in their job's status.

Every worker carries the report finalizer (`policy/report_tracking.py` has the rules):
a job's reconcile takes it off the workers whose reports its status now holds, after
the status write; workers whose job is gone (deleted, or missing from a relist) are
let go by a stage of their own, since nothing will read their reports any more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import datetime

from aisched.controller.concurrency import all_done
from aisched.controller.training.store import JobKey, JobStore
from aisched.controller.workqueue import WorkQueue
from aisched.kube import labels
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory, PodKey, PodRecord
from aisched.policy.checkpoint_reports import read_report
from aisched.policy.report_tracking import TrackedWorker, releasable

log = logging.getLogger(__name__)
# Finalizer patches in flight at once when many workers are let go together (a deleted namespace).
CONCURRENT_RELEASES = 24


class WorkerReleases:
    """Workers whose reports are recorded, or whose job is gone, let go of."""

    def __init__(self, store: JobStore, inventory: Inventory, kube: KubeClient, queue: WorkQueue[JobKey]) -> None:
        self._store = store
        self._inventory = inventory
        self._kube = kube
        self._queue = queue
        # Workers (with the report finalizer) of TrainingJobs that are gone, to be let go.
        self._unowned: set[PodKey] = set()

    async def release_workers(self, key: JobKey, pods: list[PodRecord], now: datetime) -> None:
        """Let go of the workers of KEY (as observed in its reconcile) whose reports its status holds.

        Called after the reconcile's status write: what the status records is on the server.
        """
        tracked = [p for p in pods if p.tracked]
        obj = self._store.jobs.get(key)
        job = self._store.read(obj) if obj is not None and tracked else None
        if job is None:
            return  # gone: `workers_unowned` lets them go; unreadable: kept until it is fixed or deleted
        status = job.status
        release = releasable(
            [self._tracked_worker(p, now) for p in tracked],
            generation=status.gang_generation,
            recorded_step=status.last_checkpoint.step if status.last_checkpoint else None,
            now=now,
        )
        force = set(release.force_delete)
        await all_done(*(self._let_go(key[0], name, force=name in force) for name in release.finalizers))

    def workers_unowned(self, pods: Iterable[PodRecord]) -> None:
        """PODS belong to a TrainingJob that is gone: nothing will read their reports, let them go."""
        keys = {(p.namespace, p.name) for p in pods if p.tracked and p.labels.get(labels.JOB_KIND) == "TrainingJob"}
        if keys - self._unowned:
            self._unowned |= keys
            self._queue.wake()

    async def release_unowned(self) -> None:
        """The loop's stage for `workers_unowned`; what fails is tried again next pass."""
        pending = sorted(self._unowned)
        for start in range(0, len(pending), CONCURRENT_RELEASES):
            batch = pending[start : start + CONCURRENT_RELEASES]
            results = await asyncio.gather(
                *(self._let_go(namespace, name, force=False) for namespace, name in batch), return_exceptions=True
            )
            for pod, result in zip(batch, results, strict=True):
                if isinstance(result, Exception):
                    log.warning("could not release worker %s/%s of a deleted job: %s", *pod, result)
                else:
                    self._unowned.discard(pod)

    async def _let_go(self, namespace: str, name: str, *, force: bool) -> None:
        await self._kube.release_report_finalizer(namespace, name)
        if force:
            # Its node is unreachable: no kubelet will confirm the deletion, and the gang's names wait on it.
            await self._kube.delete_pod(namespace, name, 0)

    def _tracked_worker(self, pod: PodRecord, now: datetime) -> TrackedWorker:
        # A rejected report is no report: nothing of it will be recorded, so it holds the pod for nothing.
        report = read_report(pod.termination_message, now).report
        return TrackedWorker(
            name=pod.name,
            generation=pod.labels.get(labels.GANG_GENERATION),
            ended=pod.phase in ("Succeeded", "Failed"),
            started=pod.phase != "Pending",
            report_step=report.step if report else None,
            gone_by=pod.gone_by,
            node_reachable=pod.node is not None and self._inventory.reachable(pod.node),
        )
