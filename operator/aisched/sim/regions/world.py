"""The regions a simulated manager dispatches to: each a grid, a spot zone, a GPU capacity and its prices."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from aisched.policy.carbon import Forecast
from aisched.sim.carbon.grid import Grid, View
from aisched.sim.spot.traces import SpotTrace

GRAM_SECONDS_PER_KWH_W = 3.6e6
"""(g/kWh * s) * W / this = grams."""


@dataclass(frozen=True)
class Region:
    """One worker cluster's region. `view` is what a planner knows of its grid (the current step exactly,
    the rest as a forecast with error); `grid` is what the jobs really emit. The spot trace starts at
    `spot_origin` (seconds on the grid's clock); beyond its end there is no spot, never in a policy's favour."""

    name: str
    grid: Grid
    view: View
    spot: SpotTrace
    spot_origin: float
    gpus: int
    on_demand_price: float
    spot_price: float
    _downs: tuple[int, ...] = field(repr=False, default=())

    @classmethod
    def build(
        cls,
        name: str,
        grid: Grid,
        view: View,
        spot: SpotTrace,
        *,
        spot_origin: float,
        gpus: int,
        on_demand_price: float,
        spot_price: float,
    ) -> Region:
        if gpus < 1:
            raise ValueError(f"region {name}: needs at least one GPU")
        if not 0 <= spot_price <= on_demand_price:
            raise ValueError(f"region {name}: a spot price between 0 and the on-demand price")
        downs = tuple(i for i, up in enumerate(spot.available) if not up)
        return cls(name, grid, view, spot, spot_origin, gpus, on_demand_price, spot_price, downs)

    def _sample(self, t: float) -> int:
        return int((t - self.spot_origin) // self.spot.gap_s)

    def spot_at(self, t: float) -> bool:
        sample = self._sample(t)
        return sample >= 0 and self.spot.at(sample)

    def spot_lost_after(self, t: float) -> float:
        """When spot taken at T is lost: the start of the next sample without it (the trace's end at the latest)."""
        sample = self._sample(t)
        next_down = self._downs[bisect.bisect_right(self._downs, sample)] if sample < self._last_down else None
        index = len(self.spot.available) if next_down is None else next_down
        return self.spot_origin + index * self.spot.gap_s

    @property
    def _last_down(self) -> int:
        return self._downs[-1] if self._downs else -1

    def price_at(self, t: float) -> float:
        """What a GPU-hour costs for a job starting at T: spot when the zone has it."""
        return self.spot_price if self.spot_at(t) else self.on_demand_price

    def intensity_at(self, t: float) -> float:
        """The grid's actual intensity now (every arm knows the current step exactly)."""
        return self.grid.actual[min(len(self.grid.actual) - 1, int(t // self.grid.step))]

    def forecast(self, t: float, until: float) -> Forecast:
        return self.view.forecast(t, until)

    def grams(self, start: float, end: float, watts: float) -> float:
        return self.grid.cost([(start, end)]) * watts / GRAM_SECONDS_PER_KWH_W


def check_regions(regions: Sequence[Region]) -> None:
    """ValueError unless the regions have distinct names and grids on one clock."""
    names = [r.name for r in regions]
    if len(set(names)) != len(names):
        raise ValueError(f"region names must differ: {', '.join(names)}")
    starts = {r.grid.start for r in regions}
    steps = {r.grid.step for r in regions}
    if len(starts) > 1 or len(steps) > 1:
        raise ValueError("every region's carbon data must start at the same time and have the same step")
