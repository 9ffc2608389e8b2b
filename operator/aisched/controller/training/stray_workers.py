"""Taking back the pods that were, or pass for, TrainingJob workers and that no job will look after.

The decisions are `policy/stray_workers.py`'s; this keeps what they are taken on and carries them
out. Every pod the watches or a relist change passes by `pod_seen`, which keeps, per job, the pods
named as one of its workers whose labels disagree (the suspects), and says which job to reconcile;
the job's reconcile then deletes them (`sweep`) before it looks at its workers. A job that goes
hands its pods to `job_gone`, a relist the pods of jobs it no longer lists to `unowned`; the
loop's stage (`delete_orphans`) deletes those the garbage collector has not, once it had its turn.

A delete that fails is logged and tried again at the next reconcile or pass: a stray never stops
its job's reconcile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import datetime

from aisched.controller.training.releases import CONCURRENT_RELEASES
from aisched.controller.training.store import JobKey, JobStore
from aisched.kube import labels
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory, PodKey, PodRecord
from aisched.policy.stray_workers import (
    PodMarks,
    Removal,
    is_training_worker,
    orphan_due,
    removal,
    stray_of,
)

log = logging.getLogger(__name__)
STRAY_WORKER_DELETED = "StrayWorkerDeleted"


def marks(record: PodRecord) -> PodMarks:
    """What RECORD says of itself, for the policy."""
    ours = record.labels
    return PodMarks(
        namespace=record.namespace,
        name=record.name,
        kind=ours.get(labels.JOB_KIND),
        job=ours.get(labels.JOB_NAME),
        generation=ours.get(labels.GANG_GENERATION),
        rank=ours.get(labels.RANK),
        terminating=record.terminating,
        tracked=record.tracked,
    )


class StrayWorkers:
    """Stray workers of live jobs, and pods of jobs that are gone, found and deleted."""

    def __init__(self, store: JobStore, inventory: Inventory, kube: KubeClient) -> None:
        self._store = store
        self._inventory = inventory
        self._kube = kube
        # Per TrainingJob (whether it exists or not yet): pods named as its workers, not labelled so.
        self._suspects: dict[JobKey, set[PodKey]] = {}
        self._suspect_of: dict[PodKey, JobKey] = {}
        # Pods of TrainingJobs that are gone, with when the loop's stage first saw them so (None: not yet;
        # the watches and relists tell without reading the clock).
        self._orphans: dict[PodKey, datetime | None] = {}

    # -- what the watches and relists tell --------------------------------------------------

    def pod_seen(self, record: PodRecord | None) -> JobKey | None:
        """A pod came, changed or went; the TrainingJob to reconcile when it is now a stray of that job."""
        if record is None:
            return None
        key = (record.namespace, record.name)
        held = self._inventory.pods.get(key)  # gone: the event was its deletion
        job = stray_of(marks(held)) if held is not None else None
        if job != self._suspect_of.get(key):
            self._forget_suspect(key)
            if job is not None:
                self._suspects.setdefault(job, set()).add(key)
                self._suspect_of[key] = job
        return job if job is not None and job in self._store.jobs else None

    def job_gone(self, namespace: str, name: str) -> None:
        """TrainingJob NAMESPACE/NAME is gone: its workers, and the pods named as them, are orphans."""
        pods = {(p.namespace, p.name) for p in self._inventory.pods_of_job(namespace, name)}
        for key in pods | self._suspects.get((namespace, name), set()):
            self._orphans.setdefault(key, None)

    def unowned(self, records: Iterable[PodRecord]) -> None:
        """RECORDS belong to no TrainingJob a relist found: those with the operator's mark are orphans."""
        for record in records:
            if is_training_worker(marks(record)):
                self._orphans.setdefault((record.namespace, record.name), None)

    # -- taking them back ---------------------------------------------------------------------

    async def sweep(self, job: JobKey) -> frozenset[str]:
        """Delete JOB's strays; their names (none of them is one of its workers, whatever it says)."""
        strays, removals = set(), []
        for key in sorted(self._suspects.get(job, ())):
            held = self._inventory.pods.get(key)
            if held is None or stray_of(marks(held)) != job:
                self._forget_suspect(key)
                continue
            strays.add(held.name)
            if (taken := removal(marks(held))) is not None:
                removals.append(taken)
        obj = self._store.jobs.get(job)
        for done in await self._carry_out(removals, f"named as a worker of TrainingJob {job[0]}/{job[1]}"):
            if obj is not None and done.delete:
                message = (
                    f"deleted pod {done.name}: it is named as one of this job's workers, but its aisched.io/ labels "
                    "were removed or changed; its GPUs would be held uncharged, and its report cannot be trusted"
                )
                self._kube.post_event(obj, "Warning", STRAY_WORKER_DELETED, message)
        return frozenset(strays)

    async def delete_orphans(self, now: datetime) -> None:
        """The loop's stage: delete the pods of gone jobs that are still there once the collector had its turn."""
        removals = []
        for key, seen_at in sorted(self._orphans.items()):
            held = self._inventory.pods.get(key)
            if held is None or (held.job_key is not None and held.job_key in self._store.jobs):
                del self._orphans[key]  # gone, or its job is back: its reconcile looks after it
                continue
            since = self._orphans[key] = now if seen_at is None else seen_at
            if not orphan_due(since, now):
                continue
            taken = removal(marks(held))
            if taken is None:
                del self._orphans[key]
            else:
                removals.append(taken)
        for done in await self._carry_out(removals, "of a TrainingJob that is gone"):
            self._orphans.pop((done.namespace, done.name), None)

    async def _carry_out(self, removals: list[Removal], why: str) -> list[Removal]:
        """Each of REMOVALS, side by side; those that succeeded (the others are logged, to be tried again)."""
        results: list[BaseException | None] = []
        for start in range(0, len(removals), CONCURRENT_RELEASES):  # a deleted namespace's worth at a time
            batch = removals[start : start + CONCURRENT_RELEASES]
            results += await asyncio.gather(*(self._take_back(r) for r in batch), return_exceptions=True)
        done = []
        for taken, result in zip(removals, results, strict=True):
            if isinstance(result, Exception):
                log.warning("could not take back pod %s/%s (%s): %s", taken.namespace, taken.name, why, result)
            else:
                log.info("took back pod %s/%s (%s)", taken.namespace, taken.name, why)
                done.append(taken)
        return done

    async def _take_back(self, taken: Removal) -> None:
        if taken.delete:
            await self._kube.delete_pod(taken.namespace, taken.name)  # its own grace: it may still save
        if taken.release:
            await self._kube.release_report_finalizer(taken.namespace, taken.name)

    def _forget_suspect(self, key: PodKey) -> None:
        job = self._suspect_of.pop(key, None)
        if job is None:
            return
        keys = self._suspects.get(job)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._suspects[job]
