"""The cluster as every controller decides from it, owned by none of them.

One record of nodes and what pods hold (the `Inventory`, fed by the node, pod and claim watches),
one record of GPUs promised by decisions whose writes have not landed (`InFlightPlacements`), the
Queues, one record of what each queue refuses (`TenancyBook`), the GPU shares handed out, the
namespaces being deleted, and what each kind's admitted work holds before
its pods exist or bind (a TrainingJob's ranks not created yet, a Job's pods its controller has not
made yet): each kind's controller registers how to count its own (`holds_from`). `snapshot()` is
the one view of free GPUs that the scheduling cycle and the serving controller both place into.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aisched.controller.closing_namespaces import ClosingNamespaces
from aisched.controller.in_flight import InFlightPlacements
from aisched.controller.sharing import GpuShares
from aisched.controller.tenancy import TenancyBook
from aisched.kube.inventory import Inventory
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import stored_queue


@dataclass(frozen=True, slots=True)
class UncreatedHolds:
    """What admitted work holds that no pod the inventory counts holds yet."""

    whole: dict[str, int] = field(default_factory=dict)
    """Whole GPUs, by node."""
    mig: Sequence[tuple[str, str]] = ()
    """MIG instances, one (node, profile) each."""


class ClusterState:
    def __init__(self, inventory: Inventory, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.inventory = inventory
        self.in_flight = InFlightPlacements()
        """GPUs promised by any controller's decision and not yet written down."""
        self.tenancy = TenancyBook()
        """What each queue refuses of each workload, until either object changes."""
        self.queues: dict[str, dict[str, Any]] = {}
        """The Queues as their watch last showed them: one record of quotas and tenancy for every kind."""
        self.shares = GpuShares(inventory)
        """Which GPU each shared (fraction, MIG) worker or replica gets, as of the GPUs promised."""
        self.closing = ClosingNamespaces(monotonic)
        """Namespaces the API server said are being deleted."""
        self._holders: list[Callable[[], UncreatedHolds]] = []

    def queue_object(self, name: str) -> dict[str, Any] | None:
        """Queue NAME as stored; the default queue, where nobody wrote one, as the locked one the
        operator creates (it grants nothing), never an open one."""
        return stored_queue(self.queues, name)

    def holds_from(self, holder: Callable[[], UncreatedHolds]) -> None:
        """HOLDER counts, for every snapshot, what one kind's admitted work holds before its pods do."""
        self._holders.append(holder)

    def snapshot(self) -> ClusterSnapshot:
        """The cluster as placement sees it: every pod's GPUs, what admitted work holds before its pods,
        and what is promised but not written yet."""
        reserved = self.in_flight.by_node()
        mig: list[tuple[str, str]] = []
        for holder in self._holders:
            holds = holder()
            for node, gpus in holds.whole.items():
                reserved[node] = reserved.get(node, 0) + gpus
            mig.extend(holds.mig)
        snapshot = self.inventory.snapshot(reserved)
        self.in_flight.hold_shared(snapshot.shared)
        for node, profile in mig:
            if node in snapshot.shared.mig_free:
                snapshot.shared.take_mig(node, profile)
        return snapshot
