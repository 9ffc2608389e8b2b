"""The benchmark page's simulator table and the JCT plot, made from the committed `trace_<name>.json` figures.

`python -m benchmarks.trace_report` rewrites the part of docs/benchmarks.md between the markers
`<!-- trace-table:begin -->` and `<!-- trace-table:end -->` and draws docs/trace_jct.png (the JCT
distribution of every policy on every trace); `python -m benchmarks.trace --update-results` runs it
after writing the figures. Nothing in the table is typed by hand. Its rows are the assumption-free figures
(`variants.no_elastic`: no elastic job, rack and zone factors 1.0) where the results have them;
aisched's row is followed by its figures with the assumptions (`variants.elastic`: elastic jobs,
which only aisched resizes, and the rack and zone factors), so that no assumption is taken for
the rest of its gain.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, RESULTS_DIR

BEGIN, END = "<!-- trace-table:begin -->", "<!-- trace-table:end -->"
TRACE_TITLES = {
    "philly": "Philly",
    "alibaba": "Alibaba GPU 2023 pods with times",
    "pollux": "Pollux workloads 1-4",
}
POLICY_TITLES = {
    "aisched": "aisched",
    "kueue": "Kueue (BestEffortFIFO + TAS)",
    "volcano": "Volcano (gang, binpack, DRF)",
    "tiresias": "Tiresias (2D-LAS)",
    "fifo_first_fit": "FIFO + first fit",
    "fifo_spread": "FIFO + kube-scheduler spread",
}
WITH_ASSUMPTIONS_TITLE = "aisched, {share:.0%} of jobs elastic, rack {rack:g}x / zone {zone:g}x (assumed)"
PLOT = Path("docs/trace_jct.png")
PAGE = Path("docs/benchmarks.md")  # where the figures are told; the README links to it


def load_results(directory: Path) -> dict[str, dict[str, Any]]:
    results = {}
    for name in TRACE_TITLES:
        path = directory / f"trace_{name}.json"
        if path.is_file():
            results[name] = json.loads(path.read_text())
    return results


def duration_words(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def readme_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per policy and trace, assumption-free where the results say so; under aisched's,
    aisched with the assumptions (`variants.elastic`)."""
    lines = [
        "| trace | policy | avg JCT | p95 JCT | avg JCT 1 / 2-8 / >8 GPUs | effective GPU utilisation "
        "| multi-GPU jobs in smallest domain | p99 slowdown | preemptions per job | resizes per job |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, figures in results.items():
        cluster = figures["cluster"]
        first = f"{TRACE_TITLES[name]} ({figures['jobs']:,} jobs; {cluster['nodes']} x 8 GPUs)"
        variants = figures.get("variants", {})
        headline = variants.get("no_elastic", {}).get("policies") or figures["policies"]
        assumed = variants.get("elastic", {})
        rows: list[tuple[str, Mapping[str, Any]]] = []
        for policy, f in headline.items():
            rows.append((POLICY_TITLES.get(policy, policy), f))
            if policy == "aisched" and "aisched" in assumed.get("policies", {}) and "no_elastic" in variants:
                options = assumed["options"]
                title = WITH_ASSUMPTIONS_TITLE.format(
                    share=options["elastic_share"], rack=options["rack_factor"], zone=options["zone_factor"]
                )
                rows.append((title, assumed["policies"]["aisched"]))
        for index, (title, f) in enumerate(rows):
            lines.append(f"| {first if index == 0 else ''} | {title} | {_row(f)} |")
    return "\n".join(lines)


def _row(f: Mapping[str, Any]) -> str:
    by_size = f.get("avg_jct_by_size_s") or {}
    sizes = " / ".join(duration_words(by_size.get(s)) for s in ("1", "2-8", ">8"))
    return (
        f"{duration_words(f['avg_jct_s'])} | {duration_words(f['p95_jct_s'])} | {sizes} "
        f"| {_share(f['effective_utilization'])} | {_share(f['in_smallest_domain'])} "
        f"| {f['p99_slowdown']:.1f} | {f['preemptions_per_job']:.2f} | {f.get('resizes_per_job', 0.0):.2f}"
    )


def replace_between_markers(text: str, table: str, *, begin: str = BEGIN, end: str = END) -> str:
    first, last = text.find(begin), text.find(end)
    if first < 0 or last < first:
        raise ValueError(f"the page has no {begin} ... {end} section to rewrite")
    return text[: first + len(begin)] + "\n" + table + "\n" + text[last:]


def plot_jcts(results: Mapping[str, Mapping[str, Any]], output: Path) -> None:
    """One panel per trace: each policy's JCT distribution (empirical CDF, log time axis)."""
    import matplotlib  # a dev dependency, needed only for the picture

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, max(len(results), 1), figsize=(5 * max(len(results), 1), 4), squeeze=False)
    for axis, (name, figures) in zip(axes[0], results.items(), strict=False):
        for policy, samples in figures.get("jct_samples_s", {}).items():
            if samples:
                shares = [i / (len(samples) - 1) for i in range(len(samples))] if len(samples) > 1 else [1.0]
                axis.plot([s / 3600 for s in samples], shares, label=POLICY_TITLES.get(policy, policy))
        axis.set_xscale("log")
        axis.set_xlabel("JCT (hours)")
        axis.set_ylabel("share of jobs")
        axis.set_title(TRACE_TITLES[name])
        axis.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=110)
    plt.close(figure)


def refresh(results_dir: Path, readme: Path, plot: Path) -> None:
    results = load_results(results_dir)
    readme.write_text(replace_between_markers(readme.read_text(), readme_table(results)))
    plot_jcts(results, plot)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--page", "--readme", dest="readme", type=Path, default=REPO_ROOT / PAGE)
    parser.add_argument("--plot", type=Path, default=REPO_ROOT / PLOT)
    args = parser.parse_args(argv)
    try:
        refresh(args.results_dir, args.readme, args.plot)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.readme} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
