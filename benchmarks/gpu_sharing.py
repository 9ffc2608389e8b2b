"""GPU sharing: unallocated and stranded GPUs when tasks that share GPUs arrive, per packing policy.

The FGD paper's main experiment (Weng et al., ATC 2023) on its own data, Alibaba's
`openb_node_list_gpu_node.csv` (1,213 nodes, 6,212 GPUs) and `openb_pod_list_default.csv`
(8,152 tasks, 86% of them on one GPU or a fraction of one): tasks arrive in a seeded random
order, then seeded draws from the trace, until the GPU share asked for reaches `--max-load`
(1.3) of capacity; nothing leaves (aisched.sim.sharing). Every policy sees the same arrivals
for a seed; `--seeds` seeds, mean and spread reported.

Figures: per policy, the GPU share left unallocated when the arrived load reaches 100%
(the paper's headline) and the allocated share against arrived load (`curve`); stranded share
(partly used GPUs no task class can use) beside it. Memory is enforced as kube-scheduler's
NodeResourcesFit does in the paper's simulator; `variants.no_memory` is the same run with
memory not checked, because on this node list memory refuses more tasks than GPUs do and
the fragmentation measure (FGD's and ours) does not see memory.

Usage: .venv/bin/python -m benchmarks.gpu_sharing [--seeds 1 2 3] [--max-load 1.3] [--output PATH]
       [--update-results] [--plot docs/gpu_sharing.png]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from aisched.policy.sharing.model import NodeSpec, Task
from aisched.policy.sharing.policies import POLICY_NAMES
from aisched.sim.sharing import SharingRun, read_nodes, read_tasks, simulate
from benchmarks.common import (
    REPO_ROOT,
    SHARED_DATA,
    add_output_arguments,
    require_files,
    run_reporting_input_errors,
    write_figures,
)

DATA = SHARED_DATA / "traces" / "alibaba-gpu-v2023"
NO_MEMORY_POLICIES = ("aisched", "fgd", "best_fit")
# Large enough that memory never refuses a task (the no_memory variant).
UNLIMITED_MIB = 1 << 40


def summarise(runs: Sequence[SharingRun]) -> dict[str, Any]:
    """Mean and spread over seeds of one policy's runs (same load steps in every run)."""
    unallocated = [run.unallocated_at_full_load for run in runs]
    stranded = [run.stranded_at_full_load for run in runs]
    steps = min(len(run.curve) for run in runs)
    curve = [[runs[0].curve[i][0], round(statistics.fmean(run.curve[i][1] for run in runs), 5)] for i in range(steps)]
    stranded_curve = [
        [runs[0].curve[i][0], round(statistics.fmean(run.curve[i][2] for run in runs), 5)] for i in range(steps)
    ]
    return {
        "unallocated_gpu_share_at_full_load": round(statistics.fmean(unallocated), 5),
        "unallocated_gpu_share_at_full_load_min_max": [round(min(unallocated), 5), round(max(unallocated), 5)],
        "stranded_gpu_share_at_full_load": round(statistics.fmean(stranded), 5),
        "refused_tasks": round(statistics.fmean(run.refused_tasks for run in runs), 1),
        "curve": curve,
        "stranded_curve": stranded_curve,
    }


def targets(policies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Issue 29's targets: aisched at most 0.9x FGD's unallocated at full load, never below FGD's curve."""
    ours, fgd = policies["aisched"], policies["fgd"]
    ratio = ours["unallocated_gpu_share_at_full_load"] / max(fgd["unallocated_gpu_share_at_full_load"], 1e-9)
    behind = [
        load for (load, share), (_, theirs) in zip(ours["curve"], fgd["curve"], strict=False) if share < theirs - 1e-4
    ]
    return {"unallocated_ratio_to_fgd": round(ratio, 4), "ratio_met": ratio <= 0.9, "loads_behind_fgd": behind}


def _run(job: tuple[list[NodeSpec], list[Task], str, int, float]) -> SharingRun:
    nodes, tasks, policy, seed, max_load = job
    return simulate(nodes, tasks, policy, seed, max_load=max_load)


def measure(
    nodes: list[NodeSpec],
    tasks: list[Task],
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    max_load: float,
    workers: int,
) -> dict[str, dict[str, Any]]:
    jobs = [(nodes, tasks, policy, seed, max_load) for policy in policies for seed in seeds]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        runs = list(pool.map(_run, jobs))
    return {policy: summarise([run for run in runs if run.policy == policy]) for policy in policies}


def plot(figures: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no backend or display to choose on a build machine

    fig = Figure(figsize=(11, 4.2))
    allocated, stranded = fig.subplots(1, 2)
    for name, policy in figures["policies"].items():
        style = {"linewidth": 2.4} if name in ("aisched", "fgd") else {"linewidth": 1, "alpha": 0.8}
        allocated.plot(*zip(*policy["curve"], strict=True), label=name, **style)
        stranded.plot(*zip(*policy["stranded_curve"], strict=True), label=name, **style)
    for axes, label in ((allocated, "allocated share of GPU capacity"), (stranded, "stranded share of GPU capacity")):
        axes.set_xlabel("arrived GPU load (share of capacity)")
        axes.set_ylabel(label)
        axes.grid(alpha=0.3)
    allocated.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    allocated.set_xlim(0.7, figures["max_load"])
    allocated.set_ylim(0.7, 1.0)
    allocated.legend(fontsize=7)
    fig.suptitle(f"Alibaba GPU v2023 (6,212 GPUs), mean of {len(figures['seeds'])} seeds")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--nodes", type=Path, default=DATA / "openb_node_list_gpu_node.csv")
    parser.add_argument("--pods", type=Path, default=DATA / "openb_pod_list_default.csv")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--max-load", type=float, default=1.3)
    parser.add_argument("--policies", nargs="+", default=list(POLICY_NAMES), choices=POLICY_NAMES)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / "docs" / "gpu_sharing.png")
    add_output_arguments(parser, "gpu_sharing.json")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    require_files([(args.nodes, "--nodes"), (args.pods, "--pods")])
    nodes, tasks = read_nodes(args.nodes), read_tasks(args.pods)
    policies = measure(nodes, tasks, args.policies, args.seeds, max_load=args.max_load, workers=args.workers)
    unlimited = [replace(node, memory_mib=UNLIMITED_MIB) for node in nodes]
    no_memory_names = [name for name in NO_MEMORY_POLICIES if name in args.policies]
    no_memory = measure(unlimited, tasks, no_memory_names, args.seeds, max_load=args.max_load, workers=args.workers)
    figures: dict[str, Any] = {
        "nodes": str(args.nodes.name),
        "pods": str(args.pods.name),
        "seeds": args.seeds,
        "max_load": args.max_load,
        "policies": policies,
        "variants": {
            "no_memory": {name: {k: v for k, v in fig.items() if "curve" not in k} for name, fig in no_memory.items()}
        },
    }
    if "aisched" in policies and "fgd" in policies:
        figures["targets"] = targets(policies)
        figures["variants"]["no_memory"]["targets"] = targets(no_memory)
    for name, policy in policies.items():
        print(
            f"{name:16} unallocated at 100% load {policy['unallocated_gpu_share_at_full_load']:.4f}"
            f" {policy['unallocated_gpu_share_at_full_load_min_max']}"
            f"  stranded {policy['stranded_gpu_share_at_full_load']:.4f}"
        )
    print(f"targets: {figures.get('targets')}  no_memory: {figures['variants']['no_memory'].get('targets')}")
    write_figures(figures, args.output, args.update_results, "gpu_sharing.json")
    if args.plot is not None:
        plot(figures, args.plot)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
