"""The scale benchmark's picture: operator memory against cluster size, and cycle time against the backlog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure  # no pyplot: no backend or display to choose on a build machine


def plot(figures: dict[str, Any], path: Path) -> None:
    idle = {int(nodes): rss for nodes, rss in figures["idle_rss_mib"].items()}
    curve = figures["cycle_against_backlog"]
    fig = Figure(figsize=(11, 4.2))
    memory, cycles = fig.subplots(1, 2)
    sizes = sorted(idle)
    memory.plot(sizes, [idle[n] for n in sizes], marker="o", label="idle")
    memory.scatter(
        [figures["nodes"]],
        [figures["operator_peak_rss_mib"]],
        color="tab:red",
        label=f"peak with {figures['jobs']:,} jobs",
        zorder=3,
    )
    memory.axhline(500, color="grey", linestyle="--", linewidth=1, label="target 500 MiB")
    memory.set(xlabel="GPU nodes (8 GPUs each)", ylabel="operator RSS (MiB)", title="Operator memory")
    memory.set_ylim(bottom=0)
    memory.legend()
    queued = [point["queued_jobs"] for point in curve]
    cycles.scatter(queued, [point["mean_cycle_s"] for point in curve], s=12)
    cycles.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="p99 target 1 s")
    cycles.set(
        xlabel="TrainingJobs waiting",
        ylabel="mean scheduling cycle per 5 s (s)",
        title=f"Scheduling cycle, {figures['nodes']:,} nodes (p99 {figures['cycle_p99_s']} s)",
    )
    cycles.set_ylim(bottom=0)
    cycles.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
