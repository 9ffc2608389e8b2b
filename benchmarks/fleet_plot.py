"""The fleet benchmark's picture: what each arm paid against how long jobs took, per trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure  # no pyplot: no backend or display to choose on a build machine

COLOURS = {
    "static_peak": "tab:grey",
    "static_mean": "tab:brown",
    "karpenter_alone": "tab:orange",
    "gang_karpenter": "tab:green",
    "aisched_karpenter": "tab:blue",
}


def plot(results: dict[str, Any], path: Path) -> None:
    traces = results["traces"]
    fig = Figure(figsize=(5.2 * len(traces), 4.2))
    axes = fig.subplots(1, len(traces), squeeze=False)[0]
    for ax, (name, trace) in zip(axes, traces.items(), strict=True):
        arms = trace["arms"]
        peak = arms["static_peak"]
        for arm, figures in arms.items():
            cost = figures["gpu_hours_cost"] / peak["gpu_hours_cost"]
            jct = figures["avg_jct_s"] / peak["avg_jct_s"]
            ax.scatter([cost], [jct], s=60, color=COLOURS.get(arm, "black"), label=arm, zorder=3)
        ax.axhline(1.10, color="grey", linestyle="--", linewidth=1, label="JCT target (1.1x)")
        ax.axvline(0.5, color="grey", linestyle=":", linewidth=1, label="cost target (0.5x)")
        ax.set(
            xlabel="money paid / static_peak's",
            ylabel="average JCT / static_peak's",
            title=f"{name}: {trace['setup']['jobs']:,} jobs",
        )
        ax.set_xlim(left=0)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
