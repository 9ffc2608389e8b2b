"""The controller of other kinds' workloads: the watches into the book, and the pods pass.

It decides nothing itself: each workload is decided in the one scheduling cycle (`cycle.py`), which
it is woken for. Its own pass places the pods of admitted workloads as their controllers make
them: every GPU pod of a gang's first run at once, then each replacement as it comes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aisched.controller.cluster_state import ClusterState
from aisched.controller.concurrency import at_most
from aisched.controller.workloads.admitting import admission_promise
from aisched.controller.workloads.book import WorkloadBook, WorkloadEntry
from aisched.controller.workloads.cycle import WorkloadCycle
from aisched.controller.workloads.deferral import WorkloadDeferral
from aisched.controller.workloads.placing import pod_promise
from aisched.controller.workloads.pods import WorkloadPod, WorkloadRef, read_workload_pod
from aisched.kube.client import KubeClient
from aisched.kube.versions import VersionLedger
from aisched.kube.workload_api import KIND_APIS, PodGroups, WorkloadApi
from aisched.metrics.workload import WorkloadMetrics
from aisched.policy.workloads.model import Workload, WorkloadKind

log = logging.getLogger(__name__)


def _names(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _version(obj: Mapping[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    return version if isinstance(version, str) else None


# Workloads whose pods one pass places at once (each gang's own pods overlap too: `placing.GANG_WRITES`).
CONCURRENT_WORKLOADS = 8


def _asks(pod: WorkloadPod) -> tuple[object, ...]:
    """What of a pod a cycle decides on: whether it lives, what it asks, which of its workload's sets it is in."""
    return (pod.live, pod.gpus, pod.mig_profile, pod.pod_set)


# The kinds with an object of their own, each watched when the cluster serves it.
OBJECT_KINDS = tuple(KIND_APIS)


class WorkloadController:
    def __init__(
        self,
        kube: KubeClient,
        state: ClusterState,
        *,
        queue_object: Callable[[str], Mapping[str, Any] | None],
        wake_cycle: Callable[[], None],
        metrics: WorkloadMetrics | None = None,
        pods_ready_seconds: float = 300.0,
        kinds: frozenset[WorkloadKind] = frozenset(WorkloadKind),
        deferral: WorkloadDeferral | None = None,
    ) -> None:
        self.kinds = kinds
        """The kinds scheduled (`settings.workload_kinds`): the others are watched, listed and read not at all."""
        self.book = WorkloadBook(kinds)
        self.api = WorkloadApi(kube)
        self.in_flight = state.in_flight
        self.cycle = WorkloadCycle(
            book=self.book,
            api=self.api,
            kube=kube,
            in_flight=state.in_flight,
            tenancy=state.tenancy,
            queue_object=queue_object,
            metrics=metrics,
            deferral=deferral,
            pods_ready_seconds=pods_ready_seconds,
            pod_groups=PodGroups(kube),
        )
        self.wake_cycle = wake_cycle
        state.holds_from(self.cycle.uncreated_holds)
        self._to_place: set[WorkloadRef] = set()
        # The resourceVersion each object and pod was last seen at: an older copy (a relist's page read
        # before the watch's latest event) never overwrites a newer one, nor brings a deleted one back.
        self._versions: VersionLedger[tuple[str, str, str]] = VersionLedger()
        self._wake = asyncio.Event()

    @property
    def object_kinds(self) -> tuple[WorkloadKind, ...]:
        """The scheduled kinds with an object of their own: each is watched, and listed at start-up."""
        return tuple(kind for kind in OBJECT_KINDS if kind in self.kinds)

    # -- what the watches show ---------------------------------------------------------------

    def object_seen(self, kind: WorkloadKind, obj: Mapping[str, Any]) -> None:
        """OBJ changed. Whatever a tenant wrote in it, no error leaves this handler: a watch or a relist that
        raised on one object would hold every other's state back (a start-up relist retried for ever)."""
        try:
            self._object_seen(kind, obj)
        except Exception:
            log.exception("reading %s %s/%s failed; it is left as it was", kind.value, *_names(obj))

    def _object_seen(self, kind: WorkloadKind, obj: Mapping[str, Any]) -> None:
        key = (kind.value, *_names(obj))
        version = _version(obj)
        if self._versions.is_stale(key, version):  # a relist's page older than what the watch showed
            return
        self._versions.saw(key, version)
        entry = self.book.object_seen(kind, obj)
        if entry is None:
            return
        if isinstance(entry.read, Workload) and entry.read.admitted is not None:
            self.in_flight.settle(admission_promise(entry.read.key))  # its record holds its GPUs now
            self.cycle.admissions.seen(entry.read)
            self._place(entry)
        self.wake_cycle()

    def object_gone(self, kind: WorkloadKind, namespace: str, name: str, version: str | None = None) -> None:
        self._versions.deleted((kind.value, namespace, name), version)
        entry = self.book.object_gone(kind, namespace, name)
        self.in_flight.settle(admission_promise(f"{namespace}/{name}@{kind.value}"))
        if entry is not None and self.book.get(entry.ref) is None:
            self.cycle.forget(entry.ref)
        self.wake_cycle()

    def pod_changed(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        """A pod changed (as `object_seen`: no error leaves here, whatever the pod says)."""
        try:
            self._pod_changed(obj, deleted=deleted)
        except Exception:
            log.exception("reading pod %s/%s failed; it is left as it was", *_names(obj))

    def _pod_changed(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        pod = read_workload_pod(obj)
        if pod is None:
            return
        key, version = ("pods", pod.namespace, pod.name), _version(obj)
        if self._versions.is_stale(key, version):  # a relist's page older than what the watch showed
            return
        if deleted:
            self._versions.deleted(key, version)
        else:
            self._versions.saw(key, version)
        if deleted:
            self._pod_deleted(pod.namespace, pod.name, self.book.pod_gone(pod.namespace, pod.name, obj))
            return
        if pod.bound or not pod.live:
            self.in_flight.settle(pod_promise(pod.namespace, pod.name))  # the inventory counts it
        self.cycle.placer.pod_seen(pod.namespace, pod.name, gated=pod.gated, holding=pod.bound or not pod.live)
        before = self.book.pod_of(pod.workload, pod.name)
        entry = self.book.pod_seen(obj)
        if entry is None:
            return
        if pod.gated:
            self._place(entry)
        # A pod placed that binds, runs or is ungated changes no charge (its record or promise held its GPUs,
        # the inventory holds them now): no cycle for that. A new pod, one that ended or asks otherwise does.
        if before is None or (pod.gated and not before.gated) or _asks(before) != _asks(pod):
            self.wake_cycle()

    def _pod_deleted(self, namespace: str, name: str, forgotten: WorkloadEntry | None) -> None:
        """The pod is gone, and FORGOTTEN is the entry it was taken from (None: it was no one's)."""
        self.in_flight.settle(pod_promise(namespace, name))  # nothing is on its way to it
        self.cycle.placer.pod_seen(namespace, name, gated=False, holding=True)
        if forgotten is not None:
            self.wake_cycle()

    # -- what a relist shows: deletions a dropped watch never reported ------------------------

    def pods_relisted(self, listed: Iterable[tuple[str, str]], list_version: str) -> None:
        """The workload pods a pod list at LIST_VERSION left out were deleted while the watch was away."""
        self._versions.begin_relist(list_version)
        present = {("pods", namespace, name) for namespace, name in listed}
        owners = self.book.pod_owners()
        for key in self._versions.absent(present, list_version):
            if key[0] != "pods":
                continue
            _, namespace, name = key
            self._versions.deleted(key, None)
            ref = owners.get((namespace, name))
            log.info("pod %s/%s was deleted while the watch was away", namespace, name)
            self._pod_deleted(namespace, name, None if ref is None else self.book.pod_of_gone(ref, name))

    def objects_relisted(self, kind: WorkloadKind, listed: Iterable[tuple[str, str]], list_version: str) -> None:
        """The objects of KIND a list at LIST_VERSION left out were deleted while the watch was away."""
        present = {(kind.value, namespace, name) for namespace, name in listed}
        for key in self._versions.absent(present, list_version):
            if key[0] == kind.value:
                log.info("%s %s/%s was deleted while the watch was away", kind.value, key[1], key[2])
                self.object_gone(kind, key[1], key[2])

    def _place(self, entry: WorkloadEntry) -> None:
        self._to_place.add(entry.ref)
        self._wake.set()

    # -- the pods pass -----------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            refs, self._to_place = self._to_place, set()
            await at_most(CONCURRENT_WORKLOADS, [functools.partial(self._place_pods_of, ref) for ref in refs])

    async def _place_pods_of(self, ref: WorkloadRef) -> None:
        entry = self.book.get(ref)
        if entry is None or not isinstance(entry.read, Workload) or self.cycle.record_of(entry.read) is None:
            return
        try:
            await self.cycle.placer.place_pods(entry)
        except Exception:
            log.exception("placing the pods of %s/%s (%s) failed; its next event tries again", ref[1], ref[2], ref[0])
