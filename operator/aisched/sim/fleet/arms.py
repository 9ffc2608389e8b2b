"""The arms of the fleet benchmark, on the same jobs, the same spot traces and the same prices.

- `static_peak`: on-demand nodes enough for the peak of demand (GPUs asked for at once if every
  job started on arrival), there all the time; aisched schedules.
- `static_mean`: on-demand nodes enough for the mean load (GPU-time asked per second); aisched.
- `karpenter_alone`: aisched.sim.fleet.karpenter: the kube-scheduler and Karpenter.
- `gang_karpenter`: aisched.sim.fleet.gang_karpenter: a gang scheduler (Kueue/Volcano style,
  all-or-nothing, MostAllocated) with Karpenter: the peer that counts.
- `aisched_karpenter`: aisched.sim.fleet.gangs: aisched schedules and asks for whole gangs.

What each arm knows (`arm_knowledge`, written beside its figures): aisched's arms read each job's
estimate (`FleetOptions.knowledge`, by default a user's estimate with log-normal error,
aisched.sim.jobs) for backfill and for the spot-or-on-demand choice before a deadline; Karpenter
alone and the gang scheduler read no duration (neither has a field for one). No arm sees future
arrivals. The static fleets' sizes come from the whole trace (its true durations and arrivals):
hindsight no operator has, in their favour.

Both growing arms are limited to the peak fleet's GPUs (a NodePool limit; aisched's quota), so
neither may buy its way out of queueing with more than the static peak fleet has.

Deadlines: the traces carry none. A seeded share of jobs (`deadline_share`) gets one: arrival
plus the provisioning delay plus its run time times a factor drawn uniformly in
`deadline_factor`, the slack a user who wants the result "by tomorrow" leaves. aisched's spot
decision reads them; every arm is judged on them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aisched.api.common import CapacityType
from aisched.sim.fleet.catalog import H100, for_product, offerings
from aisched.sim.fleet.fleet import Fleet, SpotMarket
from aisched.sim.fleet.gang_karpenter import GangKarpenterLoop
from aisched.sim.fleet.gangs import GangLoop, GangProvisioner
from aisched.sim.fleet.karpenter import KarpenterLoop
from aisched.sim.fleet.replay import DEFAULT_RESTART_OVERHEAD_S, ArmReport
from aisched.sim.jobs import DEFAULT_GPUS_PER_POD, ESTIMATE_SIGMA, DurationKnowledge, SimJob, gangs
from aisched.sim.speed import ModelMix, SpeedModel
from aisched.sim.traces import TraceJob, offered_gpus

ARMS = ("static_peak", "static_mean", "karpenter_alone", "gang_karpenter", "aisched_karpenter")
AISCHED_ARMS = ("static_peak", "static_mean", "aisched_karpenter")
"""The arms aisched schedules: the ones that read the jobs' estimates."""
DEFAULT_PROVISIONING_DELAY_S = 300.0
DEFAULT_CONSOLIDATE_AFTER_S = 60.0


@dataclass(frozen=True, slots=True)
class FleetOptions:
    provisioning_delay_s: float = DEFAULT_PROVISIONING_DELAY_S
    consolidate_after_s: float = DEFAULT_CONSOLIDATE_AFTER_S
    restart_overhead_s: float = DEFAULT_RESTART_OVERHEAD_S
    spot_price_ratio: float = 0.4
    gpu_product: str = H100
    gpus_per_pod: int = DEFAULT_GPUS_PER_POD
    deadline_share: float = 0.3
    deadline_factor: tuple[float, float] = (1.5, 3.0)
    knowledge: DurationKnowledge = DurationKnowledge.ESTIMATE
    speed: SpeedModel = field(default_factory=SpeedModel.uniform)
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "provisioning_delay_s": self.provisioning_delay_s,
            "consolidate_after_s": self.consolidate_after_s,
            "restart_overhead_s": self.restart_overhead_s,
            "spot_price_ratio": self.spot_price_ratio,
            "gpu_product": self.gpu_product,
            "gpus_per_pod": self.gpus_per_pod,
            "deadline_share": self.deadline_share,
            "deadline_factor": list(self.deadline_factor),
            "duration_knowledge": self.knowledge.value,
            "duration_estimate": _ESTIMATE_NOTE if self.knowledge == DurationKnowledge.ESTIMATE else None,
            "zone_factor": self.speed.zone_factor,
            "rack_factor": self.speed.rack_factor,
            "cross_node_factors": {k: round(v, 3) for k, v in sorted(self.speed.node_factors.items())},
            "seed": self.seed,
        }


_ESTIMATE_NOTE = (
    f"true duration x exp(N(0, {ESTIMATE_SIGMA})), seeded, one estimate per job for every arm that reads one"
)


def arm_knowledge(arm: str, options: FleetOptions) -> dict[str, Any]:
    """What ARM was told and what it assumes: the results file states it beside its figures."""
    ours = arm in AISCHED_ARMS
    return {
        "knew": {
            "durations": options.knowledge.value if ours else "none",
            "future_arrivals": False,
            "elasticity": False,
            "fleet_sized_from_whole_trace": arm in ("static_peak", "static_mean"),
            "deadlines": arm == "aisched_karpenter",
        },
        "assumptions": {
            "elastic_share": 0.0,
            "rack_factor": options.speed.rack_factor,
            "zone_factor": options.speed.zone_factor,
            "spot_price_ratio": options.spot_price_ratio,
            "spot_trace": "V100 availability (Can't Be Late, us-west-2) standing in for the GPU product's"
            if arm not in ("static_peak", "static_mean")
            else "none: on-demand only",
            "gang_in_one_zone": arm in AISCHED_ARMS,
        },
    }


def peak_demand(jobs: Sequence[TraceJob]) -> int:
    """The most GPUs asked for at once if every job started on arrival and ran its duration."""
    events = sorted([(j.arrival, j.gpus) for j in jobs] + [(j.arrival + j.duration, -j.gpus) for j in jobs])
    peak = level = 0
    for _, change in sorted(events, key=lambda e: (e[0], e[1])):
        level += change
        peak = max(peak, level)
    return peak


def static_sizes(jobs: Sequence[TraceJob], node_gpus: int) -> tuple[int, int]:
    """Nodes of the peak-sized and of the mean-sized static fleets (each holds the largest job)."""
    largest = math.ceil(max((j.gpus for j in jobs), default=1) / node_gpus)
    peak = max(largest, math.ceil(peak_demand(jobs) / node_gpus))
    mean = max(largest, math.ceil(offered_gpus(list(jobs)) / node_gpus))
    return peak, mean


def draw_deadlines(jobs: Sequence[SimJob], options: FleetOptions) -> dict[str, float]:
    # Drawn on the true duration, so that every deadline can be met; no arm is told how it was drawn.
    rng = random.Random(f"deadlines-{options.seed}")
    low, high = options.deadline_factor
    deadlines = {}
    for job in jobs:
        if rng.random() < options.deadline_share:
            deadlines[job.key] = job.arrival + options.provisioning_delay_s + job.duration * rng.uniform(low, high)
    return deadlines


def simulate_fleet(
    trace: Sequence[TraceJob], market: SpotMarket, options: FleetOptions, arms: Sequence[str] = ARMS
) -> tuple[dict[str, Any], dict[str, ArmReport]]:
    """Every arm on the trace; returns what was simulated (sizes, jobs) and each arm's report."""
    catalog = for_product(
        offerings(sorted(market.traces), spot_price_ratio=options.spot_price_ratio), options.gpu_product
    )
    if not catalog:
        raise ValueError(f"no instance type has {options.gpu_product}")
    node_gpus = catalog[0].instance_type.gpus
    peak, mean = static_sizes(trace, node_gpus)
    all_jobs = gangs(
        trace,
        node_gpus,
        gpus_per_pod=options.gpus_per_pod,
        knowledge=options.knowledge,
        models=ModelMix(tuple(options.speed.node_factors), seed=options.seed),
        seed=options.seed,
    )
    jobs = [j for j in all_jobs if j.gpus <= peak * node_gpus]
    deadlines = draw_deadlines(jobs, options)
    on_demand = next(o for o in catalog if o.capacity_type == CapacityType.ON_DEMAND)
    common: dict[str, Any] = {
        "deadlines": deadlines,
        "restart_overhead_s": options.restart_overhead_s,
        "speed": options.speed,
    }
    reports: dict[str, ArmReport] = {}
    for arm in arms:
        fleet = Fleet(options.provisioning_delay_s, options.consolidate_after_s, market)
        if arm in ("static_peak", "static_mean"):
            fleet.consolidate_after = math.inf  # a static fleet keeps its nodes
            start = jobs[0].arrival if jobs else 0.0
            for _ in range(peak if arm == "static_peak" else mean):
                fleet.launch(on_demand, start, ready_now=True)
            loop: GangLoop | KarpenterLoop = GangLoop(arm, jobs, fleet, **common)
        elif arm == "karpenter_alone":
            loop = KarpenterLoop(jobs, fleet, catalog, limit_gpus=peak * node_gpus, seed=options.seed, **common)
        elif arm == "gang_karpenter":
            loop = GangKarpenterLoop(jobs, fleet, catalog, limit_gpus=peak * node_gpus, seed=options.seed, **common)
        elif arm == "aisched_karpenter":
            loop = GangLoop(arm, jobs, fleet, provisioner=GangProvisioner(catalog, peak * node_gpus), **common)
        else:
            raise ValueError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")
        reports[arm] = loop.run()
    setup = {
        "jobs": len(jobs),
        "jobs_larger_than_peak_fleet": len(all_jobs) - len(jobs),
        "jobs_with_deadline": len(deadlines),
        "static_peak_nodes": peak,
        "static_mean_nodes": mean,
        "limit_gpus": peak * node_gpus,
        "instance_type": on_demand.instance_type.name,
        "on_demand_per_hour": on_demand.per_hour,
        "spot_per_hour": round(on_demand.per_hour * options.spot_price_ratio, 4),
    }
    return setup, reports
