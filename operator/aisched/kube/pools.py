"""Interruption history per capacity pool (GPU type x zone x capacity type), from the inventory.

Exposure is node-seconds of each pool seen between ticks; an interruption is a
node that newly carries an interruption taint or vanishes. The estimate feeds
the checkpoint interval (Young/Daly) of gangs placed in that pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from aisched.api import CapacityType
from aisched.policy.cluster import Node
from aisched.policy.interruptions import CapacityPool, InterruptionPrior, PoolHistory, interruption_rate

HALF_LIFE_SECONDS = 7 * 86400.0  # a week: spot markets change with the seasons of demand
# Ticks closer than this add nothing (exposure is node-seconds, counted in full at the next tick), and the
# loop's passes come many a second in a burst: each scanned every node.
MIN_TICK_SECONDS = 1.0


def pool_of(node: Node) -> CapacityPool:
    return CapacityPool(node.gpu_product or "unknown", node.zone or "unknown", node.capacity_type)


@dataclass
class PoolTracker:
    prior: InterruptionPrior
    histories: dict[CapacityPool, PoolHistory] = field(default_factory=dict)
    _seen: dict[str, CapacityPool] = field(default_factory=dict)  # node -> pool, as of the last tick
    _interrupted: set[str] = field(default_factory=set)
    _last_tick: datetime | None = None

    def tick(self, now: datetime, nodes: dict[str, Node]) -> None:
        elapsed = 0.0 if self._last_tick is None else max(0.0, (now - self._last_tick).total_seconds())
        if self._last_tick is not None and elapsed < MIN_TICK_SECONDS:
            return
        self._last_tick = now
        exposure: dict[CapacityPool, float] = {}
        interruptions: dict[CapacityPool, int] = {}
        for name, node in nodes.items():
            pool = pool_of(node)
            exposure[pool] = exposure.get(pool, 0.0) + elapsed
            if node.interrupted and name not in self._interrupted:
                interruptions[pool] = interruptions.get(pool, 0) + 1
                self._interrupted.add(name)
        for name, pool in self._seen.items():
            if name not in nodes and name not in self._interrupted and pool.capacity_type == CapacityType.SPOT:
                interruptions[pool] = interruptions.get(pool, 0) + 1  # a spot node gone without notice
        self._interrupted &= set(nodes)
        self._seen = {name: pool_of(node) for name, node in nodes.items()}
        for pool in exposure.keys() | interruptions.keys():
            history = self.histories.get(pool, PoolHistory())
            self.histories[pool] = history.observe(
                now,
                exposure_s=exposure.get(pool, 0.0),
                interruptions=interruptions.get(pool, 0),
                half_life_s=HALF_LIFE_SECONDS,
            )

    def spot_rate_per_second(self, gpu_type: str | None, zone: str) -> float:
        """Expected interruptions per second of one spot node of this GPU type in this zone (the
        prior where none has run there yet): what a new node there would face."""
        return interruption_rate(
            self.histories.get(CapacityPool(gpu_type or "unknown", zone, CapacityType.SPOT)), self.prior
        )

    def rate_per_second(self, node: Node) -> float:
        """Expected interruptions per second of one node of this node's pool."""
        if node.capacity_type != CapacityType.SPOT:
            return 0.0  # on-demand capacity is not reclaimed; failures are the backoff limit's business
        return interruption_rate(self.histories.get(pool_of(node)), self.prior)
