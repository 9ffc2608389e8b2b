"""Simulator benchmark: aisched against FIFO + first-fit and FIFO + kube-scheduler spread, on public traces.

Runs `aisched.sim.simulate` (the operator's own placement and scheduling code on
a simulated clock) on two traces, each policy on the same jobs and cluster:

- Philly (Microsoft, 2017): the trace opens with a sparse ramp (70 jobs over
  20 days, mostly jobs already running when it starts); the slice skips those
  and takes the next `--philly-limit` jobs (about 2.5 days of arrivals at the
  default 8,000).
- Alibaba GPU v2023, `openb_pod_list_multigpu50.csv`: every GPU pod, with the
  arrivals and durations that file lacks synthesized as documented in
  aisched.sim.traces (Poisson arrivals at `--load` of the cluster, log-normal
  durations, seed `--seed`).

Cluster (unless --cluster names a hack/clusters/*.yaml): 48 nodes x 8 GPUs, racks
of 8 nodes, 3 racks per zone (384 GPUs), sized so the Philly slice keeps it busy.
aisched is told each job's true duration (an oracle estimate: the best case for
its backfill); jobs are in one queue at one priority.

Figures go to trace_philly.json and trace_alibaba.json in --output-dir, and into
benchmarks/results/ with --update-results.

Usage: .venv/bin/python -m benchmarks.trace [--data-dir ../shared/data] [--philly P.csv] [--alibaba A.csv]
       [--quick] [--philly-limit 8000] ... [--output-dir DIR] [--update-results]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aisched.policy.cluster import Node
from aisched.sim.clusters import GridSpec, generated_cluster, load_cluster
from aisched.sim.command import ProgressLine
from aisched.sim.engine import simulate
from aisched.sim.report import render_report
from aisched.sim.traces import read_trace
from benchmarks.common import REPO_ROOT, RESULTS_DIR, SHARED_DATA, require_files, run_reporting_input_errors

PHILLY = Path("traces/philly/philly-2017-09-04_2017-10-20.csv")
ALIBABA = Path("traces/alibaba-gpu-v2023/openb_pod_list_multigpu50.csv")
PHILLY_RAMP = 70
GRID = GridSpec(nodes=48, gpus_per_node=8, nodes_per_rack=8, racks_per_zone=3)


def run_one(
    name: str,
    trace_path: Path,
    nodes: list[Node],
    outputs: Sequence[Path],
    *,
    limit: int | None,
    skip: int,
    load: float,
    seed: int,
) -> dict[str, Any]:
    started = time.monotonic()
    gpus = sum(n.allocatable_gpus for n in nodes)
    trace = read_trace(trace_path, limit=limit, skip=skip, cluster_gpus=gpus, load=load, seed=seed)
    report = simulate(trace, nodes, trace_name=_shown(trace_path), progress=ProgressLine(sys.stderr))
    print(render_report(report), flush=True)
    figures = report.to_json()
    figures["slice"] = {"skip": skip, "limit": limit, "load": load, "seed": seed}
    figures["wall_seconds"] = round(time.monotonic() - started, 1)
    for output in outputs:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"{name}: wrote {output}", flush=True)
    print(f"{name}: {figures['wall_seconds']} s\n", flush=True)
    return figures


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA, help="where the default traces are")
    parser.add_argument("--philly", type=Path, help=f"the Philly trace (default: data-dir/{PHILLY})")
    parser.add_argument("--alibaba", type=Path, help=f"the Alibaba GPU v2023 pod list (default: data-dir/{ALIBABA})")
    parser.add_argument("--cluster", type=Path, help="hack/clusters/*.yaml instead of the 48-node grid")
    parser.add_argument("--philly-limit", type=int, default=8000)
    parser.add_argument("--alibaba-limit", type=int, default=None, help="default: the whole file")
    parser.add_argument("--load", type=float, default=0.9, help="Alibaba offered load (synthesized arrivals)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs of each trace: a minute, not several")
    parser.add_argument("--output-dir", type=Path, help="write trace_philly.json and trace_alibaba.json here")
    parser.add_argument(
        "--update-results",
        action="store_true",
        help="write them into benchmarks/results/ too: the committed figures",
    )
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.philly_limit = min(args.philly_limit, 2000)
        args.alibaba_limit = min(args.alibaba_limit or 2000, 2000)
    philly = args.philly or args.data_dir / PHILLY
    alibaba = args.alibaba or args.data_dir / ALIBABA
    require_files([(philly, "--philly or --data-dir"), (alibaba, "--alibaba or --data-dir")])
    if args.cluster is not None:
        require_files([(args.cluster, "--cluster")])
    nodes = load_cluster(args.cluster) if args.cluster else generated_cluster(GRID)
    directories = [d for d in (args.output_dir, RESULTS_DIR if args.update_results else None) if d is not None]
    run_one(
        "philly",
        philly,
        nodes,
        [directory / "trace_philly.json" for directory in directories],
        limit=args.philly_limit,
        skip=PHILLY_RAMP,
        load=args.load,
        seed=args.seed,
    )
    run_one(
        "alibaba",
        alibaba,
        nodes,
        [directory / "trace_alibaba.json" for directory in directories],
        limit=args.alibaba_limit,
        skip=0,
        load=args.load,
        seed=args.seed,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


def _shown(path: Path) -> str:
    """The path relative to the repository when it can be (results name the data, not this machine)."""
    try:
        return str(Path("..") / path.resolve().relative_to(REPO_ROOT.parent))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
