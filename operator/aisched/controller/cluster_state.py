"""The cluster as every controller decides from it, owned by none of them.

One record of nodes and what pods hold (the `Inventory`, fed by the node, pod and claim watches),
one record of GPUs promised by decisions whose writes have not landed (`InFlightPlacements`), the
Queues, one record of what each queue refuses (`TenancyBook`), the GPU shares handed out, the
namespaces being deleted, and what each kind's admitted work holds before
its pods exist or bind (a TrainingJob's ranks not created yet, a Job's pods its controller has not
made yet): each kind's controller registers how to count its own (`holds_from`). `snapshot()` is
the one view of free GPUs that the scheduling cycle and the serving controller both place into.

The services' asks for new replicas (`replica_asks`), what each kind's running work holds by queue
(`charged_from`), the spot pools' interruption rates (`pools`) and the way to have the scheduling
cycle run soon (`wake_cycle`, for whichever loop drives it) are here too: no controller lends
another its internals, each kind's reads and registers what it needs from this one record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aisched.controller.closing_namespaces import ClosingNamespaces
from aisched.controller.in_flight import InFlightPlacements
from aisched.controller.replica_asks import ReplicaAsks
from aisched.controller.sharing import GpuShares
from aisched.controller.tenancy import TenancyBook
from aisched.kube.inventory import Inventory
from aisched.kube.pools import PoolTracker
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.interruptions import InterruptionPrior
from aisched.policy.queueing import stored_queue
from aisched.policy.scheduler import HeldGpus


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
        settings = inventory.settings
        self.pools = PoolTracker(
            InterruptionPrior.per_hour(settings.spot_prior_interruptions_per_hour, settings.spot_prior_weight_hours)
        )
        """Each spot pool's interruptions seen: what spot capacity is chosen and provisioned by."""
        self.replica_asks = ReplicaAsks(self.in_flight, wake_cycle=self.wake_cycle)
        """InferenceServices' new replicas, asked of the scheduling cycle and answered by it."""
        self._holders: list[Callable[[], UncreatedHolds]] = []
        self._charged: list[Callable[[], Sequence[HeldGpus]]] = []
        self._cycle_drivers: list[Callable[[], None]] = []

    def cycle_driven_by(self, wake: Callable[[], None]) -> None:
        """WAKE has the loop that runs the scheduling cycle run it soon."""
        self._cycle_drivers.append(wake)

    def wake_cycle(self) -> None:
        """Something the cycle decides from changed (a new ask, a workload held or gone): it runs soon."""
        for wake in self._cycle_drivers:
            wake()

    def charged_from(self, holder: Callable[[], Sequence[HeldGpus]]) -> None:
        """HOLDER tells, for every cycle, what one kind's running work holds, by the queue it is charged to."""
        self._charged.append(holder)

    def charged(self) -> list[HeldGpus]:
        """What every registered kind's running work holds, by queue: charged in each cycle."""
        return [held for holder in self._charged for held in holder()]

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
