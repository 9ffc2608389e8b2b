"""The TrainingJob reconcile loop: one writer for every TrainingJob.

Watch handlers (handlers.py) only record what they see and mark jobs dirty.
This loop takes the dirty jobs from its work queue (marks, wake-ups asked for,
the periodic resync), reconciles each (`reconcile.py`), then runs the
cluster-wide stages in the order `reconcile_once` lists them: the scheduling
cycle, emissions, chunk ends, and the gauges.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pydantic import ValidationError

from aisched.controller.templates import elided
from aisched.controller.training.scheduling import SchedulingCycle
from aisched.controller.training.state import CONCURRENT_RECONCILES, JobKey, parse_job
from aisched.kube import labels
from aisched.kube.inventory import PodRecord
from aisched.kube.versions import is_newer

log = logging.getLogger(__name__)


class TrainingJobController(SchedulingCycle):
    # -- fed by the watch handlers ------------------------------------------

    def job_seen(self, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        held = self.jobs.get(key)
        if held is not None and is_newer(
            held["metadata"].get("resourceVersion"), obj["metadata"].get("resourceVersion")
        ):
            # The event of a write older than one of ours that has landed: its status would undo
            # ours (a chunk end's pause read back as Running). The events of our writes follow.
            return
        kept = elided(obj)
        # A template the model refuses is kept whole, for the condition that tells its user why.
        if kept is not None and not isinstance(parse_job(obj), ValidationError):
            obj = kept  # its key too: nothing kept points into the watch's parse of the object
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            self._elided_templates.add(key)
        else:
            self._elided_templates.discard(key)
        self._store_job(key, obj)
        self.mark(key)

    def job_gone(self, namespace: str, name: str) -> None:
        self._elided_templates.discard((namespace, name))
        self._drop_job((namespace, name))
        self._parsed.pop((namespace, name), None)
        self.workers_unowned(self.inventory.pods_of_job(namespace, name))
        self._waiting_written.pop((namespace, name), None)
        self.metrics.workload.forget_job(namespace, name)
        self.queue.forget((namespace, name))  # no wake-up or retry for a job that is gone
        self._forget_failures((namespace, name))
        self.queue.wake()  # its GPUs are free for whoever waits

    def queue_seen(self, obj: dict[str, Any]) -> None:
        self.queues[obj["metadata"]["name"]] = obj
        self.queue.wake()

    def queue_gone(self, name: str) -> None:
        self.queues.pop(name, None)

    def queues_relisted(self, listed: Iterable[dict[str, Any]]) -> None:
        """Queues as a list read them: each one newer than ours (or new to us) is taken, as a watch
        event would be. A Queue missing from the list is left to the watch's delete event."""
        for obj in listed:
            held = self.queues.get(obj["metadata"]["name"])
            if held is None or is_newer(
                obj["metadata"].get("resourceVersion"), held["metadata"].get("resourceVersion")
            ):
                self.queue_seen(obj)

    def pod_changed(self, record: PodRecord | None) -> None:
        if record is not None and record.job_key and record.labels.get(labels.JOB_KIND) == "TrainingJob":
            self.mark(record.job_key)
        else:
            self.queue.wake()  # someone else's pod came or went: GPUs changed

    def node_changed(self, name: str) -> None:
        """NAME came, went, or changed as placement sees it (taints, readiness, GPUs, labels)."""
        # An interruption taint or NotReady affects the jobs on the node, and only those.
        for key in self.jobs_on_node(name):
            self.mark(key)
        self.queue.wake()  # GPUs came or went: the scheduling cycle and the gauges run even with no job marked

    def mark(self, key: JobKey) -> None:
        self._marked_during_cycle = True
        self.queue.add(key)

    # -- the loop -----------------------------------------------------------

    async def run(self, on_pass: Callable[[], None] = lambda: None) -> None:
        """Reconcile for ever; `on_pass` hears of each pass completed (the liveness probe's evidence)."""
        while True:
            # At the resync every job is dirty: the timers the loop keeps (TTL, deadlines) fire there too.
            keys = await self.queue.next_batch(self.jobs.keys)
            await self.reconcile_once(keys)
            on_pass()

    async def reconcile_once(self, keys: Iterable[JobKey]) -> None:
        """One pass: reconcile KEYS, then each cluster-wide stage, in this order."""
        self._marked_during_cycle = False
        self.pools.tick(self.clock(), self.inventory.nodes)
        # Jobs are independent: their API round trips overlap, so hundreds of jobs
        # submitted at once do not wait for each other's writes. A failing job is
        # retried with backoff and stops none of the others.
        await self.queue.process(keys, self.reconcile, concurrency=CONCURRENT_RECONCILES, on_done=self._reconciled)
        self.metrics.process.record_workqueue(
            "TrainingJob", depth=self.queue.depth(), pending_wakeups=self.queue.pending_timers()
        )
        stages: tuple[tuple[str, Callable[[], Awaitable[None]]], ...] = (
            ("scheduling cycle", self.schedule),
            ("estimating emissions", lambda: self._account_emissions(self.clock())),
            ("ending carbon chunks", lambda: self._end_chunks(self.clock())),
            ("releasing workers of deleted jobs", self._release_unowned),
            ("reporting", lambda: self._report_if_due(settled=not self._marked_during_cycle)),
        )
        for name, stage in stages:
            # Each stage is on its own: one failing leaves the next to run, and the next pass retries it.
            try:
                await stage()
            except Exception:
                log.exception("%s failed; will retry", name)
