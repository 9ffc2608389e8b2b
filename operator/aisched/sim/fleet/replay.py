"""The event loop every fleet arm shares: arrivals, ends of runs, nodes Ready, spot losses, consolidation.

An arm decides where jobs run (`cycle`) and what happens when nodes go (`interrupted`); this
loop keeps the clock, each job's progress and the figures. A job runs at the pace of its
consolidated run time, slowed as aisched.sim.speed says when its pods are spread
over more nodes than it needs (each model's measured Pollux factor) or over zones (the
simulator's assumed zone factor). A job stopped by an interruption keeps its progress (its
checkpoint is taken as saved, see aisched.sim.fleet.fleet) and pays `restart_overhead_s` each
time it starts again. Gang GPUs held while the gang cannot run (some of its pods bound, others
waiting for nodes) are integrated over time: `partial_gang_node_hours`, in node-equivalents.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aisched.policy.cluster import ClusterSnapshot
from aisched.sim.fleet.fleet import HOUR, Fleet
from aisched.sim.jobs import SimJob
from aisched.sim.speed import Geometry, SpeedModel

DEFAULT_RESTART_OVERHEAD_S = 60.0


@dataclass(frozen=True, slots=True)
class ArmReport:
    arm: str
    jobs: int
    finished: int
    avg_jct_s: float
    p95_jct_s: float
    deadline_misses: int
    partial_gangs: int
    partial_gang_node_hours: float
    cross_zone_gangs: int
    job_stops: int
    bill: Mapping[str, float]
    fleet_events: Mapping[str, int]
    peak_nodes: int
    makespan_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu_hours_cost": round(self.bill["cost"], 1),
            "node_hours": round(self.bill["node_hours"], 1),
            "gpu_hours": round(self.bill["gpu_hours"], 1),
            "spot_node_hours": round(self.bill["spot_node_hours"], 1),
            "on_demand_node_hours": round(self.bill["on_demand_node_hours"], 1),
            "avg_jct_s": round(self.avg_jct_s, 1),
            "p95_jct_s": round(self.p95_jct_s, 1),
            "deadline_misses": self.deadline_misses,
            "partial_gangs": self.partial_gangs,
            "partial_gang_node_hours": round(self.partial_gang_node_hours, 2),
            "cross_zone_gangs": self.cross_zone_gangs,
            "job_stops": self.job_stops,
            "peak_nodes": self.peak_nodes,
            "makespan_s": round(self.makespan_s, 1),
            "jobs": self.jobs,
            "finished": self.finished,
            **{key: value for key, value in sorted(self.fleet_events.items())},
        }


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


class Loop:
    """The clock and the jobs' progress; subclasses place jobs and provision nodes."""

    name = "loop"

    def __init__(
        self,
        jobs: Sequence[SimJob],
        fleet: Fleet,
        *,
        deadlines: Mapping[str, float] | None = None,
        restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S,
        speed: SpeedModel | None = None,
    ) -> None:
        self.jobs, self.fleet = list(jobs), fleet
        self.speed = speed or SpeedModel.uniform()
        self.pace: dict[str, float] = {}
        self.by_key = {j.key: j for j in jobs}
        self.deadlines = dict(deadlines or {})
        self.overhead = restart_overhead_s
        self.remaining = {j.key: j.duration for j in jobs}
        self.runs: dict[str, int] = {}
        self.work_start: dict[str, float] = {}
        self.completions: list[tuple[float, int, str]] = []
        self.finish: dict[str, float] = {}
        self.partial_keys: set[str] = set()
        self.partial_gpus = 0
        """GPUs held now by gangs that cannot run."""
        self.partial_gpu_seconds = 0.0
        self.cross_zone = 0
        self.job_stops = 0
        self.peak_nodes = 0

    # -- what arms do -----------------------------------------------------------------------------

    def submit(self, job: SimJob, now: float) -> None:
        raise NotImplementedError

    def finished(self, job: SimJob, now: float) -> None:
        """The job's run ended: give its GPUs back."""
        raise NotImplementedError

    def interrupted(self, gone: set[str], now: float) -> None:
        """These nodes were taken away: stop (`stop_run`) what ran on them."""
        raise NotImplementedError

    def cycle(self, now: float) -> float:
        """Place what can run and ask for nodes; returns when the arm wants its next cycle (inf: none)."""
        raise NotImplementedError

    def nominated(self, now: float) -> set[str]:
        """Empty Ready nodes kept from consolidation: pending pods are headed for them (none by default)."""
        return set()

    # -- for arms ---------------------------------------------------------------------------------

    def start_run(self, job: SimJob, nodes: Sequence[str], now: float) -> None:
        """The job runs on `nodes` (one per pod) from `now`, after its restart overhead if it ran before."""
        overhead = self.overhead if job.key in self.runs else 0.0
        # The gang's own nodes say where each is; how many nodes a zone can hold is the whole fleet's.
        geometry = Geometry(ClusterSnapshot(self.fleet.alive[n].as_policy_node() for n in set(nodes)))
        geometry.nodes_per_zone = max(Counter(n.zone for n in self.fleet.alive.values()).values())
        pace = 1.0 / self.speed.slowdown(job.model, nodes, job.gpus, geometry)
        self.runs[job.key] = self.runs.get(job.key, 0) + 1
        self.work_start[job.key], self.pace[job.key] = now + overhead, pace
        end = now + overhead + self.remaining[job.key] / pace
        heapq.heappush(self.completions, (end, self.runs[job.key], job.key))
        self.cross_zone += len({self.fleet.alive[n].zone for n in nodes}) > 1

    def stop_run(self, job: SimJob, now: float) -> None:
        start = self.work_start.pop(job.key)
        self.remaining[job.key] -= max(0.0, now - start) * self.pace[job.key]
        self.job_stops += 1

    def running(self, key: str) -> bool:
        return key in self.work_start

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> ArmReport:
        arrivals, index, now, wake = self.jobs, 0, 0.0, math.inf
        while len(self.finish) < len(arrivals):
            while self.completions and not self._current(self.completions[0]):
                heapq.heappop(self.completions)
            upcoming = min(
                arrivals[index].arrival if index < len(arrivals) else math.inf,
                self.completions[0][0] if self.completions else math.inf,
                self.fleet.next_event(now),
                wake,
            )
            if upcoming == math.inf:
                break  # nothing can happen any more: what is left can never run
            self.partial_gpu_seconds += self.partial_gpus * (upcoming - now)
            now = upcoming
            while self.completions and self.completions[0][0] <= now:
                _, _, key = heapq.heappop(self.completions)
                if key in self.work_start:
                    del self.work_start[key]
                    self.remaining[key] = 0.0
                    self.finish[key] = now
                    self.finished(self.by_key[key], now)
            gone = set(self.fleet.interrupt(now))
            if gone:
                self.interrupted(gone, now)
            self.fleet.became_ready(now)
            while index < len(arrivals) and arrivals[index].arrival <= now:
                self.submit(arrivals[index], now)
                index += 1
            wake = self.cycle(now)
            if wake <= now:
                raise RuntimeError(f"{self.name}: asked for its next cycle at {wake}, not after {now}")
            self.fleet.consolidate(now, self.nominated(now))
            self.peak_nodes = max(self.peak_nodes, len(self.fleet.alive))
        end = max(self.finish.values(), default=now)
        self.fleet.close(end)
        return self._report(end)

    def _current(self, entry: tuple[float, int, str]) -> bool:
        _, run, key = entry
        return key in self.work_start and self.runs.get(key) == run

    def _report(self, end: float) -> ArmReport:
        jcts = [self.finish[j.key] - j.arrival for j in self.jobs if j.key in self.finish]
        misses = sum(1 for key, deadline in self.deadlines.items() if self.finish.get(key, math.inf) > deadline + 1e-6)
        node_gpus = max((n.gpus for n in self.fleet.nodes.values()), default=1)
        return ArmReport(
            arm=self.name,
            jobs=len(self.jobs),
            finished=len(jcts),
            avg_jct_s=sum(jcts) / len(jcts) if jcts else 0.0,
            p95_jct_s=percentile(jcts, 0.95),
            deadline_misses=misses,
            partial_gangs=len(self.partial_keys),
            partial_gang_node_hours=self.partial_gpu_seconds / node_gpus / HOUR,
            cross_zone_gangs=self.cross_zone,
            job_stops=self.job_stops,
            bill=self.fleet.bill(end),
            fleet_events={
                "launches": self.fleet.launches,
                "withdrawn_before_ready": self.fleet.withdrawals,
                "spot_interruptions": self.fleet.interruptions,
                "consolidated": self.fleet.consolidations,
            },
            peak_nodes=self.peak_nodes,
            makespan_s=end - (self.jobs[0].arrival if self.jobs else 0.0),
        )
