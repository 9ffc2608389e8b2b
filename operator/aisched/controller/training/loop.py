"""The TrainingJob controller: its parts, put together, and the loop that drives them.

Watch handlers (handlers.py) only record what they see (the store) and mark jobs dirty.
The loop takes the dirty jobs from its work queue (marks, wake-ups asked for, the periodic
resync), reconciles each (`reconcile.py`), then runs the cluster-wide stages in the order
`reconcile_once` lists them: the scheduling cycle, emissions, chunk ends, the release of
workers whose job is gone, the deletion of those the garbage collector left, and the gauges.

Each part owns its state and is handed the others it needs when it is built (`__init__`
below): none reaches into the controller, and each can be built and tested alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry

from aisched.controller.cluster_state import ClusterState
from aisched.controller.cycle import ReplicaAsksKind, SchedulingCycle
from aisched.controller.cycle_pacing import CyclePacing
from aisched.controller.provisioning import NodeProvisioner
from aisched.controller.training.capacity import CapacityChooser
from aisched.controller.training.carbon import CarbonDeferral
from aisched.controller.training.cycle_kind import TrainingCycleKind
from aisched.controller.training.decisions import CycleDecisions
from aisched.controller.training.isolation import StageGuard
from aisched.controller.training.reconcile import JobReconciler
from aisched.controller.training.releases import WorkerReleases
from aisched.controller.training.reporting import Reporting
from aisched.controller.training.store import JobKey, JobStore, utc_now
from aisched.controller.training.stray_workers import StrayWorkers
from aisched.controller.training.writer import CONCURRENT_RECONCILES, StatusWriter
from aisched.controller.workqueue import WorkQueue
from aisched.kube import labels
from aisched.kube.client import KubeClient
from aisched.kube.inventory import PodRecord
from aisched.kube.versions import is_newer
from aisched.metrics import Metrics
from aisched.policy.cluster import ClusterSnapshot
from aisched.settings import Settings
from aisched.sources.carbon import CachedCarbonSource
from aisched.sources.energy import GpuEnergySource

log = logging.getLogger(__name__)


class TrainingJobController:
    def __init__(
        self,
        settings: Settings,
        kube: KubeClient,
        state: ClusterState,
        *,
        metrics: Metrics | None = None,
        carbon: CachedCarbonSource | None = None,
        provisioner: NodeProvisioner | None = None,  # new nodes for whole gangs (settings.provisioning)
        energy: GpuEnergySource | None = None,  # DCGM's energy counters, where Prometheus has them
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.state = state
        """The cluster as every controller decides from it (nodes, what pods hold, promises, queues' verdicts)."""
        inventory = self.inventory = state.inventory
        self.metrics = metrics or Metrics(CollectorRegistry(), process_metrics=False)
        self.carbon = carbon
        self.provisioner = provisioner
        self.clock = clock
        """What every part reads the time from; replaceable (a test skews it) once the parts are built."""
        self.in_flight = self.state.in_flight
        self.shares = state.shares
        """Which GPU each worker of a job with gpuShare gets, and its claim."""
        self.tenancy = self.state.tenancy
        self.pools = state.pools
        self.queue: WorkQueue[JobKey] = WorkQueue(
            name="TrainingJob", resync_seconds=settings.resync_seconds, max_batch=settings.reconciles_per_pass
        )
        """Jobs to reconcile: dirty marks, one wake-up per job, retries with backoff, the periodic resync."""
        # Set by every mark; a pass during which no job was marked reports at once: the jobs have settled.
        self._marked_during_cycle = False
        self._pacing = CyclePacing()

        state.cycle_driven_by(self.queue.wake)  # this loop's passes run the scheduling cycle

        now = self.now
        self.store = JobStore(self.state)
        self.writer = StatusWriter(kube, self.store)
        self.guard = StageGuard(self.store, self.writer, kube, self.queue, self.metrics)
        self.releases = WorkerReleases(self.store, inventory, kube, self.queue)
        self.strays = StrayWorkers(self.store, inventory, kube)
        """Pods named as a job's workers and not labelled so, and pods of gone jobs: deleted."""
        self.reconciler = JobReconciler(
            settings=settings,
            store=self.store,
            writer=self.writer,
            kube=kube,
            inventory=inventory,
            queue=self.queue,
            metrics=self.metrics,
            shares=self.shares,
            releases=self.releases,
            strays=self.strays,
            clock=now,
        )
        self.deferral = CarbonDeferral(
            settings=settings,
            store=self.store,
            writer=self.writer,
            guard=self.guard,
            reconciler=self.reconciler,
            kube=kube,
            inventory=inventory,
            queue=self.queue,
            metrics=self.metrics,
            carbon=carbon,
            energy=energy,
        )
        self.reporting = Reporting(
            self.store,
            self.guard,
            kube=kube,
            inventory=inventory,
            metrics=self.metrics,
            shares=self.shares,
            clock=now,
        )
        self.decisions = CycleDecisions(
            settings=settings,
            store=self.store,
            writer=self.writer,
            guard=self.guard,
            reconciler=self.reconciler,
            kube=kube,
            inventory=inventory,
            queue=self.queue,
            metrics=self.metrics,
            pools=self.pools,
        )
        self.cycle_kind = TrainingCycleKind(
            store=self.store,
            guard=self.guard,
            decisions=self.decisions,
            capacity=CapacityChooser(settings, provisioner),
            deferral=self.deferral,
            inventory=inventory,
            queue=self.queue,
            tenancy=self.tenancy,
            shares=self.shares,
        )
        """TrainingJobs as the scheduling cycle reads them, and their part of its decisions carried out."""
        self.cycle = SchedulingCycle(
            settings=settings,
            state=state,
            kinds=(ReplicaAsksKind(state.replica_asks), self.cycle_kind),
            kube=kube,
            metrics=self.metrics,
            provisioner=provisioner,
            clock=now,
        )
        """The cycle this loop's passes run: the services' replicas and these jobs, until `drives` gives it
        the operator's, with every kind."""

    def drives(self, cycle: SchedulingCycle) -> None:
        """This loop's passes run CYCLE (the operator's, built with every kind beside this one's)."""
        self.cycle = cycle

    def now(self) -> datetime:
        """The time as `clock` tells it when asked: every part reads this, so a test may replace the clock."""
        return self.clock()

    # -- what others read ----------------------------------------------------

    @property
    def jobs(self) -> dict[JobKey, dict[str, Any]]:
        return self.store.jobs

    @property
    def queues(self) -> dict[str, dict[str, Any]]:
        """The Queues as the watch shows them; the InferenceService controller reads this same dict."""
        return self.store.queues

    def cluster_snapshot(self) -> ClusterSnapshot:
        return self.store.cluster_snapshot()

    def queue_object(self, name: str) -> dict[str, Any] | None:
        return self.store.queue_object(name)

    # -- fed by the watch handlers ------------------------------------------

    def job_seen(self, obj: dict[str, Any]) -> None:
        key = self.store.seen(obj)
        if key is not None:
            self.mark(key)

    def job_gone(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self.store.forget(key)
        self.tenancy.forget(key)
        self.releases.workers_unowned(self.inventory.pods_of_job(namespace, name))
        self.strays.job_gone(namespace, name)
        self.decisions.forget(key)
        self.metrics.workload.forget_job(namespace, name)
        self.queue.forget(key)  # no wake-up or retry for a job that is gone
        self.guard.forget(key)
        self.queue.wake()  # its GPUs are free for whoever waits

    def workers_unowned(self, pods: Iterable[PodRecord]) -> None:
        pods = list(pods)
        self.releases.workers_unowned(pods)
        self.strays.unowned(pods)

    def queue_seen(self, obj: dict[str, Any]) -> None:
        self.store.queues[obj["metadata"]["name"]] = obj
        self.queue.wake()

    def queue_gone(self, name: str) -> None:
        self.store.queues.pop(name, None)
        self.metrics.workload.forget_queue(name)

    def queues_relisted(self, listed: Iterable[dict[str, Any]]) -> None:
        """Queues as a list read them: each one newer than ours (or new to us) is taken, as a watch
        event would be. A Queue missing from the list is left to the watch's delete event."""
        for obj in listed:
            held = self.store.queues.get(obj["metadata"]["name"])
            if held is None or is_newer(
                obj["metadata"].get("resourceVersion"), held["metadata"].get("resourceVersion")
            ):
                self.queue_seen(obj)

    def pod_changed(self, record: PodRecord | None) -> None:
        if (stray_of := self.strays.pod_seen(record)) is not None:
            self.mark(stray_of)  # one of its workers lost its labels: its reconcile deletes it
        if record is not None and record.job_key and record.labels.get(labels.JOB_KIND) == "TrainingJob":
            self.mark(record.job_key)
        else:
            self.queue.wake()  # someone else's pod came or went: GPUs changed

    def node_changed(self, name: str) -> None:
        """NAME came, went, or changed as placement sees it (taints, readiness, GPUs, labels)."""
        # An interruption taint or NotReady affects the jobs on the node, and only those.
        for key in self.store.jobs_on_node(name):
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
            keys = await self.queue.next_batch(self.store.jobs.keys, timeout=self.reporting.owed_in())
            await self.reconcile_once(keys)
            on_pass()

    async def reconcile(self, key: JobKey) -> None:
        await self.reconciler.reconcile(key)

    async def schedule(self) -> None:
        loop = asyncio.get_running_loop()
        if (wait := self._pacing.wait(loop.time())) > 0:
            await asyncio.sleep(wait)  # the watch events of a burst are handled meanwhile (`cycle_pacing`)
        deciding = 0.0  # a cycle that raised before it decided delays the next one by nothing
        try:
            deciding = await self.cycle.run()
        finally:
            self._pacing.ran(deciding, loop.time())

    async def reconcile_once(self, keys: Iterable[JobKey]) -> None:
        """One pass: reconcile KEYS, then each cluster-wide stage, in this order."""
        self._marked_during_cycle = False
        self.pools.tick(self.clock(), self.inventory.nodes)
        # Jobs are independent: their API round trips overlap, so hundreds of jobs
        # submitted at once do not wait for each other's writes. A failing job is
        # retried with backoff and stops none of the others.
        reconciler = self.reconciler
        await self.queue.process(
            keys, reconciler.reconcile, concurrency=CONCURRENT_RECONCILES, on_done=reconciler.reconciled
        )
        self.metrics.process.record_workqueue(
            "TrainingJob", depth=self.queue.depth(), pending_wakeups=self.queue.pending_timers()
        )
        stages: tuple[tuple[str, Callable[[], Awaitable[None]]], ...] = (
            ("scheduling cycle", self.schedule),
            ("estimating emissions", lambda: self.deferral.account_emissions(self.clock())),
            ("ending carbon chunks", lambda: self.deferral.end_chunks(self.clock())),
            ("releasing workers of deleted jobs", self.releases.release_unowned),
            ("deleting pods of deleted jobs", lambda: self.strays.delete_orphans(self.clock())),
            ("reporting", lambda: self.reporting.report_if_due(settled=not self._marked_during_cycle)),
        )
        for name, stage in stages:
            # Each stage is on its own: one failing leaves the next to run, and the next pass retries it.
            try:
                await stage()
            except Exception:
                log.exception("%s failed; will retry", name)
