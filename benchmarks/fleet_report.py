"""docs/fleet.md's result tables, made from the committed fleet.json: one row per arm and trace.

`python -m benchmarks.fleet_report` rewrites the part of docs/fleet.md between
`<!-- fleet-table:begin -->` and `<!-- fleet-table:end -->`; `python -m benchmarks.fleet
--update-results` runs it after writing the figures. Nothing in the tables is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, RESULTS_DIR
from benchmarks.trace_report import replace_between_markers

BEGIN, END = "<!-- fleet-table:begin -->", "<!-- fleet-table:end -->"
PAGE = Path("docs/fleet.md")
HEADER = (
    "| arm | durations known | money ($) | node-hours | of which spot | avg JCT (s) | p95 JCT (s) "
    "| partial gangs | their node-hours | gangs across zones | deadline misses |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def _arm_row(arm: str, f: Mapping[str, Any]) -> str:
    knew = f.get("knew", {}).get("durations", "-")
    return (
        f"| {arm} | {knew} | {f['gpu_hours_cost']:,.0f} | {f['node_hours']:,.0f} | {f['spot_node_hours']:,.0f} "
        f"| {f['avg_jct_s']:,.0f} | {f['p95_jct_s']:,.0f} | {f['partial_gangs']} "
        f"| {f['partial_gang_node_hours']:.2f} | {f['cross_zone_gangs']} | {f['deadline_misses']} |"
    )


def fleet_tables(results: Mapping[str, Any]) -> str:
    parts = []
    for name, trace in results["traces"].items():
        setup = trace["setup"]
        parts.append(
            f"**{name}**: {setup['jobs']:,} jobs, {setup['jobs_with_deadline']:,} with a deadline; static fleets of "
            f"{setup['static_peak_nodes']} and {setup['static_mean_nodes']} {setup['instance_type']}."
        )
        parts.append("")
        parts.append(HEADER)
        parts.extend(_arm_row(arm, f) for arm, f in trace["arms"].items())
        targets = trace["targets"]
        if "cost_vs_gang_karpenter" in targets:
            parts.append("")
            parts.append(
                f"aisched against the gang scheduler + Karpenter: {targets['cost_vs_gang_karpenter']:.3f}x its cost "
                f"at {targets['avg_jct_vs_gang_karpenter']:.3f}x its average JCT."
            )
        sweep = {k: v for k, v in trace["variants"].items() if k.startswith("spot_price_")}
        if sweep:
            cells = ", ".join(
                f"spot at {key.removeprefix('spot_price_')}x: "
                f"{v['aisched_karpenter']['gpu_hours_cost'] / v['gang_karpenter']['gpu_hours_cost']:.3f}x cost, "
                f"{v['aisched_karpenter']['avg_jct_s'] / v['gang_karpenter']['avg_jct_s']:.3f}x JCT"
                for key, v in sweep.items()
                if "aisched_karpenter" in v and "gang_karpenter" in v
            )
            parts.append(f"Spot price sweep, aisched over the gang peer: {cells}.")
        parts.append("")
    return "\n".join(parts).rstrip("\n")


def refresh(results_path: Path, page: Path) -> None:
    results = json.loads(results_path.read_text())
    page.write_text(replace_between_markers(page.read_text(), fleet_tables(results), begin=BEGIN, end=END))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS_DIR / "fleet.json")
    parser.add_argument("--page", type=Path, default=REPO_ROOT / PAGE)
    args = parser.parse_args(argv)
    try:
        refresh(args.results, args.page)
    except (OSError, ValueError, KeyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote the tables of {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
