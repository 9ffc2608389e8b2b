"""Simulator benchmark: Philly's virtual clusters as tenants, each with its quota, on one shared cluster.

The Philly trace names the virtual cluster (a team with its own share of the GPUs) of every job.
Here each is a Queue: its nominal quota is its share of the trace's GPU-time (the trace does not
give the real shares; `aisched.sim.tenants`), all in one cohort, so an idle team's GPUs are lent
to busy ones and taken back when the team needs them. The same jobs (Philly after its ramp,
`--limit` jobs, real arrivals and durations, the cluster sized so the trace offers `--load` of it,
as `benchmarks/trace.py` does) are replayed by:

- `aisched_queues`: aisched scheduling by the queues (quotas, borrowing, reclaim, fair order);
- `aisched_one_queue`: aisched with every job in one queue, as in the trace benchmark;
- the peers as modelled in `aisched.sim.peers` (one queue each: their models have no cohorts).

Per arm: average and p95 JCT, and per queue its JCT, slowdown, GPU-hours borrowed and its
guarantee shortfall: GPU-hours it held less than min(quota, what it held + what it waited for),
i.e. demand its quota promised and it did not get. Totals: the shortfall summed over queues, the
worst queue's, and the worst queue's average slowdown.

Elastic jobs are left out (`elastic_share` 0): this is about who gets the GPUs, not resizing.
Figures go to benchmarks/results/tenants.json with --update-results.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from aisched.policy.queueing import QueueQuota
from aisched.sim.clusters import generated_cluster, sized_to_load
from aisched.sim.engine import SimOptions, SimulationReport, simulate
from aisched.sim.speed import SpeedModel, cross_node_factors
from aisched.sim.tenants import COHORT, tenant_shares
from aisched.sim.traces import offered_gpus
from benchmarks.common import (
    SHARED_DATA,
    InputError,
    add_output_arguments,
    require_files,
    run_reporting_input_errors,
    write_figures,
)
from benchmarks.trace import NODE_SHAPE, PHILLY, PLACEMENT, add_philly_skip_argument, philly_slice

RESULTS = "tenants.json"
PEERS = ("kueue", "volcano", "fifo_first_fit")


def queues_for(shares: dict[str, int]) -> tuple[QueueQuota, ...]:
    return tuple(QueueQuota(tenant, nominal, cohort=COHORT) for tenant, nominal in sorted(shares.items()))


def summary(report: SimulationReport, policy: str) -> dict[str, Any]:
    figures = report.policies[policy]
    by_queue = figures.by_queue
    shortfalls = [q["shortfall_gpu_hours"] for q in by_queue.values()]
    return {
        "avg_jct_s": round(figures.avg_jct_s, 1),
        "p95_jct_s": round(figures.p95_jct_s, 1),
        "finished_jobs": figures.finished_jobs,
        "preemptions": figures.preemptions,
        "shortfall_gpu_hours": round(sum(shortfalls), 1),
        "worst_queue_shortfall_gpu_hours": max(shortfalls, default=0.0),
        "worst_queue_avg_slowdown": max((q["avg_slowdown"] for q in by_queue.values()), default=0.0),
        "by_queue": by_queue,
    }


def run(args: argparse.Namespace) -> int:
    trace_path = args.philly or args.data_dir / PHILLY
    placement = args.placement or args.data_dir / PLACEMENT
    require_files([(trace_path, "--philly or --data-dir")])
    if not placement.is_dir():
        raise InputError(f"{placement}: no such directory (set it with --placement or --data-dir)")
    started = time.monotonic()
    jobs, skip, skipped = philly_slice(trace_path, args.philly_skip, args.limit)
    offered = offered_gpus(jobs)
    grid = sized_to_load(offered, max((j.gpus for j in jobs), default=1), args.load, NODE_SHAPE)
    nodes = generated_cluster(grid)
    cluster_gpus = grid.nodes * grid.gpus_per_node
    shares = tenant_shares(jobs, cluster_gpus)
    options = SimOptions(
        speed=SpeedModel(cross_node_factors(placement)),
        seed=args.seed,
        gpus_per_pod=args.gpus_per_pod,
        queues=queues_for(shares),
    )
    enforced = simulate(jobs, nodes, trace_name="philly", policies=["aisched", *PEERS], options=options)
    one_queue = simulate(jobs, nodes, policies=["aisched"], options=replace(options, enforce_queues=False))
    arms = {"aisched_queues": summary(enforced, "aisched"), "aisched_one_queue": summary(one_queue, "aisched")}
    arms |= {peer: summary(enforced, peer) for peer in PEERS}
    figures = {
        "trace": str(PHILLY),
        "jobs": len(jobs),
        "skip": skip,
        "skipped": skipped,
        "limit": args.limit,
        "cluster": {"nodes": grid.nodes, "gpus": cluster_gpus, "offered_gpus": round(offered, 1), "load": args.load},
        "queues": {tenant: nominal for tenant, nominal in sorted(shares.items())},
        "quotas": "each virtual cluster's share of the slice's GPU-time, one cohort, borrowing on",
        "options": options.to_json(),
        "arms": arms,
        "seconds": round(time.monotonic() - started, 1),
    }
    for name, arm in arms.items():
        print(
            f"{name:18} avg JCT {arm['avg_jct_s']:>10.0f} s  p95 {arm['p95_jct_s']:>10.0f} s  "
            f"shortfall {arm['shortfall_gpu_hours']:>9.1f} GPU-h  "
            f"worst queue {arm['worst_queue_shortfall_gpu_hours']:>8.1f}  "
            f"worst slowdown {arm['worst_queue_avg_slowdown']:.2f}"
        )
    write_figures(figures, args.output, args.update_results, RESULTS)
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA, help="where the default inputs are")
    parser.add_argument("--philly", type=Path, help=f"the Philly trace (default: data-dir/{PHILLY})")
    parser.add_argument("--placement", type=Path, help=f"Pollux placement CSVs (default: data-dir/{PLACEMENT})")
    parser.add_argument("--limit", type=int, default=4000, help="Philly jobs after the ramp")
    add_philly_skip_argument(parser)
    parser.add_argument("--load", type=float, default=0.9, help="the trace's offered load over the cluster's GPUs")
    parser.add_argument("--gpus-per-pod", type=int, default=4, help="largest pod of a job")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="500 jobs: seconds, not minutes")
    add_output_arguments(parser, RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.limit = min(args.limit, 500)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
