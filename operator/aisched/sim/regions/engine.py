"""The discrete-event run: jobs arrive at the manager, a policy says where and when each starts, regions run them.

Every policy sees the same market (free GPUs, spot and prices now, the grids' current intensity and
forecasts) and the same rules of the regions:

- a job starts in a region only when its whole gang fits in the GPUs free there;
- it runs on spot when the policy asks for spot and the region's zone has it at its start, and is
  preempted when the zone loses it; it keeps the work of its last checkpoint (every `checkpoint_s`
  of work) and waits again, its next run first spending `restore_s` restoring; on-demand runs are
  never preempted;
- a job that runs in a region its data is not in pays `data_move_cost` once for that region;
- waiting jobs are asked in arrival order whenever capacity frees or a deferral ends, and any that
  fits may start (Kueue's BestEffortFIFO), so a large gang does not hold back small ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from aisched.sim.regions.jobs import RegionalJob
from aisched.sim.regions.world import Region

EPS = 1e-6


class Start(NamedTuple):
    region: str
    spot: bool
    """On spot (only where the zone has it now) or on-demand."""


class Defer(NamedTuple):
    until: float


Decision = Start | Defer | None
"""Start now in a region where the gang fits, look again at `until`, or wait for capacity (None)."""


@dataclass(frozen=True)
class Costs:
    power_per_gpu_w: float
    checkpoint_s: float
    restore_s: float
    data_move_cost: float


@dataclass
class JobState:
    job: RegionalJob
    left: float
    restores: bool = False
    moved_to: set[str] = field(default_factory=set)
    finished: float | None = None
    cost: float = 0.0
    grams: float = 0.0
    preemptions: int = 0
    spot_gpu_s: float = 0.0
    gpu_s_by_region: dict[str, float] = field(default_factory=dict)

    def data_move_to(self, region: str, costs: Costs) -> float:
        return 0.0 if region == self.job.home or region in self.moved_to else costs.data_move_cost


class Market:
    """What a policy may know when it decides: the same for every policy."""

    def __init__(self, regions: Sequence[Region], costs: Costs) -> None:
        self.regions = list(regions)
        self.by_name = {r.name: r for r in regions}
        self.free = {r.name: r.gpus for r in regions}
        self.costs = costs

    def fitting(self, gpus: int, names: Sequence[str] | None = None) -> list[Region]:
        """The regions (of NAMES, else all, in their configured order) where GPUS fit now."""
        pool = self.regions if names is None else [self.by_name[n] for n in names]
        return [r for r in pool if self.free[r.name] >= gpus]


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def allowed(self, job: RegionalJob, market: Market) -> Sequence[str] | None:
        """The regions this policy may send the job to; None: any."""
        ...

    def decide(self, state: JobState, now: float, market: Market) -> Decision: ...


@dataclass
class _Running:
    region: str
    started: float
    on_spot: bool
    token: int


class Simulation:
    ARRIVE, WAKE, END, PREEMPT = range(4)

    def __init__(self, regions: Sequence[Region], jobs: Sequence[RegionalJob], policy: Policy, costs: Costs) -> None:
        self.market = Market(regions, costs)
        self.policy = policy
        self.costs = costs
        self.states = {j.index: JobState(j, j.duration) for j in jobs}
        self.waiting: dict[int, JobState] = {}
        self.running: dict[int, _Running] = {}
        self.events: list[tuple[float, int, int, int]] = []
        self.tokens = 0
        for job in jobs:
            self._push(job.arrival, self.ARRIVE, job.index)

    def _push(self, when: float, kind: int, index: int, token: int = 0) -> None:
        heapq.heappush(self.events, (when, kind, index, token))

    def run(self) -> list[JobState]:
        while self.events:
            now, kind, index, token = heapq.heappop(self.events)
            if kind in (self.END, self.PREEMPT):
                running = self.running.get(index)
                if running is None or running.token != token:
                    continue
                self._stop(index, now, preempted=kind == self.PREEMPT)
            else:
                self.waiting[index] = self.states[index]
            self._offer(now)
        unfinished = [s.job.index for s in self.states.values() if s.finished is None]
        if unfinished:
            raise RuntimeError(f"{len(unfinished)} jobs never finished (first: {unfinished[0]})")
        return list(self.states.values())

    def _offer(self, now: float) -> None:
        """Ask the policy about every waiting job that could fit somewhere it may go, in arrival order."""
        free = self.market.free
        most_free = max(free.values())
        for index in sorted(self.waiting):
            state = self.waiting[index]
            gpus = state.job.gpus
            if gpus > most_free:
                continue
            allowed = self.policy.allowed(state.job, self.market)
            if allowed is not None and all(free[name] < gpus for name in allowed):
                continue
            decision = self.policy.decide(state, now, self.market)
            if isinstance(decision, Start):
                self._start(state, decision, now)
                most_free = max(free.values())
            elif isinstance(decision, Defer):
                if decision.until <= now + EPS:
                    raise RuntimeError(f"{self.policy.name} deferred job {index} to now")
                del self.waiting[index]
                self._push(decision.until, self.WAKE, index)

    def _start(self, state: JobState, decision: Start, now: float) -> None:
        name = decision.region
        region = self.market.by_name[name]
        if self.market.free[name] < state.job.gpus:
            raise RuntimeError(f"{self.policy.name} started job {state.job.index} in {name}, where it does not fit")
        del self.waiting[state.job.index]
        self.market.free[name] -= state.job.gpus
        state.cost += state.data_move_to(name, self.costs)
        state.moved_to.add(name)
        if decision.spot and not region.spot_at(now):
            raise RuntimeError(f"{self.policy.name} asked for spot in {name}, which has none now")
        on_spot = decision.spot
        self.tokens += 1
        self.running[state.job.index] = _Running(name, now, on_spot, self.tokens)
        end = now + state.left + (self.costs.restore_s if state.restores else 0.0)
        lost = region.spot_lost_after(now) if on_spot else end
        if lost < end:
            self._push(lost, self.PREEMPT, state.job.index, self.tokens)
        else:
            self._push(end, self.END, state.job.index, self.tokens)

    def _stop(self, index: int, now: float, *, preempted: bool) -> None:
        running = self.running.pop(index)
        state = self.states[index]
        region = self.market.by_name[running.region]
        gpus = state.job.gpus
        self.market.free[running.region] += gpus
        elapsed = now - running.started
        price = region.spot_price if running.on_spot else region.on_demand_price
        state.cost += gpus * elapsed / 3600 * price
        state.grams += region.grams(running.started, now, self.costs.power_per_gpu_w * gpus)
        state.gpu_s_by_region[running.region] = state.gpu_s_by_region.get(running.region, 0.0) + gpus * elapsed
        if running.on_spot:
            state.spot_gpu_s += gpus * elapsed
        if not preempted:
            state.left = 0.0
            state.finished = now
            return
        worked = max(0.0, elapsed - (self.costs.restore_s if state.restores else 0.0))
        kept = (worked // self.costs.checkpoint_s) * self.costs.checkpoint_s
        state.left -= min(kept, state.left - EPS)
        state.restores = True
        state.preemptions += 1
        self.waiting[index] = state
