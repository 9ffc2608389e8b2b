"""GPUs promised by a decision whose writes have not landed yet: the one record both controllers share.

The scheduling cycle decides every GPU handed out, TrainingJob gangs and InferenceService
replicas alike (`policy.decision`), against a snapshot of the cluster, and its decisions are
carried out by API writes: a gang's placement is in its status once that write lands, a
replica's GPUs once its pod is made (by the serving controller, at its next pass) and the watch
shows it. In between, the GPUs are promised but visible nowhere else, as a pod kube-scheduler has
chosen a node for is "assumed" until its bind lands. Each decision is promised here at once,
before its first write; snapshots count every promise; a promise is settled when its own record
(the status, the replica pods) holds the GPUs: so no GPU is promised twice.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.policy.shared_room import SharedRoom, SharePart


@dataclass(frozen=True)
class Promised:
    """What one decision takes until its own record holds it: whole GPUs by node, parts of GPUs
    (a fraction's, on the GPU placement chose), and MIG instances (node, profile), one per instance."""

    whole: Mapping[str, int]
    parts: tuple[SharePart, ...] = ()
    mig: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, placement: Placement) -> Promised:
        """What PLACEMENT takes, as `policy.placement.hold` counts it."""
        mig = tuple((node, placement.mig_profile) for node in placement.nodes) if placement.mig_profile else ()
        return cls(placement.gpus_by_node(), tuple(p for p in placement.parts if p.device), mig)

    def __bool__(self) -> bool:
        return any(gpus > 0 for gpus in self.whole.values()) or bool(self.parts or self.mig)


class InFlightPlacements:
    def __init__(self) -> None:
        self._promised: dict[Hashable, Promised] = {}
        self._by_node: dict[str, int] = {}
        self.version = 0
        """Changes with every promise and settlement: a snapshot older than it may count GPUs twice."""

    def promise(self, owner: Hashable, promised: Promised) -> None:
        """OWNER's decision takes PROMISED until it settles (a second promise replaces the first)."""
        self.settle(owner)
        if not promised:
            return
        self._promised[owner] = promised
        for node, gpus in promised.whole.items():
            if gpus > 0:
                self._by_node[node] = self._by_node.get(node, 0) + gpus
        self.version += 1

    def settle(self, owner: Hashable) -> None:
        """OWNER's record holds its GPUs now (or the decision was dropped): the promise goes."""
        promised = self._promised.pop(owner, None)
        if promised is None:
            return
        for node, gpus in promised.whole.items():
            if gpus <= 0:
                continue
            left = self._by_node[node] - gpus
            if left:
                self._by_node[node] = left
            else:
                del self._by_node[node]
        self.version += 1

    def by_node(self) -> dict[str, int]:
        """The whole GPUs promised, by node."""
        return dict(self._by_node)

    def hold_shared(self, room: SharedRoom) -> None:
        """Count the parts of GPUs and MIG instances promised as taken in ROOM (a snapshot's)."""
        for promised in self._promised.values():
            for part in promised.parts:
                room.take_part(part)
            for node, profile in promised.mig:
                if node in room.mig_free:
                    room.take_mig(node, profile)

    def __len__(self) -> int:
        return len(self._promised)


class CurrentSnapshot:
    """A snapshot taken again once a promise was made or settled since (by either controller)."""

    def __init__(self, take: Callable[[], ClusterSnapshot], in_flight: InFlightPlacements) -> None:
        self._take, self._in_flight = take, in_flight
        self._snapshot: ClusterSnapshot | None = None
        self._version = -1

    def now(self) -> ClusterSnapshot:
        if self._snapshot is None or self._version != self._in_flight.version:
            self._snapshot, self._version = self._take(), self._in_flight.version
        return self._snapshot


def fits(snapshot: ClusterSnapshot, gpus_by_node: Mapping[str, int]) -> bool:
    """Whether SNAPSHOT has GPUS_BY_NODE free: a node gone or too full means the decision is stale."""
    return all(node in snapshot and snapshot.free_gpus(node) >= gpus for node, gpus in gpus_by_node.items())


def placement_fits(snapshot: ClusterSnapshot, placement: Placement) -> bool:
    """Whether SNAPSHOT still has what PLACEMENT takes: its whole GPUs, the parts of GPUs shares already
    hold that it planned to share, and its MIG instances."""
    if not fits(snapshot, placement.gpus_by_node()):
        return False
    taken: dict[tuple[str, str], tuple[int, int]] = {}
    split = {(part.node, part.device) for part in placement.parts if part.splits}
    for part in placement.parts:
        free = snapshot.shared.parts.get(part.node, {}).get(part.device)
        if (part.node, part.device) in split:  # a GPU it splits (free as whole GPUs go): all of it
            free = (1000, snapshot.shared.memory_of(part.node))
        milli, memory = taken.get((part.node, part.device), (0, 0))
        taken[(part.node, part.device)] = (milli + part.milli, memory + part.memory_mib)
        if free is None or free[0] < milli + part.milli or free[1] < memory + part.memory_mib:
            return False
    if placement.mig_profile is not None:
        for node, count in gpus_by_node(placement.nodes, 1).items():
            if snapshot.shared.mig_free.get(node, {}).get(placement.mig_profile, 0) < count:
                return False
    return True


def gpus_by_node(nodes: list[str] | tuple[str, ...], gpus_each: int) -> dict[str, int]:
    """The GPUs workers or replicas of GPUS_EACH take on NODES (a node named twice counts twice)."""
    total: dict[str, int] = {}
    for node in nodes:
        total[node] = total.get(node, 0) + gpus_each
    return total
