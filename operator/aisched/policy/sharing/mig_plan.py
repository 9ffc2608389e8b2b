"""Which node to repartition for MIG, bounded per tenant, and which to set back to whole GPUs. Pure.

A MIG config applies to every GPU of a node, and a node sliced for one tenant's instances is no
node for another tenant's whole-GPU gang. So a repartition is bounded by what the tenant is
charged for: a queue's waiting MIG instances may have sliced for them at most the GPUs they fill,
packed (`gpus_needed`: seven 1g instances to a GPU, two 3g ...), and never more GPUs than its
quota allows (`quota_ceiling`), counting the GPUs already sliced for it. A node whose GPUs
outnumber that bound is not sliced for it: six 1g instances (6/7 of a GPU) never slice an 8-GPU
node, whatever a tenant asks.

The way back: a sliced node all of whose instances are free goes back to whole GPUs (the MIG
manager's `all-disabled`) once no waiting MIG instance could use it, after a hold-down (a setting:
a tenant's next MIG job finds its instances, and no tenant keeps the cluster sliced), and at once
while a whole-GPU gang waits for GPUs.

Time is passed in (seconds on any clock); nothing here reads one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from aisched.api.sharing import mig_kind
from aisched.policy.queueing import QueueQuota
from aisched.policy.sharing.mig import MIG_MODELS
from aisched.policy.sharing.mig_configs import DISABLED, MigNode, Repartition, instances, plan_repartition

UNKNOWN_QUEUE = ""
"""The queue of an ask that names none (a pod that found its instance taken): bounded by its need only."""


@dataclass(frozen=True)
class MigAsk:
    """MIG instances of one profile a queue's jobs or replicas wait for: none is free for them now."""

    queue: str
    profile: str
    instances: int


@dataclass(frozen=True)
class QueueRepartition:
    """A repartition and the queue whose waiting instances it is for (its GPUs are counted against it)."""

    node: str
    config: str
    queue: str

    @property
    def repartition(self) -> Repartition:
        return Repartition(self.node, self.config)


def gpus_needed(model: str, asked: Mapping[str, int]) -> int:
    """Whole GPUs of MODEL that ASKED (instances by profile) fill, packed as the stock configs pack each
    profile: the ceiling of each profile's count over the instances one GPU holds."""
    needed = 0
    for profile, count in asked.items():
        if count <= 0 or mig_kind(profile) not in MIG_MODELS.get(model, {}):
            continue
        per_gpu = instances(model, f"all-{MIG_MODELS[model][mig_kind(profile)].name}", 1).get(profile, 0)
        needed += -(-count // per_gpu) if per_gpu else 0
    return needed


def quota_ceiling(queue: QueueQuota, cohort_nominal: int) -> int | None:
    """The most GPUs QUEUE may hold, borrowing included; None: no limit. COHORT_NOMINAL is its cohort's."""
    if queue.nominal_gpus is None:
        return None
    if not queue.borrowing_enabled or queue.cohort is None:
        return queue.nominal_gpus
    if queue.borrowing_limit is not None:
        return queue.nominal_gpus + queue.borrowing_limit
    return max(queue.nominal_gpus, cohort_nominal)


def quota_ceilings(queues: Iterable[QueueQuota]) -> dict[str, int | None]:
    """`quota_ceiling` of each of QUEUES, by name."""
    listed = list(queues)
    cohorts: dict[str, int] = {}
    for queue in listed:
        if queue.cohort is not None:
            cohorts[queue.cohort] = cohorts.get(queue.cohort, 0) + (queue.nominal_gpus or 0)
    return {q.name: quota_ceiling(q, cohorts.get(q.cohort or "", 0)) for q in listed}


def sliced_for(queue: str, nodes: Sequence[MigNode], partitioned_for: Mapping[str, str]) -> int:
    """GPUs of NODES sliced (a MIG config other than whole) for QUEUE's instances."""
    return sum(
        node.gpus for node in nodes if partitioned_for.get(node.name) == queue and node.config not in (None, DISABLED)
    )


def plan_bounded_repartition(
    nodes: Sequence[MigNode],
    asks: Sequence[MigAsk],
    partitioned_for: Mapping[str, str],
    ceilings: Mapping[str, int | None],
) -> QueueRepartition | None:
    """The repartition for the queue with the most instances waiting whose bound a node fits, or None.

    Each queue's bound on the GPUs sliced for it (PARTITIONED_FOR: node to queue): what its waiting
    instances and the instances held on its sliced nodes fill, packed, and no more than its quota's
    ceiling (CEILINGS; a queue not named has none). Only idle nodes that fit within the bound with
    what is sliced for it already are candidates, and among them `plan_repartition` chooses."""
    by_queue: dict[str, dict[str, int]] = {}
    for ask in asks:
        if ask.instances > 0:
            mine = by_queue.setdefault(ask.queue, {})
            mine[ask.profile] = mine.get(ask.profile, 0) + ask.instances
    for queue, asked in sorted(by_queue.items(), key=lambda item: (-sum(item[1].values()), item[0])):
        ceiling = ceilings.get(queue)
        sliced = sliced_for(queue, nodes, partitioned_for)
        held = sum(
            min(node.gpus, gpus_needed(node.model, node.used))
            for node in nodes
            if partitioned_for.get(node.name) == queue and node.config not in (None, DISABLED)
        )
        for profile, missing in sorted(asked.items(), key=lambda item: (-item[1], item[0])):
            fitting = [
                node
                for node in nodes
                if sliced + node.gpus <= gpus_needed(node.model, asked) + held
                and (ceiling is None or sliced + node.gpus <= ceiling)
            ]
            plan = plan_repartition(fitting, profile, missing, asked)
            if plan is not None:
                return QueueRepartition(plan.node, plan.config, queue)
    return None


def free_sliced_nodes(nodes: Sequence[MigNode]) -> list[MigNode]:
    """Nodes sliced for MIG whose instances are all free (no pod holds any GPU there), config applied."""
    return [
        node
        for node in nodes
        if node.config not in (None, DISABLED) and node.applied and node.idle and node.schedulable
    ]


def plan_back_to_whole(
    nodes: Sequence[MigNode],
    asks: Sequence[MigAsk],
    idle_since: Mapping[str, float],
    now: float,
    hold_down_seconds: float,
    *,
    whole_gpus_waiting: int = 0,
) -> Repartition | None:
    """A free sliced node to set back to whole GPUs, or None.

    A node a waiting instance could use now (it has one of that profile free) stays sliced. The
    others go back once free for HOLD_DOWN_SECONDS (IDLE_SINCE: when each was first seen free), or
    at once while WHOLE_GPUS_WAITING > 0 (a whole-GPU gang waits for GPUs slices hold)."""
    wanted = {ask.profile for ask in asks if ask.instances > 0}
    for node in sorted(free_sliced_nodes(nodes), key=lambda n: (-n.gpus, n.name)):
        if any(node.free(profile) > 0 for profile in wanted):
            continue
        since = idle_since.get(node.name)
        if whole_gpus_waiting > 0 or (since is not None and now - since >= hold_down_seconds):
            return Repartition(node.name, DISABLED)
    return None
