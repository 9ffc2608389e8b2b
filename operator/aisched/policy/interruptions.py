"""How often the nodes of a capacity pool are interrupted, learned from what the operator sees.

A pool is the set of nodes that share their fate: one GPU type, in one zone,
bought one way (spot or on-demand). Interruptions are modelled as a Poisson
process per pool whose rate has a Gamma prior; the estimate is the posterior
mean (prior_events + interruptions) / (prior_exposure + node-seconds observed).
A pool never seen gets the prior rate, and a pool's own history takes over as
its exposure outgrows the prior's weight. Optionally, older observations fade
with a half-life, for spot markets whose mood changes over weeks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from aisched.api.common import CapacityType


@dataclass(frozen=True, order=True)
class CapacityPool:
    gpu_type: str
    zone: str
    capacity_type: CapacityType

    @property
    def key(self) -> str:
        """A stable, bounded label value for status and metrics, e.g. "NVIDIA-H100/us-east-2a/Spot"."""
        return f"{self.gpu_type}/{self.zone}/{self.capacity_type}"


@dataclass(frozen=True)
class InterruptionPrior:
    """What to believe about a pool before it has any history."""

    rate_per_s: float
    weight_s: float
    """Node-seconds of exposure the prior is worth: the history it takes to outweigh it."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_per_s) and self.rate_per_s >= 0):
            raise ValueError(f"prior rate must be a finite non-negative number, got {self.rate_per_s}")
        if not (math.isfinite(self.weight_s) and self.weight_s > 0):
            raise ValueError(f"prior weight must be positive, got {self.weight_s}")

    @classmethod
    def per_hour(cls, interruptions_per_hour: float, weight_hours: float) -> InterruptionPrior:
        return cls(rate_per_s=interruptions_per_hour / 3600.0, weight_s=weight_hours * 3600.0)


@dataclass(frozen=True)
class PoolHistory:
    """Interruptions and node-seconds of exposure seen in one pool (faded, when a half-life is used)."""

    interruptions: float = 0.0
    exposure_s: float = 0.0
    as_of: datetime | None = None

    def observe(
        self,
        now: datetime,
        *,
        exposure_s: float = 0.0,
        interruptions: int = 0,
        half_life_s: float | None = None,
    ) -> PoolHistory:
        """This history plus `exposure_s` node-seconds and `interruptions` seen up to `now`."""
        if exposure_s < 0 or interruptions < 0:
            raise ValueError("exposure and interruptions cannot be negative")
        fade = 1.0
        if half_life_s is not None and self.as_of is not None:
            elapsed = max(0.0, (now - self.as_of).total_seconds())
            fade = 0.5 ** (elapsed / half_life_s)
        as_of = now if self.as_of is None else max(now, self.as_of)
        return PoolHistory(
            interruptions=self.interruptions * fade + interruptions,
            exposure_s=self.exposure_s * fade + exposure_s,
            as_of=as_of,
        )


def interruption_rate(history: PoolHistory | None, prior: InterruptionPrior) -> float:
    """Interruptions per node-second expected in a pool: the Gamma-Poisson posterior mean."""
    if history is None:
        return prior.rate_per_s
    return (prior.rate_per_s * prior.weight_s + history.interruptions) / (prior.weight_s + history.exposure_s)
