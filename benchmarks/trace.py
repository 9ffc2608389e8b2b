"""Simulator benchmark: aisched against Kueue, Volcano, Tiresias, FIFO + first fit and FIFO + kube-scheduler
spread, on public traces, where placement matters and no scheduler knows durations.

Runs `aisched.sim.simulate` (the operator's own scheduling code on a simulated clock) on three
traces, every policy on the same jobs and the same cluster:

- philly: Microsoft Philly (2017); a trace's sparse opening ramp is skipped (found in the file, not
  fitted to one: aisched.sim.traces.ramp_length; the shared file's is 71 jobs over 20 days; or
  `--philly-skip N`), then `--philly-limit` jobs (4,000) are taken with their real arrivals and
  durations.
- alibaba: Alibaba GPU v2023 `openb_pod_list_default.csv`, the first `--alibaba-limit` (3,000) GPU
  pods that ran, with their real creation times and run times.

Both are capped, and the JSON says so, to keep a run to minutes on one core: every policy and
variant replays every job, and the queues the schedulers walk grow with the trace.
- pollux: the four Pollux workloads back to back (each 8 hours of arrivals, `--pollux-gap` apart),
  models as named; their durations are synthesised (the files have none, see aisched.sim.traces).

Cluster: nodes of 8 GPUs, racks of 8 nodes, 3 racks per zone; as many nodes as make the trace's
offered load (GPU-time asked per second between first and last arrival) `--load` of the cluster,
so that queueing happens (the traces' own clusters were sized for their peaks: Alibaba's pods
never use more than 70 GPUs at once, and on 48 nodes nothing would ever wait).

Jobs run slower when spread, by their model's measured Pollux factor (aisched.sim.speed); jobs of
traces naming no model get one from a seeded uniform mix. Rack and zone factors are assumptions.
Nobody is told durations; `variants.aisched_true_durations` is aisched told the truth (not a
bound: its backfill and time-slicing may do worse with it on some traces).

The headline is the assumption-free figure, `variants.no_elastic` (and `headline`): no elastic
job and rack and zone factors 1.0, aisched's average JCT over the best peer's
(`ratio_vs_best_peer`). Beside it, each assumption's effect: `variants.elastic` (the main run:
elastic jobs and rack 1.1 / zone 1.5), `variants.no_elastic_rack_zone_assumed`,
`variants.elastic_rack_zone_1`. `knew` says what each policy was told, `provenance` the commit.

Elastic jobs: no trace says which jobs could change size, so `--elastic-share` (0.5) of all jobs,
seeded, may run on half to twice their replicas (aisched.sim.jobs). Only aisched resizes them; the
peers run every job at its requested size. A resized job trains at the pace the Pollux step times
give for its new size (aisched.sim.scaling), of which only `--growth-efficiency` (0.5, assumed) of
any gain counts as progress, and pays the restart overhead each time. So that elasticity is not
taken for the rest of aisched's gain, the headline has no elastic job (`variants.no_elastic`:
aisched replayed again; the peers, which never resize, unchanged), and aisched's figures are also
given at growth efficiency 0.25 (`variants.pessimistic_growth`).

Figures go to trace_<name>.json in --output-dir, and into benchmarks/results/ with --update-results.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from aisched.sim.clusters import GridSpec, generated_cluster, sized_to_load
from aisched.sim.command import ProgressLine
from aisched.sim.engine import POLICIES, SimOptions, SimulationReport, simulate
from aisched.sim.jobs import DurationKnowledge
from aisched.sim.report import render_report
from aisched.sim.scaling import DEFAULT_GROWTH_EFFICIENCY, PESSIMISTIC_GROWTH_EFFICIENCY, ScalingModel, efficiencies
from aisched.sim.speed import SpeedModel, cross_node_factors
from aisched.sim.traces import TraceJob, offered_gpus, ramp_length, read_trace
from benchmarks import headline, trace_report
from benchmarks.common import (
    REPO_ROOT,
    RESULTS_DIR,
    SHARED_DATA,
    InputError,
    provenance,
    require_files,
    run_reporting_input_errors,
)

PHILLY = Path("traces/philly/philly-2017-09-04_2017-10-20.csv")
ALIBABA = Path("traces/alibaba-gpu-v2023/openb_pod_list_default.csv")
POLLUX = tuple(Path(f"traces/pollux/workload-{i}.csv") for i in range(1, 5))
PLACEMENT = Path("placement/pollux")
AUTO = "auto"
NODE_SHAPE = GridSpec(nodes=1, gpus_per_node=8, nodes_per_rack=8, racks_per_zone=3)
TRACES = ("philly", "alibaba", "pollux")
Measured = tuple[dict[str, float], dict[str, dict[int, float]]]
"""Each model's cross-node factor and per-GPU efficiency curve, from the Pollux placement CSVs."""
DEFAULT_ELASTIC_SHARE = 0.5


CAPPED = (
    "capped to the first {limit:,} jobs by arrival to keep the run to minutes on one core: every policy, "
    "and the variants, replay each job, and the schedulers' queues grow with the trace"
)


def load_trace(name: str, args: argparse.Namespace) -> tuple[list[TraceJob], dict[str, Any]]:
    """The trace's jobs and how they were taken (written into the results)."""
    if name == "philly":
        jobs, skip, how = philly_slice(args.philly, args.philly_skip, args.philly_limit)
        taken = {"file": shown_path(args.philly), "skip": skip, "skipped": how, "limit": args.philly_limit}
        return jobs, taken | {"times": "real"} | _capped(args.philly_limit, len(jobs))
    if name == "alibaba":
        jobs = read_trace(args.alibaba, limit=args.alibaba_limit)
        taken = {"file": shown_path(args.alibaba), "limit": args.alibaba_limit, "times": "real"}
        return jobs, taken | _capped(args.alibaba_limit, len(jobs))
    jobs = []
    for index, path in enumerate(args.pollux):
        offset = index * args.pollux_gap
        for job in read_trace(path, seed=args.seed + index):
            jobs.append(replace(job, key=f"{job.key}@{index + 1}", arrival=job.arrival + offset))
    jobs.sort(key=lambda j: (j.arrival, j.key))
    taken = {
        "files": [shown_path(p) for p in args.pollux],
        "gap_s": args.pollux_gap,
        "times": "real arrivals; durations synthesised (log-normal, seeded): the workloads carry none",
    }
    return jobs, taken


def philly_slice(path: Path, skip: str, limit: int | None) -> tuple[list[TraceJob], int, str]:
    """`limit` jobs of a Philly trace after its first `skip` (AUTO: its opening ramp), from 0 s;
    the skip taken, and how it was chosen (for the results)."""
    whole = read_trace(path)
    count = ramp_length(whole) if skip == AUTO else int(skip)
    end = None if limit is None else count + limit
    start = whole[count].arrival if count < len(whole) else 0.0
    jobs = [replace(j, arrival=j.arrival - start) for j in whole[count:end]]
    how = f"its opening ramp (aisched.sim.traces.ramp_length: {count} jobs)" if skip == AUTO else "--philly-skip"
    return jobs, count, how


def _capped(limit: int | None, taken: int) -> dict[str, str]:
    """The note the results carry when the limit cut the trace short."""
    return {"capped": CAPPED.format(limit=limit)} if limit is not None and taken >= limit else {}


def run_trace(name: str, args: argparse.Namespace, measured: Measured) -> dict[str, Any]:
    started = time.monotonic()
    jobs, taken = load_trace(name, args)
    offered = offered_gpus(jobs)
    grid = sized_to_load(offered, max((j.gpus for j in jobs), default=1), args.load, NODE_SHAPE)
    nodes = generated_cluster(grid)
    factors, curves = measured
    options = SimOptions(
        speed=SpeedModel(factors),
        scaling=ScalingModel(curves, growth_efficiency=args.growth_efficiency),
        elastic_share=args.elastic_share,
        seed=args.seed,
        gpus_per_pod=args.gpus_per_pod,
    )
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    report = simulate(jobs, nodes, trace_name=name, policies=policies, options=options, progress=_progress())
    print(render_report(report), flush=True)
    figures = report.to_json()
    figures["slice"] = taken
    figures["cluster"]["sized"] = (
        f"{grid.nodes} nodes x {grid.gpus_per_node} GPUs: the trace offers {offered:.1f} GPUs on average "
        f"between its first and last arrival, {args.load:.0%} of the cluster"
    )
    flat = replace(options, speed=SpeedModel(factors, rack_factor=1.0, zone_factor=1.0))
    told = replace(options, knowledge=DurationKnowledge.TRUTH)
    fixed = replace(options, elastic_share=0.0)
    fixed_flat = replace(flat, elastic_share=0.0)
    pessimistic = replace(options, scaling=replace(options.scaling, growth_efficiency=PESSIMISTIC_GROWTH_EFFICIENCY))
    resizing = [p for p in policies if p == "aisched"]
    flat_report = simulate(jobs, nodes, trace_name=name, policies=policies, options=flat)
    figures["variants"] = {
        # The headline: no elastic job, no rack or zone factor; the peers never resize, so their
        # figures are those of the same world with elastic jobs (tests/unit/sim check it).
        "no_elastic": _brief(_with_peers(simulate(jobs, nodes, policies=resizing, options=fixed_flat), flat_report)),
        "elastic": _brief(report),
        "no_elastic_rack_zone_assumed": _brief(
            _with_peers(simulate(jobs, nodes, policies=resizing, options=fixed), report)
        ),
        "elastic_rack_zone_1": _brief(flat_report),
        "pessimistic_growth": _brief(simulate(jobs, nodes, policies=resizing, options=pessimistic)),
        "aisched_true_durations": _brief(simulate(jobs, nodes, trace_name=name, policies=resizing, options=told)),
    }
    for variant in figures["variants"].values():
        variant.update(best_peer_ratio(variant["policies"]))
    figures["headline"] = {
        "variant": "no_elastic",
        "ratio_vs_best_peer": figures["variants"]["no_elastic"].get("ratio_vs_best_peer"),
        "best_peer": figures["variants"]["no_elastic"].get("best_peer"),
        "elastic_ratio_vs_best_peer": figures["variants"]["elastic"].get("ratio_vs_best_peer"),
    }
    figures["knew"] = {p: _knew(p, options) for p in policies}
    figures["provenance"] = provenance()
    figures["jct_samples_s"] = {p: _sample(r.jcts) for p, r in report.policies.items()}
    figures["wall_seconds"] = round(time.monotonic() - started, 1)
    print(f"{name}: {figures['wall_seconds']} s\n", flush=True)
    return figures


def best_peer_ratio(policies: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """aisched's average JCT over the best peer's (the lowest), and which peer that is."""
    peers = {p: f["avg_jct_s"] for p, f in policies.items() if p != "aisched" and f.get("avg_jct_s")}
    if "aisched" not in policies or not peers:
        return {}
    best = min(peers, key=lambda p: (peers[p], p))
    return {"best_peer": best, "ratio_vs_best_peer": round(policies["aisched"]["avg_jct_s"] / peers[best], 4)}


def _knew(policy: str, options: SimOptions) -> dict[str, Any]:
    """What POLICY was told in the main run (the variants' options say what changes in each)."""
    return {
        "durations": options.knowledge.value if policy == "aisched" else "none",
        "future_arrivals": False,
        "elasticity": policy == "aisched" and options.elastic_share > 0,
        "topology": policy in ("aisched", "kueue", "volcano"),
    }


def _with_peers(report: SimulationReport, peers: SimulationReport) -> SimulationReport:
    """`report` (aisched's run) with the peers' figures of `peers`: the peers never resize a job, so
    which jobs are elastic does not change a thing they do (tests/unit/sim check it), and they are
    not replayed again."""
    merged = dict(report.policies)
    for name, figures in peers.policies.items():
        merged.setdefault(name, figures)
    return replace(report, policies={name: merged[name] for name in peers.policies})


def _brief(report: SimulationReport) -> dict[str, Any]:
    keys = (
        "avg_jct_s",
        "p95_jct_s",
        "avg_jct_by_size_s",
        "effective_utilization",
        "in_smallest_domain",
        "p99_slowdown",
        "preemptions_per_job",
        "resizes_per_job",
    )
    return {
        "options": report.options.to_json(),
        "policies": {p: {k: v for k, v in r.to_json().items() if k in keys} for p, r in report.policies.items()},
    }


def _sample(jcts: Sequence[float], points: int = 200) -> list[float]:
    """`points` quantiles of the sorted JCTs: enough to draw their distribution."""
    if not jcts:
        return []
    return [round(jcts[min(len(jcts) - 1, i * len(jcts) // points)], 1) for i in range(points)] + [round(jcts[-1], 1)]


def _progress() -> ProgressLine | None:
    return ProgressLine(sys.stderr) if sys.stderr.isatty() else None


def add_philly_skip_argument(parser: argparse.ArgumentParser) -> None:
    def skip(text: str) -> str:
        if text != AUTO and not (text.isdigit()):
            raise argparse.ArgumentTypeError(f"{text!r}: a count of jobs, or {AUTO}")
        return text

    parser.add_argument(
        "--philly-skip",
        type=skip,
        default=AUTO,
        help="Philly jobs to skip first (default: auto, the trace's opening ramp, whatever the file)",
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA, help="where the default inputs are")
    parser.add_argument("--philly", type=Path, help=f"the Philly trace (default: data-dir/{PHILLY})")
    parser.add_argument("--alibaba", type=Path, help=f"an Alibaba pod list with times (default: data-dir/{ALIBABA})")
    parser.add_argument("--pollux", type=Path, nargs="+", help="Pollux workloads (default: data-dir/traces/pollux)")
    parser.add_argument("--placement", type=Path, help=f"Pollux placement CSVs (default: data-dir/{PLACEMENT})")
    parser.add_argument("--traces", default=",".join(TRACES), help=f"comma-separated, of {', '.join(TRACES)}")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--philly-limit", type=int, default=4000, help="Philly jobs after the ramp")
    add_philly_skip_argument(parser)
    parser.add_argument("--alibaba-limit", type=int, default=3000, help="pods by arrival (of 6,203 that ran)")
    parser.add_argument("--pollux-gap", type=float, default=8 * 3600.0, help="seconds between workloads")
    parser.add_argument("--load", type=float, default=0.9, help="the trace's offered load over the cluster's GPUs")
    parser.add_argument("--gpus-per-pod", type=int, default=4, help="largest pod of a job")
    parser.add_argument(
        "--elastic-share",
        type=float,
        default=DEFAULT_ELASTIC_SHARE,
        help="share of jobs aisched may resize (assumed; see aisched.sim.jobs); variants.no_elastic has none",
    )
    parser.add_argument(
        "--growth-efficiency",
        type=float,
        default=DEFAULT_GROWTH_EFFICIENCY,
        help=f"share of extra throughput that is progress (assumed); variants.pessimistic_growth: "
        f"{PESSIMISTIC_GROWTH_EFFICIENCY}",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="500 jobs of Philly and Alibaba: seconds, not minutes")
    parser.add_argument("--output-dir", type=Path, help="write trace_<name>.json here")
    parser.add_argument("--update-results", action="store_true", help="write them into benchmarks/results/ too")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.philly_limit = min(args.philly_limit, 500)
        args.alibaba_limit = min(args.alibaba_limit or 500, 500)
    args.philly = args.philly or args.data_dir / PHILLY
    args.alibaba = args.alibaba or args.data_dir / ALIBABA
    args.pollux = args.pollux or [args.data_dir / p for p in POLLUX]
    placement = args.placement or args.data_dir / PLACEMENT
    traces = [t.strip() for t in args.traces.split(",") if t.strip()]
    unknown = sorted(set(traces) - set(TRACES))
    if unknown:
        raise ValueError(f"unknown trace {', '.join(unknown)}; known: {', '.join(TRACES)}")
    if not placement.is_dir():
        raise InputError(f"{placement}: no such directory (set it with --placement or --data-dir)")
    needed = [(args.philly, "--philly or --data-dir")] if "philly" in traces else []
    needed += [(args.alibaba, "--alibaba or --data-dir")] if "alibaba" in traces else []
    needed += [(p, "--pollux or --data-dir") for p in args.pollux] if "pollux" in traces else []
    require_files(needed)
    measured = (cross_node_factors(placement), efficiencies(placement))
    directories = [d for d in (args.output_dir, RESULTS_DIR if args.update_results else None) if d is not None]
    for name in traces:
        figures = run_trace(name, args, measured)
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / f"trace_{name}.json").write_text(json.dumps(figures, indent=2) + "\n")
            print(f"{name}: wrote {directory / f'trace_{name}.json'}", flush=True)
    if args.update_results:
        trace_report.refresh(RESULTS_DIR, REPO_ROOT / trace_report.PAGE, REPO_ROOT / trace_report.PLOT)
        headline.refresh()
        print(f"rewrote the table of {trace_report.PAGE} and {trace_report.PLOT}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


def shown_path(path: Path) -> str:
    """The path relative to the repository when it can be (results name the data, not this machine)."""
    for candidate in (path.absolute(), path.resolve()):  # ../shared may be a link
        if candidate.is_relative_to(REPO_ROOT.parent):
            return str(Path("..") / candidate.relative_to(REPO_ROOT.parent))
    return str(path)


if __name__ == "__main__":
    sys.exit(main())
