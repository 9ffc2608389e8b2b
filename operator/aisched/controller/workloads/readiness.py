"""Whether an admitted workload's pods came up: GPUs held by an admission whose pods never bind are given back.

A workload is admitted on its record before its controller makes a pod; if the pods never exist or
never bind (its controller is not installed, or is stopped), the record would hold its GPUs for good.
Past the bound it is stopped and asked again only after a backoff that doubles each time, up to an
hour; once every GPU pod of an admission has bound, that admission is never overdue again (a Job's
finished index or a restarted worker leaves a gap that is no controller missing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aisched.controller.workloads.pods import WorkloadRef
from aisched.policy.workloads.model import AdmittedRecord

FIRST_BACKOFF_SECONDS = 60.0
MAX_BACKOFF_SECONDS = 3600.0


@dataclass
class PodsReadyWatch:
    pods_ready_seconds: float = 300.0
    """How long an admitted workload's pods may take to exist and bind (`settings.workload_pods_ready_seconds`)."""
    _retry_at: dict[WorkloadRef, datetime] = field(default_factory=dict)
    """Workloads stopped because their pods never came up: not asked again before then."""
    _backoff: dict[WorkloadRef, float] = field(default_factory=dict)
    _came_up: set[tuple[WorkloadRef, int]] = field(default_factory=set)
    """Admissions (workload, record generation) whose GPU pods all bound once."""

    def overdue(self, ref: WorkloadRef, record: AdmittedRecord, bound: Callable[[], int], now: datetime) -> str | None:
        """Why the admission RECORD of REF is stopped now (its pods did not all come up in time); None when
        it is not. BOUND counts its GPU pods bound and live (asked only while it may be overdue)."""
        if (ref, record.generation) in self._came_up:
            return None
        pods = bound()
        if pods >= len(record.nodes):
            self._came_up.add((ref, record.generation))
            self._backoff.pop(ref, None)
            return None
        if (now - record.admitted_at).total_seconds() <= self.pods_ready_seconds:
            return None
        backoff = min(self._backoff.get(ref, FIRST_BACKOFF_SECONDS / 2) * 2, MAX_BACKOFF_SECONDS)
        self._backoff[ref] = backoff
        self._retry_at[ref] = now + timedelta(seconds=backoff)
        within = f"{self.pods_ready_seconds:.0f} s of its admission"
        return (
            f"{pods} of its {len(record.nodes)} GPU pods were made and bound within {within} (is its "
            f"controller installed and running?): stopped, to be admitted again in {backoff:.0f} s"
        )

    def waiting_out(self, ref: WorkloadRef, now: datetime) -> bool:
        """REF was stopped as overdue and its backoff has not passed."""
        retry_at = self._retry_at.get(ref)
        return retry_at is not None and retry_at > now

    def forget(self, ref: WorkloadRef) -> None:
        self._retry_at.pop(ref, None)
        self._backoff.pop(ref, None)
        self._came_up = {up for up in self._came_up if up[0] != ref}
