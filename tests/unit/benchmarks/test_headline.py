"""benchmarks/headline.py: the table the benchmark page opens with is the committed results'."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import fleet_report, headline
from benchmarks.common import REPO_ROOT, RESULTS_DIR
from benchmarks.trace_report import BEGIN, PAGE, replace_between_markers


def jct(avg: float) -> dict[str, float]:
    return {"avg_jct_s": avg}


def test_rows_come_from_the_figures_and_the_assumption_free_ratio_is_the_headline(tmp_path: Path) -> None:
    trace = {
        "variants": {
            "no_elastic": {
                "policies": {"aisched": jct(9000.0), "tiresias": jct(10_000.0)},
                "best_peer": "tiresias",
                "ratio_vs_best_peer": 0.9,
            },
            "elastic": {
                "options": {"elastic_share": 0.5, "rack_factor": 1.1, "zone_factor": 1.5},
                "best_peer": "tiresias",
                "ratio_vs_best_peer": 0.8,
            },
        }
    }
    (tmp_path / "trace_philly.json").write_text(json.dumps(trace))
    arms = {
        "aisched_karpenter": {"gpu_hours_cost": 70.0, "avg_jct_s": 3600.0},
        "gang_karpenter": {"gpu_hours_cost": 100.0, "avg_jct_s": 4000.0},
    }
    fleet = {"options": {"spot_price_ratio": 0.4}, "traces": {"philly": {"arms": arms, "variants": {}}}}
    (tmp_path / "fleet.json").write_text(json.dumps(fleet))
    table = headline.headline_table(tmp_path)
    (philly, ship) = table.splitlines()[2:]
    assert "| 2.5 h | 2.8 h: Tiresias (2D-LAS), the best peer |" in philly
    assert "| 0.800x (50% elastic, rack 1.1x, zone 1.5x; best peer Tiresias (2D-LAS)) | **0.900x**" in philly
    assert "| $70 (60 min) | $100 (67 min) |" in ship and "| 0.700x (spot 0.4x" in ship and "JCT 0.900x" in ship
    assert ship.endswith("| **-** |")  # no run with spot priced as on-demand: said, not made up


def test_the_committed_page_opens_with_the_committed_figures() -> None:
    page = (REPO_ROOT / PAGE).read_text()
    table = headline.headline_table(RESULTS_DIR)
    assert replace_between_markers(page, table, begin=headline.BEGIN, end=headline.END) == page
    assert page.index(headline.BEGIN) < page.index(BEGIN)  # it opens the page: before every other table


def test_the_fleet_page_holds_the_committed_fleet_figures() -> None:
    page = (REPO_ROOT / fleet_report.PAGE).read_text()
    tables = fleet_report.fleet_tables(json.loads((RESULTS_DIR / "fleet.json").read_text()))
    assert replace_between_markers(page, tables, begin=fleet_report.BEGIN, end=fleet_report.END) == page


def test_the_workloads_and_serving_rows_say_what_the_peer_ran_and_what_it_was_told(tmp_path: Path) -> None:
    workloads = {
        "aisched_pods_per_s": 30.0,
        "kueue_pods_per_s": 15.0,
        "kube_scheduler_pods_per_s": 60.0,
        "gangs_whole": {"aisched": 1.0},
        "kueue": {"version": "v9.9.9"},
    }
    (tmp_path / "workloads.json").write_text(json.dumps(workloads))
    serving = {
        "policies": {
            "aisched": {"gpu_hours": 9.0, "slo_attainment": 0.98},
            "static_peak": {"gpu_hours": 10.0, "slo_attainment": 0.995},
        },
        "targets": {"attainment_at_least": 0.99, "cheapest_peer_at_target": "static_peak"},
        "knew": {"static_peak": "the trace's peak (the future)"},
    }
    (tmp_path / "serving.json").write_text(json.dumps(serving))
    (jobs, llm) = headline.headline_table(tmp_path).splitlines()[2:]
    assert "| 30.0 | 15.0: Kueue with TAS | its own code (v9.9.9) | 0.500x of kube-scheduler alone" in jobs
    assert jobs.endswith("| **2.000x** |")
    assert "static_peak, the cheapest arm within 99% (told the trace's peak (the future))" in llm
    assert llm.endswith("| **0.900x** at 98.00% (short of 99%) |")  # cheaper, but not within the objective
