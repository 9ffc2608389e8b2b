"""The table docs/benchmarks.md opens with: each headline figure beside its peer's, read from the results.

`python -m benchmarks.headline` rewrites the part of docs/benchmarks.md between
`<!-- headline:begin -->` and `<!-- headline:end -->`; the benchmarks tier checks that the page
holds what the committed JSON says (tests/unit/benchmarks/test_headline.py). Each row: our
figure, the peer's (and whether it is the peer's own code or our reimplementation), the ratio
with the benchmark's assumptions, and the ratio without them, the headline. A results file
that is missing, or lacks the keys a row is read by, leaves its row out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aisched.testing.versions import pinned_version
from benchmarks.common import REPO_ROOT, RESULTS_DIR
from benchmarks.trace_report import PAGE, POLICY_TITLES, TRACE_TITLES, duration_words, replace_between_markers

BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"
HEADER = (
    "| benchmark | measure | aisched | peer | peer run as | ratio with the assumptions | "
    "assumption-free ratio |\n|---|---|---|---|---|---|---|"
)
REIMPLEMENTED = "our reimplementation (aisched/sim/peers)"
FLEET_PEER = "gang scheduler + Karpenter, MostAllocated (our model, aisched/sim/fleet/gang_karpenter.py)"


def _load(directory: Path, name: str) -> dict[str, Any] | None:
    path = directory / name
    return json.loads(path.read_text()) if path.is_file() else None


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def trace_rows(directory: Path) -> list[str]:
    rows = []
    for name, title in TRACE_TITLES.items():
        figures = _load(directory, f"trace_{name}.json")
        variants = (figures or {}).get("variants", {})
        free, assumed = variants.get("no_elastic", {}), variants.get("elastic", {})
        if "ratio_vs_best_peer" not in free:
            continue
        peer = free["best_peer"]
        ours, theirs = free["policies"]["aisched"]["avg_jct_s"], free["policies"][peer]["avg_jct_s"]
        options = assumed.get("options", {})
        with_them = (
            f"{_ratio(assumed.get('ratio_vs_best_peer'))} ({options.get('elastic_share', 0):.0%} elastic, "
            f"rack {options.get('rack_factor', 1):g}x, zone {options.get('zone_factor', 1):g}x; "
            f"best peer {POLICY_TITLES.get(assumed.get('best_peer', ''), assumed.get('best_peer', '-'))})"
        )
        rows.append(
            f"| trace: {title} | average JCT (lower is better) | {duration_words(ours)} "
            f"| {duration_words(theirs)}: {POLICY_TITLES.get(peer, peer)}, the best peer | {REIMPLEMENTED} "
            f"| {with_them} | **{_ratio(free['ratio_vs_best_peer'])}** (no elastic job, rack and zone 1.0) |"
        )
    return rows


def fleet_rows(directory: Path) -> list[str]:
    results = _load(directory, "fleet.json") or {}
    rows = []
    price = results.get("options", {}).get("spot_price_ratio")
    for name, trace in results.get("traces", {}).items():
        arms = trace.get("arms", {})
        if "gang_karpenter" not in arms or "aisched_karpenter" not in arms:
            continue
        ours, peer = arms["aisched_karpenter"], arms["gang_karpenter"]
        flat = trace.get("variants", {}).get("spot_price_1", {})
        free = (
            _ratio(flat["aisched_karpenter"]["gpu_hours_cost"] / flat["gang_karpenter"]["gpu_hours_cost"])
            + f" (spot priced as on-demand; JCT {_ratio(_jct(flat))})"
            if "aisched_karpenter" in flat and "gang_karpenter" in flat
            else "-"
        )
        rows.append(
            f"| fleet: {name} | money paid (avg JCT) | ${ours['gpu_hours_cost']:,.0f} "
            f"({duration_words(ours['avg_jct_s'])}) | ${peer['gpu_hours_cost']:,.0f} "
            f"({duration_words(peer['avg_jct_s'])}) | {FLEET_PEER} "
            f"| {_ratio(ours['gpu_hours_cost'] / peer['gpu_hours_cost'])} (spot {price:g}x on-demand, V100 "
            f"availability; JCT {_ratio(_jct(arms))}) | **{free}** |"
        )
    return rows


def _jct(arms: Mapping[str, Mapping[str, Any]]) -> float:
    return float(arms["aisched_karpenter"]["avg_jct_s"]) / float(arms["gang_karpenter"]["avg_jct_s"])


def spot_rows(directory: Path) -> list[str]:
    results = _load(directory, "spot.json") or {}
    policies = results.get("policies", {})
    if "aisched" not in policies or "uniform_progress" not in policies:
        return []
    ours, peer = policies["aisched"], policies["uniform_progress"]
    truth = results.get("with_true_durations", {}).get("policies", {})
    told = (
        f"{_ratio(truth['aisched']['cost_vs_on_demand'] / truth['uniform_progress']['cost_vs_on_demand'])}"
        f" told true durations ({truth['aisched']['deadline_misses']} / "
        f"{truth['uniform_progress']['deadline_misses']} misses)"
        if "aisched" in truth and "uniform_progress" in truth
        else "-"
    )
    parameters = results.get("parameters", {})
    price, told_as = parameters.get("price_ratio", 0), parameters.get("duration_knowledge", "truth")
    known = "with users' estimates" if told_as == "estimate" else "told true durations"
    return [
        f"| spot | cost / always on-demand (deadline misses) | {ours['cost_vs_on_demand']:.3f} "
        f"({ours['deadline_misses']}) | {peer['cost_vs_on_demand']:.3f} ({peer['deadline_misses']}): Uniform "
        f"Progress | our reimplementation from the paper (aisched/sim/spot/policies.py) "
        f"| {told} | **{_ratio(ours['cost_vs_on_demand'] / peer['cost_vs_on_demand'])}** {known} "
        f"(every figure assumes spot at {price:g}x on-demand) |"
    ]


def gpu_sharing_rows(directory: Path) -> list[str]:
    results = _load(directory, "gpu_sharing.json") or {}
    policies = results.get("policies", {})
    artifact = policies.get("fgd_artifact", {}).get("unallocated_gpu_share_at_full_load")
    ours = policies.get("aisched", {}).get("unallocated_gpu_share_at_full_load")
    if artifact is None or ours is None:
        return []
    return [
        f"| GPU sharing | GPUs left unallocated at full load | {ours:.2%} | {artifact:.2%}: FGD "
        f"| its authors' simulator | - | **{_ratio(ours / artifact)}** |"
    ]


def mig_rows(directory: Path) -> list[str]:
    mig = (_load(directory, "gpu_sharing.json") or {}).get("mig", {})
    ours, fitted = mig.get("aisched_jobs_admitted"), mig.get("fitted_static_jobs_admitted")
    if ours is None or fitted is None:
        return []
    return [
        f"| MIG | jobs admitted (higher is better) | {ours:,.0f} | {fitted:,.0f}: a static partition fitted to a "
        f"past window | our model (aisched/sim/mig.py) | - | **{_ratio(ours / fitted)}** |"
    ]


def workloads_rows(directory: Path) -> list[str]:
    results = _load(directory, "workloads.json") or {}
    ours, kueue = results.get("aisched_pods_per_s"), results.get("kueue_pods_per_s")
    if not ours or not kueue:
        return []
    bare = results.get("kube_scheduler_pods_per_s")
    beside = f"{_ratio(ours / bare)} of kube-scheduler alone ({bare:.1f}/s, no gangs)" if bare else "-"
    whole = results.get("gangs_whole", {}).get("aisched")
    return [
        f"| workloads: Indexed Jobs, 1,008 nodes | pods bound per second (gangs whole: {whole:.0%}) | {ours:.1f} "
        f"| {kueue:.1f}: Kueue with TAS | its own code (v{_kueue_version(results)}) | {beside} "
        f"| **{_ratio(ours / kueue)}** |"
    ]


def _kueue_version(results: Mapping[str, Any]) -> str:
    """The Kueue the arm ran: the results' own word, else the version the build pins (hack/versions.env)."""
    version = results.get("kueue", {}).get("version")
    return str(version or pinned_version("KUEUE_VERSION")).strip().lstrip("v")


def serving_rows(directory: Path) -> list[str]:
    results = _load(directory, "serving.json") or {}
    policies, targets = results.get("policies", {}), results.get("targets", {})
    ours, peer = policies.get("aisched"), targets.get("cheapest_peer_at_target")
    if ours is None or peer not in policies:
        return []
    theirs = policies[peer]
    short = "" if ours["slo_attainment"] >= targets.get("attainment_at_least", 0) else " (short of 99%)"
    return [
        f"| serving: Azure LLM traces | GPU-hours (share of requests within TTFT and TPOT) "
        f"| {ours['gpu_hours']:.1f} ({ours['slo_attainment']:.2%}) | {theirs['gpu_hours']:.1f} "
        f"({theirs['slo_attainment']:.2%}): {peer}, the cheapest arm within 99%{_told(results, peer)} "
        f"| our model (aisched/sim/llm) | - | **{_ratio(ours['gpu_hours'] / theirs['gpu_hours'])}** at "
        f"{ours['slo_attainment']:.2%}{short} |"
    ]


def _told(results: Mapping[str, Any], arm: str) -> str:
    """What an arm knew that a real autoscaler could not, where the results say so (the future)."""
    knew = str(results.get("knew", {}).get(arm, ""))
    return f" (told {knew})" if "future" in knew else ""


def headline_table(directory: Path = RESULTS_DIR) -> str:
    rows = [
        *trace_rows(directory),
        *fleet_rows(directory),
        *spot_rows(directory),
        *gpu_sharing_rows(directory),
        *mig_rows(directory),
        *workloads_rows(directory),
        *serving_rows(directory),
    ]
    return "\n".join([HEADER, *rows])


def refresh(results_dir: Path = RESULTS_DIR, page: Path = REPO_ROOT / PAGE) -> None:
    page.write_text(replace_between_markers(page.read_text(), headline_table(results_dir), begin=BEGIN, end=END))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--page", type=Path, default=REPO_ROOT / PAGE)
    args = parser.parse_args(argv)
    try:
        refresh(args.results_dir, args.page)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote the headline table of {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
