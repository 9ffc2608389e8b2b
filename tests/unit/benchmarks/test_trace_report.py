"""benchmarks/trace_report.py: the benchmark page's table comes from the figures; the plot is drawn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import trace_report
from benchmarks.common import REPO_ROOT, RESULTS_DIR


def figures(avg: float) -> dict[str, object]:
    policy = {
        "avg_jct_s": avg,
        "p95_jct_s": 7200.0,
        "avg_jct_by_size_s": {"1": 60.0, "2-8": 3 * 3600.0, ">8": None},
        "effective_utilization": 0.5,
        "in_smallest_domain": 1.0,
        "p99_slowdown": 3.25,
        "preemptions_per_job": 0.1,
        "resizes_per_job": 0.25,
    }
    fixed = {**policy, "avg_jct_s": 2 * avg, "resizes_per_job": 0.0}
    assumed = {"elastic_share": 0.5, "rack_factor": 1.1, "zone_factor": 1.5}
    return {
        "jobs": 1200,
        "cluster": {"nodes": 4, "gpus": 32},
        "options": assumed,
        "policies": {"aisched": policy, "kueue": policy},
        "variants": {
            "no_elastic": {"policies": {"aisched": fixed, "kueue": policy}},
            "elastic": {"options": assumed, "policies": {"aisched": policy, "kueue": policy}},
        },
        "jct_samples_s": {"aisched": [60.0, 600.0, 7200.0], "kueue": [120.0, 900.0]},
    }


def test_the_table_is_rewritten_between_the_markers_and_the_plot_drawn(tmp_path: Path) -> None:
    (tmp_path / "trace_philly.json").write_text(json.dumps(figures(5400.0)))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{trace_report.BEGIN}\nold table\n{trace_report.END}\nafter\n")
    plot = tmp_path / "docs" / "jct.png"
    assert trace_report.main(["--results-dir", str(tmp_path), "--readme", str(readme), "--plot", str(plot)]) == 0
    text = readme.read_text()
    assert "old table" not in text
    assert text.startswith("intro\n") and text.endswith("after\n")
    # The assumption-free figures first (no elastic job, rack and zone 1.0) ...
    assert (
        "| Philly (1,200 jobs; 4 x 8 GPUs) | aisched | 3.0 h | 2.0 h | 60 s / 3.0 h / - | 50.0% | 100.0% | 3.2"
        " | 0.10 | 0.00 |" in text
    )
    # ... then aisched with the assumptions, so its gain from them is not read as the rest of its gain.
    with_them = "\n|  | aisched, 50% of jobs elastic, rack 1.1x / zone 1.5x (assumed) | 90 min | 2.0 h |"
    assert with_them in text.split("| aisched |")[1]
    assert "|  | Kueue (BestEffortFIFO + TAS) |" in text
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_a_readme_without_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="trace-table"):
        trace_report.replace_between_markers("no markers", "table")


def test_the_committed_benchmark_page_shows_the_committed_figures() -> None:
    # The README links to docs/benchmarks.md for the figures; its table is the results', untouched by hand.
    page = (REPO_ROOT / trace_report.PAGE).read_text()
    table = trace_report.readme_table(trace_report.load_results(RESULTS_DIR))
    assert trace_report.replace_between_markers(page, table) == page
    assert f"]({trace_report.PAGE})" in (REPO_ROOT / "README.md").read_text()
