"""MIG instances for pods with `gpuShare.migProfile`: the node of each, and the repartitions that make room.

Placement: the scheduler and the serving planner place a MIG worker or replica on a node whose device
plugin advertises a free `nvidia.com/mig-<profile>` ("mixed" strategy; `policy.share_placement`), and
this part makes its pod ask one there. Only should that instance be gone meanwhile (a pod the watch had
not shown) is the pod moved to another node with one (same capacity type), as
`policy.sharing.mig_configs.place_instances` packs them.

Repartition: a profile no node has free is noted as waiting, by queue; `run` (a background loop) picks an
idle node whose MIG manager may give it within the queue's bound (`policy.sharing.mig_plan`: no more
GPUs than its waiting instances fill, packed, nor than its quota allows), cordons it (marked with an
annotation of ours, so that we only ever uncordon what we cordoned), checks again that no pod holds
one of its GPUs, and sets `nvidia.com/mig.config`. Once the MIG manager reports the config applied
(`nvidia.com/mig.config.state=success`) it uncordons the node; the waiting pods are placed on the
controllers' next pass. One repartition is in flight at a time. The way back is the same path: a
sliced node whose instances are all free, and that no waiting instance could use, is set back to
whole GPUs (`all-disabled`) after `hold_down_seconds` free (`mig_whole_hold_down_seconds`), or at
once while a whole-GPU gang waits for GPUs (`cycle_asked`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

from aisched.kube.claims import with_mig_slice
from aisched.kube.inventory import Inventory
from aisched.kube.mig_nodes import CORDONED_ANNOTATION, NodeMig
from aisched.kube.records import PodKey
from aisched.policy.queueing import QueueQuota
from aisched.policy.sharing.mig_configs import (
    CONFIG_LABEL,
    DISABLED,
    STATE_FAILED,
    STATE_LABEL,
    STATE_SUCCESS,
    MigNode,
    Repartition,
    model_of,
    place_instances,
)
from aisched.policy.sharing.mig_demand import QueuedSpec, waiting_mig
from aisched.policy.sharing.mig_plan import (
    UNKNOWN_QUEUE,
    MigAsk,
    plan_back_to_whole,
    plan_bounded_repartition,
    quota_ceilings,
)

log = logging.getLogger(__name__)

HOSTNAME: Final = "kubernetes.io/hostname"


WAITING_PASSES: Final = 30
"""Passes (2 s each) after which an instance asked and not asked again no longer makes a repartition: the
controllers ask again on each of their retries, so a job still waiting keeps its ask fresh."""


class NodePatcher(Protocol):
    async def patch_node(self, name: str, patch: dict[str, Any]) -> None: ...


class MigInstanceUnavailableError(Exception):
    """No node has a free instance of the profile now; a repartition may be under way."""


@dataclass
class MigPartitions:
    inventory: Inventory
    assumed: dict[PodKey, tuple[str, str]] = field(default_factory=dict)
    """Instances handed to pods the inventory has not seen yet, by pod: (node, profile)."""
    asks: dict[tuple[str, str], int] = field(default_factory=dict)
    """Instances asked that no node had free, by (queue, profile), as of each one's last ask."""
    asks_since: dict[tuple[str, str], int] = field(default_factory=dict)
    """The pass at which each was last asked: an ask not repeated goes stale."""
    passes: int = 0
    stale_after_passes: int = WAITING_PASSES
    hold_down_seconds: float | None = None
    """How long a sliced node stays so once its instances are all free and none waits for them; None:
    the inventory's settings say (`mig_whole_hold_down_seconds`)."""
    clock: Callable[[], float] = time.monotonic
    ceilings: dict[str, int | None] = field(default_factory=dict)
    """The most GPUs each queue may hold (`mig_plan.quota_ceiling`), as of the last cycle."""
    whole_gpus_waiting: int = 0
    """Whole GPUs gangs waited for at the last cycle (`whole_since`): sliced free GPUs go back for them."""
    whole_since: int = 0
    partitioned_for: dict[str, str] = field(default_factory=dict)
    """The queue each node was sliced for: its GPUs count against that queue's bound while sliced."""
    idle_since: dict[str, float] = field(default_factory=dict)
    """When each sliced node was first seen with all its instances free (on `clock`)."""
    cordoned: Repartition | None = None
    """Cordoned on the last pass, to be relabelled on this one."""
    in_flight: Repartition | None = None
    """Relabelled, until its MIG manager reports the config applied (or failed)."""
    in_flight_from: str | None = None
    """The config the node in flight had before."""
    uncordoned: set[str] = field(default_factory=set)
    """Nodes uncordoned whose watch event has not come yet (they still show our annotation)."""
    cordoned_for: str | None = None
    """The queue the node cordoned last pass is to be sliced for; None: set back to whole GPUs."""

    def __post_init__(self) -> None:
        if self.hold_down_seconds is None:
            self.hold_down_seconds = self.inventory.settings.mig_whole_hold_down_seconds

    @property
    def waiting(self) -> dict[str, int]:
        """Instances asked that no node had free, by profile, every queue's together."""
        totals: dict[str, int] = {}
        for (_queue, profile), count in self.asks.items():
            totals[profile] = totals.get(profile, 0) + count
        return totals

    @property
    def waiting_since(self) -> dict[str, int]:
        """The pass at which each waiting profile was last asked."""
        since: dict[str, int] = {}
        for (_queue, profile), at in self.asks_since.items():
            since[profile] = max(since.get(profile, at), at)
        return since

    def nodes(self) -> list[MigNode]:
        """Every node with MIG as placement and repartition see it, counting what was handed out."""
        for key in [k for k in self.assumed if k in self.inventory.pods]:
            del self.assumed[key]  # the watch has shown it: its pod record counts it now
        found = []
        for name, mig in self.inventory.mig_nodes().items():
            node = self.inventory.nodes.get(name)
            model = model_of(node.gpu_product if node else None)
            if node is None or model is None:
                continue
            used: dict[str, int] = {}
            holders = 0
            for pod in self.inventory.pods_on_node(name):
                if not pod.holds_gpus:
                    continue
                holders += int(pod.gpus + pod.claims + len(pod.mig_profiles) > 0 or pod.share is not None)
                for profile in pod.mig_profiles:
                    used[profile] = used.get(profile, 0) + 1
            for on, profile in self.assumed.values():
                if on == name:
                    used[profile] = used.get(profile, 0) + 1
                    holders += 1
            found.append(
                MigNode(
                    name=name,
                    model=model,
                    gpus=mig.gpus,
                    config=mig.config,
                    applied=mig.state == STATE_SUCCESS or mig.config is None,
                    allocatable=dict(mig.allocatable),
                    used=used,
                    gpu_holders=holders,
                    schedulable=node.schedulable and not node.interrupted,
                    capacity_type=str(node.capacity_type),
                    product=node.gpu_product or "",
                )
            )
        return found

    def place(self, profile: str, pods: Sequence[dict[str, Any]], gpu_type: str | None = None) -> list[dict[str, Any]]:
        """PODS, each pinned to a node (of GPU_TYPE, if named) with a free PROFILE instance and asking for it;
        MigInstanceUnavailableError (and PROFILE noted as waiting) when not all fit now."""
        if not pods:
            return []
        first = _node_of(pods[0])
        kind = self.inventory.nodes[first].capacity_type if first in self.inventory.nodes else None
        nodes = [
            n
            for n in self.nodes()
            if (kind is None or n.capacity_type == str(kind)) and (gpu_type is None or n.product == gpu_type)
        ]
        chosen = self._keep_planned(nodes, profile, pods)
        if chosen is None:
            free = sum(n.free(profile) for n in nodes)
            self.asks[(UNKNOWN_QUEUE, profile)] = len(pods) - free
            self.asks_since[(UNKNOWN_QUEUE, profile)] = self.passes
            raise MigInstanceUnavailableError(f"{len(pods)} x {profile} asked, {free} free on nodes with MIG")
        self.asks.pop((UNKNOWN_QUEUE, profile), None)
        self.asks_since.pop((UNKNOWN_QUEUE, profile), None)
        placed = []
        for built, node in zip(pods, chosen, strict=True):
            pod = copy.deepcopy(built)
            pod["spec"]["nodeSelector"][HOSTNAME] = node
            placed.append(with_mig_slice(pod, profile))
            self.assumed[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = (node, profile)
        return placed

    def _keep_planned(self, nodes: Sequence[MigNode], profile: str, pods: Sequence[dict[str, Any]]) -> list[str] | None:
        """Each pod's node as placement planned it (where its status says it runs) while that node has a free
        instance; the others packed onto nodes that have one. None when they do not all fit."""
        free = {n.name: n.free(profile) for n in nodes}
        chosen: list[str | None] = []
        for pod in pods:
            planned = _node_of(pod)
            if free.get(planned, 0) > 0:
                free[planned] -= 1
                chosen.append(planned)
            else:
                chosen.append(None)
        moved = [i for i, node in enumerate(chosen) if node is None]
        if moved:
            left = [
                replace(n, used={**n.used, profile: n.used.get(profile, 0) + n.free(profile) - free[n.name]})
                for n in nodes
            ]
            others = place_instances(left, profile, len(moved), prefer=_node_of(pods[moved[0]]))
            if others is None:
                return None
            for index, node in zip(moved, others, strict=True):
                chosen[index] = node
        return [str(node) for node in chosen]

    def asked(self, demand: Mapping[str, int], queue: str = UNKNOWN_QUEUE) -> None:
        """DEMAND (instances by profile) of QUEUE waits for placement: kept as waiting, for a repartition
        bounded by it, for this pass."""
        for profile, count in demand.items():
            if count <= 0:
                continue
            # Asked again this pass (a cycle, or the other controller): the larger ask stands.
            key = (queue, profile)
            again = self.asks.get(key, 0) if self.asks_since.get(key) == self.passes else 0
            self.asks[key] = max(count, again)
            self.asks_since[key] = self.passes

    def cycle_asked(self, waiting: Iterable[tuple[QueuedSpec, str]], queues: Iterable[QueueQuota]) -> None:
        """What a scheduling cycle left WAITING (each spec with its reason) asks of MIG (`waiting_mig`);
        QUEUES bound what each queue may have sliced."""
        demand = waiting_mig(waiting)
        for queue, asked in demand.instances.items():
            self.asked(asked, queue)
        self.ceilings = quota_ceilings(queues)
        self.whole_gpus_waiting, self.whole_since = demand.whole_gpus, self.passes

    def forget(self, pods: Sequence[dict[str, Any]]) -> None:
        for pod in pods:
            self.assumed.pop((pod["metadata"]["namespace"], pod["metadata"]["name"]), None)

    async def step(self, kube: NodePatcher) -> None:
        """One pass: uncordon what is applied, then start the repartition the waiting instances need."""
        self.passes += 1
        for key in [k for k, since in self.asks_since.items() if self.passes - since > self.stale_after_passes]:
            del self.asks[key], self.asks_since[key]  # nobody asks any more (the job went, or fits)
        if self.passes - self.whole_since > self.stale_after_passes:
            self.whole_gpus_waiting = 0
        mig = self.inventory.mig_nodes()
        if self.in_flight is not None:
            state = mig.get(self.in_flight.node)
            if state is None or state.config not in (self.in_flight.config, self.in_flight_from):
                self.in_flight = None  # the node went, or someone else relabelled it: not ours to finish
            elif state.config == self.in_flight_from:
                return  # the watch has not shown our label yet
            elif state.state in (STATE_SUCCESS, STATE_FAILED):
                await self._uncordon(kube, self.in_flight.node)
                log.info("MIG config %s on %s: %s; uncordoned", self.in_flight.config, self.in_flight.node, state.state)
                self.in_flight = None
            else:
                return
        if self.cordoned is None and self.in_flight is None and (left := self._left_cordoned(mig)) is not None:
            await self._finish_left(kube, left)
            return
        if self.cordoned is not None:
            await self._relabel(kube, self.cordoned)
            self.cordoned = None
            return
        nodes = self.nodes()
        self._note_idle(nodes)
        asks = [MigAsk(queue, profile, count) for (queue, profile), count in sorted(self.asks.items())]
        bounded = plan_bounded_repartition(nodes, asks, self.partitioned_for, self.ceilings)
        if bounded is not None:
            await self._cordon(kube, bounded.repartition, bounded.queue)
            for key in [k for k in self.asks if k[0] == bounded.queue]:
                del self.asks[key], self.asks_since[key]
            return
        back = plan_back_to_whole(
            nodes,
            asks,
            self.idle_since,
            self.clock(),
            self.hold_down_seconds or 0.0,
            whole_gpus_waiting=self.whole_gpus_waiting,
        )
        if back is not None:
            await self._cordon(kube, back, None)

    def _note_idle(self, nodes: Sequence[MigNode]) -> None:
        """When each sliced node was first seen with all its instances free; forgotten once one is held."""
        now = self.clock()
        free = {n.name for n in nodes if n.config not in (None, DISABLED) and n.applied and n.idle}
        self.idle_since = {name: self.idle_since.get(name, now) for name in free}
        whole_or_gone = {n.name for n in nodes if n.config in (None, DISABLED)} | (
            set(self.partitioned_for) - {n.name for n in nodes}
        )
        for name in whole_or_gone:
            self.partitioned_for.pop(name, None)

    async def _cordon(self, kube: NodePatcher, plan: Repartition, queue: str | None) -> None:
        """Cordon PLAN's node, to relabel it on the next pass: for QUEUE's instances, or back to whole GPUs."""
        cordon = {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_ANNOTATION: plan.config}}}
        await kube.patch_node(plan.node, cordon)
        why = f"for queue {queue or 'unnamed'}'s waiting instances" if queue is not None else "back to whole GPUs"
        log.info("cordoned %s to repartition it to %s %s", plan.node, plan.config, why)
        self.cordoned, self.cordoned_for = plan, queue

    def _left_cordoned(self, mig: dict[str, NodeMig]) -> Repartition | None:
        """A node an earlier operator process cordoned and did not uncordon (it stopped half way), if any."""
        self.uncordoned &= {n for n, state in mig.items() if state.cordoned_for is not None}
        name = next((n for n in sorted(mig) if mig[n].cordoned_for is not None and n not in self.uncordoned), None)
        return Repartition(name, mig[name].cordoned_for or "") if name is not None else None

    async def _finish_left(self, kube: NodePatcher, left: Repartition) -> None:
        """Take up LEFT: wait for its config while the MIG manager applies it, else uncordon it."""
        state = self.inventory.mig_nodes()[left.node]
        if state.config == left.config and state.state not in (STATE_SUCCESS, STATE_FAILED):
            self.in_flight, self.in_flight_from = left, None
            return
        await self._uncordon(kube, left.node)
        log.info("uncordoned %s, left cordoned for MIG config %s", left.node, left.config)

    async def _relabel(self, kube: NodePatcher, plan: Repartition) -> None:
        """Set PLAN's config on its node, cordoned one pass ago, if still no pod holds one of its GPUs.

        A pass later, the watch has shown any pod kube-scheduler bound before the cordon; our own
        are counted as soon as they are handed an instance. If one is there, no repartition."""
        again = next((n for n in self.nodes() if n.name == plan.node), None)
        if again is None or not again.idle:
            await self._uncordon(kube, plan.node)
            log.info("%s is in use again: not repartitioned", plan.node)
            return
        # State pending in the same write: a `success` left from the last config is never read as this one's.
        await kube.patch_node(plan.node, {"metadata": {"labels": {CONFIG_LABEL: plan.config, STATE_LABEL: "pending"}}})
        log.info("set %s on %s", plan.config, plan.node)
        self.in_flight, self.in_flight_from = plan, again.config
        self.idle_since.pop(plan.node, None)
        if self.cordoned_for is not None:
            self.partitioned_for[plan.node] = self.cordoned_for
        else:
            self.partitioned_for.pop(plan.node, None)

    async def _uncordon(self, kube: NodePatcher, node: str) -> None:
        patch = {"spec": {"unschedulable": False}, "metadata": {"annotations": {CORDONED_ANNOTATION: None}}}
        await kube.patch_node(node, patch)
        self.uncordoned.add(node)

    async def run(self, kube: NodePatcher, interval_seconds: float = 2.0) -> None:
        while True:
            try:
                await self.step(kube)
            except Exception:
                log.exception("MIG repartition pass failed; trying again")
            await asyncio.sleep(interval_seconds)


def _node_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["nodeSelector"][HOSTNAME])
