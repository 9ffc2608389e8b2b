"""`aisched simulate trace TRACE --cluster CLUSTER`: replay a trace under aisched and the baselines; print tables."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from aisched.policy.cluster import Node
from aisched.sim.clusters import GridSpec, generated_cluster, load_cluster
from aisched.sim.engine import DEFAULT_RESTART_OVERHEAD_S, POLICIES, SimOptions, SimulationReport, simulate
from aisched.sim.jobs import DEFAULT_GPUS_PER_POD, NO_ELASTIC, DurationKnowledge
from aisched.sim.options import positive
from aisched.sim.report import render_report
from aisched.sim.scaling import DEFAULT_GROWTH_EFFICIENCY, ScalingModel, efficiencies
from aisched.sim.speed import DEFAULT_RACK_FACTOR, DEFAULT_ZONE_FACTOR, SpeedModel, cross_node_factors
from aisched.sim.traces import TraceFormat, read_trace


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", type=Path, help="Philly CSV, Alibaba GPU v2023 pod list or Pollux workload")
    parser.add_argument(
        "--cluster", type=Path, help="cluster description (hack/clusters/*.yaml); without it, --nodes makes a grid"
    )
    parser.add_argument("--format", choices=[f.value for f in TraceFormat], help="trace format (default: by header)")
    parser.add_argument("--limit", type=positive(int), help="replay only this many jobs (by arrival)")
    parser.add_argument("--skip", type=int, default=0, help="leave out this many first jobs")
    grid = parser.add_argument_group("generated cluster (when no --cluster)")
    grid.add_argument("--nodes", type=positive(int), default=64)
    grid.add_argument("--gpus-per-node", type=positive(int), default=8)
    grid.add_argument("--nodes-per-rack", type=positive(int), default=16)
    grid.add_argument("--racks-per-zone", type=positive(int), default=4)
    grid.add_argument("--nodes-per-nvlink", type=int, default=0, help="nodes per NVLink domain; 0: per node only")
    parser.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated, of {', '.join(POLICIES)}")
    world = parser.add_argument_group("the simulated world (the same for every policy)")
    world.add_argument(
        "--knowledge",
        choices=[k.value for k in DurationKnowledge],
        default=DurationKnowledge.NONE.value,
        help="what the scheduler is told of durations: none (default), a user estimate with error, "
        "or the truth (an upper bound no scheduler has)",
    )
    world.add_argument(
        "--placement-data",
        type=Path,
        help="directory of Pollux placement CSVs (../shared/data/placement/pollux): jobs slow down when "
        "spread and resized jobs scale as measured; without it every placement runs at the same speed and "
        "resized jobs scale linearly",
    )
    world.add_argument(
        "--rack-factor", type=positive(float), default=DEFAULT_RACK_FACTOR, help="assumed; see aisched.sim.speed"
    )
    world.add_argument(
        "--zone-factor", type=positive(float), default=DEFAULT_ZONE_FACTOR, help="assumed; see aisched.sim.speed"
    )
    world.add_argument("--gpus-per-pod", type=positive(int), default=DEFAULT_GPUS_PER_POD, help="largest pod of a job")
    world.add_argument(
        "--restart-overhead", type=float, default=DEFAULT_RESTART_OVERHEAD_S, help="seconds a resumed job restarts"
    )
    world.add_argument(
        "--elastic-share",
        type=float,
        default=NO_ELASTIC,
        help="share of jobs aisched may resize (half to twice their replicas; see aisched.sim.jobs); default none",
    )
    world.add_argument(
        "--growth-efficiency",
        type=float,
        default=DEFAULT_GROWTH_EFFICIENCY,
        help="share of a grown job's extra throughput that becomes progress (assumed; see aisched.sim.scaling)",
    )
    parser.add_argument(
        "--load", type=positive(float), default=0.9, help="offered load for traces without arrival times"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for synthesized arrivals and durations")
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        nodes = _nodes(args)
        trace = read_trace(
            args.trace,
            TraceFormat(args.format) if args.format else None,
            limit=args.limit,
            skip=args.skip,
            cluster_gpus=sum(n.allocatable_gpus for n in nodes),
            load=args.load,
            seed=args.seed,
        )
        report = simulate(
            trace,
            nodes,
            trace_name=str(args.trace),
            policies=[p.strip() for p in args.policies.split(",") if p.strip()],
            options=options_from(args),
            progress=ProgressLine(sys.stderr),
        )
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(render_report(report))
    if args.json:
        write_json(report, args.json)
    return 0


def options_from(args: argparse.Namespace) -> SimOptions:
    speed = SpeedModel.uniform()
    scaling = ScalingModel(growth_efficiency=args.growth_efficiency)
    if args.placement_data is not None:
        speed = SpeedModel(
            cross_node_factors(args.placement_data), rack_factor=args.rack_factor, zone_factor=args.zone_factor
        )
        scaling = ScalingModel(efficiencies(args.placement_data), growth_efficiency=args.growth_efficiency)
    return SimOptions(
        speed=speed,
        scaling=scaling,
        elastic_share=args.elastic_share,
        knowledge=DurationKnowledge(args.knowledge),
        gpus_per_pod=args.gpus_per_pod,
        restart_overhead_s=args.restart_overhead,
        seed=args.seed,
    )


def _nodes(args: argparse.Namespace) -> list[Node]:
    if args.cluster is not None:
        return load_cluster(args.cluster)
    return generated_cluster(
        GridSpec(
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            nodes_per_rack=args.nodes_per_rack,
            racks_per_zone=args.racks_per_zone,
            nodes_per_nvlink=args.nodes_per_nvlink,
        )
    )


def write_json(report: SimulationReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_json(), indent=2) + "\n")


class ProgressLine:
    """One line on a terminal, rewritten at most once a second: how far each policy's replay is."""

    def __init__(self, stream: TextIO, interval: float = 1.0) -> None:
        self.stream = stream
        self.interval = interval
        self.last = 0.0
        self.policy = ""

    def __call__(self, policy: str, done: int, total: int, simulated_seconds: float) -> None:
        now = time.monotonic()
        finished = done >= total
        if now - self.last < self.interval and not finished and policy == self.policy:
            return
        self.last, self.policy = now, policy
        self.stream.write(
            f"\r{policy:<16} {done:>8}/{total} events  simulated {simulated_seconds / 86400:6.1f} days"
            + ("\n" if finished else "")
        )
        self.stream.flush()
