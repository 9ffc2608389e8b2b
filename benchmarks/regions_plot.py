"""The regions benchmark's picture: carbon saved against money paid, and completion time, per policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure  # no pyplot: no backend or display to choose on a build machine

COLOURS = {
    "time_only": "tab:brown",
    "cheapest_first": "tab:orange",
    "lowest_intensity": "tab:green",
    "first_to_admit": "tab:grey",
    "aisched": "tab:blue",
}


def plot(results: dict[str, Any], path: Path) -> None:
    policies = results["policies"]
    cheapest = policies["cheapest_first"]["cost"]
    fig = Figure(figsize=(10.4, 4.2))
    money, time_taken = fig.subplots(1, 2)
    for name, figures in policies.items():
        colour = COLOURS.get(name, "black")
        saved = 100 * figures["co2_saving"]
        money.scatter([figures["cost"] / cheapest], [saved], s=60, color=colour, label=name, zorder=3)
        time_taken.scatter([figures["avg_jct_s"] / 3600], [saved], s=60, color=colour, label=name, zorder=3)
    money.axvline(1.05, color="grey", linestyle=":", linewidth=1, label="cost target (1.05x)")
    money.set(xlabel="cost / cheapest_first's", ylabel="CO2 saved vs at arrival at home (%)")
    time_taken.set(xlabel="average JCT (h)", ylabel="CO2 saved vs at arrival at home (%)")
    jobs = results["inputs"]["jobs"]
    money.set_title(f"{jobs:,} Philly jobs, 4 regions (GB, FR grids)")
    time_taken.set_title(f"deadline {results['inputs']['deadline']}")
    for ax in (money, time_taken):
        ax.axhline(0, color="black", linewidth=0.5)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
