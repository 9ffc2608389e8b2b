"""The scheduling cycle: every kind's work to the one scheduler, and each kind's part of its decision.

The cycle knows no kind of work. Each kind (`kind.CycleKind`) reads its own objects into requests
(`asked`); the cycle decides once for all of them (`policy.decision.decide`), over one snapshot of
the cluster (`ClusterState.snapshot`) and one set of queue quotas, then hands each kind its part
(`decided`), in the order the kinds were given: the services' replicas first (their GPUs are
promised at once), then the gangs, then other kinds' workloads. Nodes for gangs left waiting are
asked for after (`controller.provisioning`), and every Queue's usage is written last.

A decision that raises is made again without the services' replicas; should it still raise, the
requests it raises on are found by halving (`policy.culprits`), each is its kind's to set aside
(`blamed`), and the cycle decides for the others.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aisched.controller.cluster_state import ClusterState
from aisched.controller.cycle.kind import AnyKind, Asked, CycleView, Decided
from aisched.controller.cycle.queue_status import QueueStatus
from aisched.controller.provisioning import NodeProvisioner
from aisched.kube.client import KubeClient
from aisched.metrics import Metrics
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.culprits import culprits
from aisched.policy.decision import Decision, decide
from aisched.policy.provisioning import ProvisioningPlan
from aisched.policy.scheduler import JobRequest, ScheduleResult
from aisched.policy.scheduler.demand import pending_demand
from aisched.settings import Settings

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class SchedulingCycle:
    """Runs one cycle at a time: every kind's asks, one decision, each kind's part carried out."""

    settings: Settings
    state: ClusterState
    kinds: Sequence[AnyKind]
    """Asked in this order, and their parts carried out in it."""
    kube: KubeClient
    metrics: Metrics
    provisioner: NodeProvisioner | None
    clock: Callable[[], datetime]
    queue_status: QueueStatus = field(init=False)

    def __post_init__(self) -> None:
        self.queue_status = QueueStatus(self.state, self.kube, self.metrics)

    async def run(self) -> float:
        """One scheduling cycle: admit, keep waiting, preempt and resize, as the scheduler decides.
        Returns how long it took to decide, its writes left out (`aisched_scheduling_cycle_seconds`)."""
        now = self.clock()
        cycle_started, cpu_started = time.perf_counter(), time.thread_time()
        view = CycleView(self.state.snapshot(), now, self.queue_status.quotas(), self.state.inventory.doomed_nodes(now))
        asked = [(kind, await kind.asked(view)) for kind in self.kinds]
        requests = [request for _, one in asked for request in one.requests]
        started = time.perf_counter()
        decision = await self._decide(view, asked)
        elapsed = time.perf_counter() - started
        deciding = time.perf_counter() - cycle_started
        self.metrics.process.record_scheduling_cycle(deciding, time.thread_time() - cpu_started)
        for kind, one in asked:
            part = decision.jobs.split({r.key for r in one.requests})[1]
            try:
                await kind.decided(one, Decided(decision, part, elapsed), view)
            except Exception:
                log.exception("carrying out the cycle's decisions for %s failed; the next cycle tries again", kind.name)
        plan = await self._provision(decision.jobs, requests, now)
        self._record_demand(view.snapshot, decision.jobs, requests, plan)
        await self.queue_status.report(decision.jobs)
        if decision.jobs.deferred or decision.replicas_deferred:
            self.state.wake_cycle()  # the work this cycle did not reach has the next one, at once
        return deciding

    async def _decide(self, view: CycleView, asked: list[tuple[AnyKind, Asked[Any]]]) -> Decision:
        """The decision for the gangs and the services' new replicas. Should it raise, it is made again
        without the replicas (they wait a cycle); should it still raise, the requests it raises on are
        found by halving (`policy.culprits`), handed to their kinds, and it decides for the others."""
        most = self.settings.admissions_per_cycle
        requests = [request for _, one in asked for request in one.requests]
        replicas = [ask for _, one in asked for ask in one.replicas]
        decide_for = functools.partial(
            decide,
            view.snapshot,
            queues=view.quotas,
            now=view.now,
            first_band_gpu_seconds=self.settings.first_service_band_gpu_seconds,
            held_elsewhere=[*self.state.charged(), *(held for _, one in asked for held in one.held)],
        )
        try:
            return decide_for(requests, replicas, admissions_per_cycle=most)
        except Exception:
            log.exception("the scheduler raised on this cycle's work and replicas; deciding the work alone")
        try:
            return decide_for(requests, [], admissions_per_cycle=most)
        except Exception:
            log.exception("the scheduler raised on this cycle's work; halving it for the requests it cannot take")

        def fails(some: Sequence[JobRequest]) -> Exception | None:
            try:
                # With no bound on admissions: a request the bound would leave out could be the one raising.
                decide_for(list(some), [], admissions_per_cycle=len(some) + 1)
            except Exception as error:
                return error
            return None

        # Placed gangs are kept in while the waiting requests are halved: a failure may need one of each.
        placed_gangs = [r for r in requests if r.placement is not None]
        waiting = [r for r in requests if r.placement is None]
        found = culprits([], placed_gangs, fails) if fails(placed_gangs) else culprits(placed_gangs, waiting, fails)
        owner = {request.key: (kind, one) for kind, one in asked for request in one.requests}
        blamed = set()
        for request, raised in found:
            blamed.add(request.key)
            kind, one = owner[request.key]
            await kind.blamed(one, request, raised, view)
        # With nothing to blame this raises, and the stage fails as a whole, to be tried next pass.
        return decide_for([r for r in requests if r.key not in blamed], [], admissions_per_cycle=most)

    def _record_demand(
        self,
        snapshot: ClusterSnapshot,
        result: ScheduleResult,
        requests: list[JobRequest],
        plan: ProvisioningPlan | None,
    ) -> None:
        """The queue depth other autoscalers scale on: label values only from nodes and offerings."""
        products = {pool.gpu_product for pool in snapshot.pools if pool.gpu_product is not None}
        waiting = {w.key for w in result.waiting} | set(result.deferred)
        zones = {z for z in (n.zone for n, _ in snapshot.node_use()) if z is not None}
        if self.provisioner is not None:  # what the fleet can grow into is known, from zero nodes up
            zones.update(o.zone for o in self.provisioner.offerings)
            products.update(o.gpu_product for o in self.provisioner.offerings if o.gpu_product is not None)
        zone_of = plan.zones if plan is not None else {}
        self.metrics.capacity.record_pending_demand(pending_demand(requests, waiting, products, zone_of, zones))

    async def _provision(
        self, result: ScheduleResult, requests: list[JobRequest], now: datetime
    ) -> ProvisioningPlan | None:
        """Nodes for whole gangs left waiting for capacity (`controller.provisioning`), when it is on.

        On its own: a failure here (Karpenter's CRDs missing, the API server refusing) is logged and
        the next cycle tries again; the decisions of this one are carried out already."""
        if self.provisioner is None:
            return None
        held = {node for r in requests if r.placement is not None for node in r.placement.nodes}
        held.update(node for a in result.admitted for node in a.placement.nodes)
        held.update(node for r in result.resized for node in r.placement.nodes)
        pools = self.state.pools
        try:
            rates = {pool: pools.spot_rate_per_second(*pool) for pool in self.provisioner.spot_offerings()}
            return await self.provisioner.after_cycle(result, requests, held, now, rates)
        except Exception:
            log.exception("asking for nodes failed; the next cycle tries again")
            return None
