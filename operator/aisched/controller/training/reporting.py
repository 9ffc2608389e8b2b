"""What the TrainingJob controller reports: the job and cluster gauges (each Queue's status is the cycle's)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from aisched.api import TrainingJob, TrainingJobPhase
from aisched.api.queue import DEFAULT_QUEUE
from aisched.api.sharing import GpuShare
from aisched.controller.sharing import GpuShares
from aisched.controller.sharing_report import mig_instances, shared_gpu_usage, waiting_shares
from aisched.controller.training.isolation import REPORTING, StageGuard
from aisched.controller.training.store import JobKey, JobStore, finished
from aisched.kube.client import KubeClient
from aisched.kube.inventory import Inventory
from aisched.metrics import GpuPoolUsage, Metrics
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.deadlines import deadline_slack_seconds

log = logging.getLogger(__name__)
Phase = TrainingJobPhase
# How often the per-job and cluster gauges are refreshed: a pass over every job, well
# under Prometheus' scrape interval, and not once per cycle when hundreds of jobs arrive.
REPORT_PERIOD = timedelta(seconds=5)
# A settled pass reports at once, but no sooner than this after the last report: in a burst of other kinds'
# workloads every pass is settled (no TrainingJob waits), and a report of a thousand nodes each pass was
# three tenths of the operator's CPU in the workloads benchmark.
SETTLED_REPORT_GAP = timedelta(seconds=1)


class Reporting:
    """The gauges of the jobs and the cluster, refreshed every period."""

    def __init__(
        self,
        store: JobStore,
        guard: StageGuard,
        *,
        kube: KubeClient,
        inventory: Inventory,
        metrics: Metrics,
        shares: GpuShares,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._guard = guard
        self._kube = kube
        self._inventory = inventory
        self._metrics = metrics
        self._shares = shares
        self._clock = clock
        self._reported_at: datetime | None = None
        self._owed = False
        """A settled pass came within the gap of the last report: the next pass after the gap reports."""

    async def report_if_due(self, settled: bool) -> None:
        """Report once a period has passed since the last report, or when the jobs have SETTLED
        (nothing is waiting to be reconciled), so the gauges show a burst's outcome soon: at once, or
        the gap after the last report (`owed_in` wakes the loop for it)."""
        now = self._clock()
        since = None if self._reported_at is None else now - self._reported_at
        if since is not None and since < REPORT_PERIOD and (not settled or since < SETTLED_REPORT_GAP):
            self._owed = self._owed or settled
            return
        self.report()
        self._reported_at, self._owed = now, False

    def owed_in(self) -> float | None:
        """Seconds until the report a settled pass was owed is due; None when none is owed."""
        if not self._owed or self._reported_at is None:
            return None
        return max(0.0, (self._reported_at + SETTLED_REPORT_GAP - self._clock()).total_seconds())

    def report(self) -> None:
        """Refresh the gauges that describe the whole cluster and every job."""
        census: dict[tuple[str, str], int] = {}
        gangs_by_level: dict[str, int] = {}
        pending_sizes: list[int] = []
        share_asks: list[tuple[str, GpuShare, int, str | None]] = []
        whole_waiting = 0
        for key, obj in self._store.jobs.items():
            if self._guard.sits_out(REPORTING, key):
                continue
            if finished(obj):  # counted off its object: a finished job's model is not kept
                with self._guard.isolated(REPORTING, key):
                    census_key = (_queue_of(obj), str(obj["status"]["phase"]))
                    census[census_key] = census.get(census_key, 0) + 1
                    self._report_pods(key)
                continue
            job = self._store.read(obj)
            if job is None:
                continue
            with self._guard.isolated(REPORTING, key):
                phase = str(job.status.phase or Phase.QUEUED)  # new jobs wait like queued ones
                census[(job.spec.queue, phase)] = census.get((job.spec.queue, phase), 0) + 1
                if phase == Phase.QUEUED:
                    pending_sizes.append(job.spec.gpus_per_replica)
                    spec = job.spec
                    if spec.gpu_share is not None:
                        share_asks.append((f"{key[0]}/{key[1]}", spec.gpu_share, spec.replicas, spec.gpu_type))
                    else:
                        whole_waiting += spec.replicas * spec.gpus_per_replica
                if phase == Phase.RUNNING and job.status.placement:
                    # A level the topology no longer has (the operator was reconfigured) counts as spread.
                    level = job.status.placement.level
                    level = level if level in self._metrics.workload.topology_levels else "Cluster"
                    gangs_by_level[level] = gangs_by_level.get(level, 0) + 1
                self._report_job(key, job, phase)
        self._metrics.workload.record_jobs(census)
        self._metrics.workload.record_running_gangs(gangs_by_level)
        self._metrics.capacity.record_gpu_pools(
            _gpu_pools(self._store.cluster_snapshot(), min(pending_sizes, default=None))
        )
        waiting = waiting_shares(share_asks, self._inventory.smallest_gpu_memory_mib())
        self._metrics.sharing.record_shared_gpus(shared_gpu_usage(self._shares, waiting, whole_waiting))
        self._metrics.sharing.record_mig_slices(mig_instances(self._inventory))

    def _report_job(self, key: JobKey, job: TrainingJob, phase: str) -> None:
        namespace, name = key
        if phase == Phase.QUEUED:
            self._metrics.workload.record_job_pending(
                namespace, name, job.spec.queue, job.status.queued_time or self._clock()
            )
        if job.spec.deadline is not None and phase not in (Phase.SUCCEEDED, Phase.FAILED):
            remaining = float(job.spec.expected_duration_seconds or 0)
            self._metrics.workload.record_deadline_slack(
                namespace, name, deadline_slack_seconds(job.spec.deadline, self._clock(), remaining)
            )
        self._report_pods(key)

    def _report_pods(self, key: JobKey) -> None:
        namespace, name = key
        pods = [p.name for p in self._inventory.pods_of_job(namespace, name)]
        self._metrics.pods.record(namespace, name, "TrainingJob", pods)


def _gpu_pools(snapshot: ClusterSnapshot, smallest_pending_replica: int | None) -> list[GpuPoolUsage]:
    """GPUs per (product, capacity type); fragmented = free GPUs on nodes too full for any waiting replica."""
    pools: dict[tuple[str, str], list[int]] = {}
    for node, used in snapshot.node_use():
        key = (node.gpu_product or "unknown", str(node.capacity_type))
        free = max(0, node.allocatable_gpus - used)
        stranded = free if smallest_pending_replica is not None and free < smallest_pending_replica else 0
        totals = pools.setdefault(key, [0, 0, 0, 0])
        for index, value in enumerate((node.allocatable_gpus, min(used, node.allocatable_gpus), free, stranded)):
            totals[index] += value
    return [GpuPoolUsage(product, capacity, *totals) for (product, capacity), totals in sorted(pools.items())]


def _queue_of(obj: dict[str, Any]) -> str:
    """The job's queue as the model reads it (`spec.queue`, "default" when unset)."""
    queue = (obj.get("spec") or {}).get("queue")
    return queue if isinstance(queue, str) and queue else DEFAULT_QUEUE
