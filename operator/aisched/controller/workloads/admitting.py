"""A gang kind's admission written on its object, and its stop: the records the operator keeps on other kinds.

An admission is recorded on the workload's object in the same write that lets its pods be made
(`AdmittedRecord`, unsuspend); until the watch shows that record, the one written stands for it (charged,
its pods placed by it, never admitted a second time), and its GPUs are promised (`in_flight`). A stop
suspends the object again and drops the record, so its controller deletes its pods; a kind that cannot
be suspended has its placed pods deleted instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from aisched.controller.in_flight import InFlightPlacements, Promised
from aisched.controller.workloads.book import WorkloadEntry
from aisched.kube.client import KubeClient
from aisched.kube.workload_api import KIND_APIS, WorkloadApi
from aisched.policy.placement import Placement
from aisched.policy.workloads.model import PLACEMENT_ANNOTATION, AdmittedRecord, Workload, WorkloadKind


def admission_promise(key: str) -> tuple[str, str]:
    """The in-flight record's key for a workload's admission, until the watch shows its record."""
    return ("Workload", key)


@dataclass(kw_only=True)
class Admissions:
    api: WorkloadApi
    kube: KubeClient
    in_flight: InFlightPlacements
    say: Callable[[WorkloadEntry, str, str, str], None]
    """Tells the workload (an event on its object): type, reason, message."""
    _written: dict[str, AdmittedRecord] = field(default_factory=dict)
    """Admissions written and not seen yet, by workload key: until the watch shows its record, the workload
    is charged and placed by this one, never asked for (and admitted) a second time."""
    _shrunk_at: dict[str, str] = field(default_factory=dict)
    """The object version each workload's last shrink was written against: sent once per version."""

    def record_of(self, workload: Workload) -> AdmittedRecord | None:
        """Where WORKLOAD's current run goes: the record on its object, or the one written and not seen yet."""
        pending = self._written.get(workload.key)
        if pending is not None and (workload.admitted is None or workload.admitted.generation < pending.generation):
            return pending
        return workload.admitted

    def seen(self, workload: Workload) -> None:
        """The watch shows WORKLOAD's object: a record as new as the one written holds it now."""
        pending = self._written.get(workload.key)
        if pending is not None and workload.admitted is not None and workload.admitted.generation >= pending.generation:
            del self._written[workload.key]

    async def admit(self, entry: WorkloadEntry, placement: Placement | None, now: datetime) -> None:
        """Record PLACEMENT on its object and let its pods be made, in one write (None: it asks no GPU)."""
        workload = entry.read
        if not isinstance(workload, Workload):
            return
        kind, namespace, name = entry.ref
        earlier = self.record_of(workload)
        record = AdmittedRecord(
            nodes=placement.nodes if placement is not None else (),
            gpus_per_pod=placement.gpus_per_replica if placement is not None else 0,
            mig_profile=placement.mig_profile if placement is not None else None,
            queue=workload.queue,
            admitted_at=now,
            generation=(earlier.generation if earlier is not None else 0) + 1,
        )
        promise = admission_promise(workload.key)
        if placement is not None:  # promised at once: the watch shows the record only later
            self.in_flight.promise(promise, Promised.of(placement))
        self._written[workload.key] = record
        # A precondition: a spec edited since the decision read it is refused (409), not admitted.
        patch: dict[str, Any] = {
            "metadata": _record_metadata(record, entry.version),
            **KIND_APIS[kind].suspend_patch(False),
        }
        if kind is WorkloadKind.BATCH_JOB and placement is not None and len(placement.nodes) < workload.gpu_pods:
            patch["spec"]["parallelism"] = len(placement.nodes)  # an elastic Job admitted at fewer pods
        written = False
        try:
            written = await self.api.patch_object(kind, namespace, name, patch)
        finally:
            if not written:  # gone, edited since the decision read it, or the write failed: nothing is held
                self.in_flight.settle(promise)
                self._written.pop(workload.key, None)
        if not written:
            return
        nodes = record.nodes
        self.say(
            entry,
            "Normal",
            "Admitted",
            f"admitted to queue {workload.queue}: {len(nodes)} GPU pod(s) on {len(set(nodes))} node(s)",
        )

    async def shrink(self, entry: WorkloadEntry, nodes: tuple[str, ...]) -> None:
        """A gang scaled down in place keeps only NODES of its record: the record is rewritten for the same run
        (its generation and admission time stay), and until the watch shows it the old one is charged."""
        workload = entry.read
        if not isinstance(workload, Workload) or workload.admitted is None:
            return
        if entry.version and self._shrunk_at.get(workload.key) == entry.version:
            return  # sent against this version already: the watch shows the outcome
        self._shrunk_at[workload.key] = entry.version
        record = replace(workload.admitted, nodes=nodes)
        kind, namespace, name = entry.ref
        # Against the spec the shrink was read from: a scale-up since is refused (409).
        if await self.api.patch_object(kind, namespace, name, {"metadata": _record_metadata(record, entry.version)}):
            given_back = len(workload.admitted.nodes) - len(nodes)
            message = f"scaled down in place: {given_back} GPU pod place(s) of its admission given back"
            self.say(entry, "Normal", "ScaledDown", message)

    async def stop(self, entry: WorkloadEntry, reason: str, message: str) -> None:
        """Suspend it and drop its record (its controller deletes its pods); a kind with no suspend: its pods go."""
        kind, namespace, name = entry.ref
        if isinstance(entry.read, Workload):
            self._written.pop(entry.read.key, None)
        api = KIND_APIS.get(kind)
        if api is not None and api.suspend_path is not None:
            patch = {"metadata": {"annotations": {PLACEMENT_ANNOTATION: None}}, **api.suspend_patch(True)}
            await self.api.patch_object(kind, namespace, name, patch)
        else:
            for pod in entry.live_pods:
                if not pod.gated:
                    await self.kube.delete_pod(namespace, pod.name)
        self.say(entry, "Warning" if reason not in ("Preempted",) else "Normal", reason, message)

    def forget(self, key: str) -> None:
        self._written.pop(key, None)
        self._shrunk_at.pop(key, None)


def _record_metadata(record: AdmittedRecord, version: str) -> dict[str, Any]:
    """The metadata patch that writes RECORD on its object, against VERSION when known."""
    metadata: dict[str, Any] = {
        "annotations": {PLACEMENT_ANNOTATION: json.dumps(record.to_json(), separators=(",", ":"))}
    }
    if version:
        metadata["resourceVersion"] = version
    return metadata
