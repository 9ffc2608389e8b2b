"""A fleet of nodes that are launched, become Ready after a delay, are interrupted or consolidated away.

Accounting follows EC2's: an instance is paid for from launch (its boot included) until it is
terminated, per second, at its offering's price. A node launched for a request that is withdrawn
before it is Ready is terminated then, and its boot time is paid for all the same.

Spot capacity follows the availability traces (aisched.sim.spot.traces), one per zone: while a
zone's trace says no spot could be had, no spot node launches there, and when it goes from
available to unavailable every spot node in that zone, Ready or booting, is taken away: a 0/1
trace of one instance cannot say which of several would have been reclaimed, so all are. The
two-minute notice is not modelled: the gang's checkpoint is taken as saved (both arms alike).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aisched.api.common import CapacityType
from aisched.policy.nodes import Node, local_node
from aisched.sim.fleet.catalog import Offering
from aisched.sim.spot.traces import SpotTrace

HOUR = 3600.0


@dataclass(slots=True)
class FleetNode:
    name: str
    offering: Offering
    launched: float
    ready_at: float
    gone_at: float | None = None
    used: int = 0
    empty_since: float | None = None
    """When it last became empty while Ready; None while something runs on it or it boots."""

    @property
    def gpus(self) -> int:
        return self.offering.instance_type.gpus

    @property
    def zone(self) -> str:
        return self.offering.zone

    @property
    def spot(self) -> bool:
        return self.offering.capacity_type == CapacityType.SPOT

    def ready(self, now: float) -> bool:
        return self.gone_at is None and self.ready_at <= now

    def paid_seconds(self, end: float) -> float:
        return max(0.0, min(self.gone_at if self.gone_at is not None else end, end) - self.launched)

    def as_policy_node(self) -> Node:
        kind = self.offering.instance_type
        return local_node(
            name=self.name,
            allocatable_gpus=kind.gpus,
            used_gpus=self.used,
            gpu_product=kind.gpu_product,
            capacity_type=self.offering.capacity_type,
            zone=self.zone,
        )


class SpotMarket:
    """Whether each zone has spot capacity at a simulated time, and when it next loses it."""

    def __init__(self, traces: Mapping[str, SpotTrace], start_index: int = 0) -> None:
        self.traces, self.start_index = dict(traces), start_index
        self.losses: dict[str, list[float]] = {}
        for zone, trace in self.traces.items():
            up = trace.available[start_index:]
            self.losses[zone] = [i * trace.gap_s for i in range(1, len(up)) if up[i - 1] and not up[i]]

    def available(self, zone: str, now: float) -> bool:
        trace = self.traces.get(zone)
        return trace is not None and trace.at(self.start_index + int(now // trace.gap_s))

    def next_loss(self, zone: str, now: float) -> float:
        """The first time after `now` the zone loses its spot capacity (inf: never, in the trace)."""
        times = self.losses.get(zone, [])
        index = bisect.bisect_right(times, now)
        return times[index] if index < len(times) else math.inf

    def next_sample(self, now: float) -> float:
        """The next time any zone's availability may change: its next sample."""
        gaps = [t.gap_s for t in self.traces.values()]
        return min((math.floor(now / gap) + 1) * gap for gap in gaps) if gaps else math.inf

    def uptime(self, zone: str, now: float) -> float:
        """Seconds the zone has had spot without a break up to `now` (0: none now)."""
        trace = self.traces.get(zone)
        if trace is None:
            return 0.0
        index = self.start_index + int(now // trace.gap_s)
        first = index
        while first >= self.start_index and trace.at(first):
            first -= 1
        return (index - first) * trace.gap_s

    def interruption_rate(self, zone: str, now: float) -> float:
        """Losses per available hour so far: what an operator watching the pool would estimate."""
        trace = self.traces.get(zone)
        if trace is None:
            return math.inf
        history = trace.history_before(self.start_index + int(now // trace.gap_s))
        return history.interruptions / max(history.exposure_s, trace.gap_s) * HOUR


class Fleet:
    def __init__(self, provisioning_delay_s: float, consolidate_after_s: float, market: SpotMarket) -> None:
        if provisioning_delay_s < 0 or consolidate_after_s < 0:
            raise ValueError("delays must not be negative")
        self.delay, self.consolidate_after, self.market = provisioning_delay_s, consolidate_after_s, market
        self.nodes: dict[str, FleetNode] = {}
        """Every node ever launched, gone ones included (for the bill)."""
        self.alive: dict[str, FleetNode] = {}
        self.launches = self.withdrawals = self.interruptions = self.consolidations = 0

    def launch(self, offering: Offering, now: float, *, ready_now: bool = False) -> FleetNode:
        name = f"{offering.zone}-{offering.capacity_type.value.lower()}-{len(self.nodes):05d}"
        node = FleetNode(name, offering, now, now if ready_now else now + self.delay)
        if ready_now:
            node.empty_since = now
        self.nodes[name] = self.alive[name] = node
        self.launches += 1
        return node

    def ready(self, now: float) -> list[FleetNode]:
        return [n for n in self.alive.values() if n.ready_at <= now]

    def booting(self, now: float) -> list[FleetNode]:
        return [n for n in self.alive.values() if n.ready_at > now]

    def gpus(self) -> int:
        """GPUs of every node launched and not gone: what a NodePool limit or a quota counts."""
        return sum(n.gpus for n in self.alive.values())

    def became_ready(self, now: float) -> None:
        for node in self.alive.values():
            if node.ready_at <= now and node.used == 0 and node.empty_since is None:
                node.empty_since = max(node.ready_at, 0.0)

    def allocate(self, name: str, gpus: int) -> None:
        node = self.alive[name]
        if node.used + gpus > node.gpus:
            raise ValueError(f"{name}: {gpus} more GPUs do not fit ({node.used} of {node.gpus} used)")
        node.used += gpus
        node.empty_since = None

    def release(self, name: str, gpus: int, now: float) -> None:
        node = self.alive.get(name)
        if node is None:  # gone already (interrupted): nothing to give back
            return
        node.used -= gpus
        if node.used == 0 and node.ready_at <= now:
            node.empty_since = now

    def _remove(self, name: str, now: float) -> FleetNode:
        node = self.alive.pop(name)
        node.gone_at = now
        return node

    def withdraw(self, name: str, now: float) -> None:
        """A booting node no longer needed: terminated before it is Ready."""
        if self.alive[name].ready_at <= now:
            raise ValueError(f"{name} is Ready: consolidation, not withdrawal, takes it away")
        self._remove(name, now)
        self.withdrawals += 1

    def consolidate(self, now: float, keep: Iterable[str] = ()) -> list[str]:
        """Terminate Ready nodes that have been empty for the consolidation delay; only empty ones."""
        kept = set(keep)
        gone = [
            n.name
            for n in self.alive.values()
            if n.used == 0
            and n.empty_since is not None
            and now - n.empty_since >= self.consolidate_after
            and n.name not in kept
        ]
        for name in gone:
            self._remove(name, now)
        self.consolidations += len(gone)
        return gone

    def interrupt(self, now: float) -> list[str]:
        """Spot nodes in zones that have no spot capacity at `now`: taken away."""
        gone = [n.name for n in self.alive.values() if n.spot and not self.market.available(n.zone, now)]
        for name in gone:
            self._remove(name, now)
        self.interruptions += len(gone)
        return gone

    def next_event(self, now: float) -> float:
        """The next time the fleet changes by itself: a node Ready, an empty node due, a spot loss."""
        times = [math.inf]
        for node in self.alive.values():
            if node.ready_at > now:
                times.append(node.ready_at)
            elif node.empty_since is not None:
                times.append(max(now, node.empty_since + self.consolidate_after))
        for zone in {n.zone for n in self.alive.values() if n.spot}:
            times.append(self.market.next_loss(zone, now))
        later = [t for t in times if t > now]
        return min(later) if later else math.inf

    def close(self, end: float) -> None:
        """The run is over: whatever is left is terminated at `end`."""
        for name in list(self.alive):
            self._remove(name, end)

    def bill(self, end: float) -> dict[str, float]:
        """Node-hours and money, in all and by capacity type."""
        out = {"node_hours": 0.0, "gpu_hours": 0.0, "cost": 0.0, "spot_node_hours": 0.0, "on_demand_node_hours": 0.0}
        for node in self.nodes.values():
            hours = node.paid_seconds(end) / HOUR
            out["node_hours"] += hours
            out["gpu_hours"] += hours * node.gpus
            out["cost"] += hours * node.offering.per_hour
            out["spot_node_hours" if node.spot else "on_demand_node_hours"] += hours
        return out
