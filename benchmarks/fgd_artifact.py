"""FGD as its authors run it: their simulator, their configs, their analysis, beside our reimplementation.

The FGD paper's artifact (Weng et al., ATC 2023: hkust-adsl/kubernetes-scheduler-simulator)
ships its simulator (`bin/simon`, Go), the trace (`data/csv/`), the scripts that turn a pod
list into its input (`data/pod_csv_to_yaml.py`), that write a cluster and a scheduler config
per policy (`scripts/generate_config_and_run.py`) and that read its log
(`scripts/analysis.py`, `experiments/analysis/merge_alloc_discrete.py`). This module runs all
of them as the artifact's own run script does (`experiments/run_scripts/`: each policy's
flags, workload tuning 1.3, pods shuffled, the tuning seed as the seed), reads the log's
`[Alloc]` lines into the unallocated GPU share at 100% arrived load exactly as the authors'
merge script does, and runs aisched.sim.sharing's policy of the same name on the same node
and pod lists. Nothing of the artifact is copied here: its source directory, binary and
Python (which needs pandas and PyYAML) are options; `hack/build-fgd-simulator.sh` makes them.

The two simulators draw their arrivals with different generators, so seeds are not paired:
the figures compared are means over each side's seeds.

Usage: .venv/bin/python -m benchmarks.fgd_artifact [--policies FGD BestFit ...] [--seeds 42 43]
       [--pod-lists openb_pod_list_default ...] [--source DIR] [--binary PATH] [--python PATH]
       [--work-dir DIR] [--our-seeds 1 2 3] [--output PATH] [--update-results]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aisched.sim.sharing import read_nodes, read_tasks, simulate
from benchmarks.common import (
    InputError,
    add_output_arguments,
    provenance,
    require_files,
    run_reporting_input_errors,
    write_figures,
)

CACHE = Path.home() / ".cache" / "aisched" / "fgd-simulator"
NODE_LIST = "openb_node_list_gpu_node"
# The artifact's cached results: 10 seeds (42..51) of every policy on every pod list.
EXPECTED_RESULTS = Path("experiments/analysis/expected_results/analysis_allo_discrete.csv")
ARTIFACT_SEEDS = tuple(range(42, 52))
# The workload tuning of every experiment in the artifact's run script: pods are drawn up to
# 130% of the cluster's GPUs, so that the 100% arrived mark is reached.
TUNE_RATIO = "1.3"


@dataclass(frozen=True)
class ArtifactPolicy:
    """One policy as the artifact's run script starts it: its directory name and config flags."""

    directory: str  # the run script's policy directory, as the cached results name it
    flags: tuple[str, ...]  # generate_config_and_run.py's score and GPU-selection flags
    ours: str  # aisched.sim.sharing's policy of the same algorithm


# experiments/run_scripts/expected_run_scripts_0511.sh, one line per policy.
ARTIFACT_POLICIES: dict[str, ArtifactPolicy] = {
    "Random": ArtifactPolicy("01-Random", ("-Random", "1000", "-gpusel", "random"), "random_fit"),
    "DotProduct": ArtifactPolicy(
        "02-DotProd", ("-DotProd", "1000", "-gpusel", "best", "-dimext", "merge", "-norm", "max"), "dot_product"
    ),
    "GpuClustering": ArtifactPolicy("03-GpuClustering", ("-GpuClustering", "1000"), "gpu_clustering"),
    "GpuPacking": ArtifactPolicy("04-GpuPacking", ("-GpuPacking", "1000"), "gpu_packing"),
    "BestFit": ArtifactPolicy("05-BestFit", ("-BestFit", "1000"), "best_fit"),
    "FGD": ArtifactPolicy("06-FGD", ("-FGD", "1000", "-gpusel", "FGD", "-dimext", "share", "-norm", "max"), "fgd"),
}


@dataclass(frozen=True)
class Artifact:
    """Where the artifact is: its source (scripts, data), its binary, a Python for its scripts, and our work folder."""

    source: Path
    binary: Path
    python: Path
    work: Path


@dataclass(frozen=True)
class AllocSample:
    """One `[Alloc]` line of the simulator's log: GPU milli used and arrived, and the cluster's GPUs."""

    used_gpu_milli: int
    total_gpus: int
    arrived_gpu_milli: int


def parse_alloc_lines(lines: Iterable[str]) -> list[AllocSample]:
    """The `[Alloc]` samples of a simon log (the six-field form analysis.py reads; others skipped)."""
    samples = []
    for line in lines:
        if "[Alloc];" not in line:
            continue
        fields = line.split("[Alloc];", 1)[1].split(";")
        if len(fields) != 5:
            continue
        values = dict(field.split(":", 1) for field in fields)
        number = {key.strip(): int(value.strip().split("\\")[0].strip('"')) for key, value in values.items()}
        samples.append(AllocSample(number["Used GPU Milli"], number["Total GPUs"], number["Arrived GPU Milli"]))
    return samples


def allocated_percent_at(samples: Sequence[AllocSample], arrived_percent: int = 100) -> float | None:
    """The allocated GPU percentage at ARRIVED_PERCENT arrived, as merge_alloc_discrete.py computes it.

    Both ratios are percentages of the cluster's GPUs; the arrived one is rounded to an integer
    (Python's round, as pandas' `apply(round)` there), the allocated one to 2 decimals; the
    samples whose arrived percentage rounds to the mark are averaged, or, if none, those within
    one point of it. None if the run never got there.
    """

    def arrived(sample: AllocSample) -> float:
        return round(sample.arrived_gpu_milli / sample.total_gpus / 10, 0)

    def allocated(sample: AllocSample) -> float:
        return round(sample.used_gpu_milli / sample.total_gpus / 10, 2)

    at_mark = [allocated(s) for s in samples if arrived(s) == arrived_percent]
    if not at_mark:
        at_mark = [allocated(s) for s in samples if arrived_percent - 1 <= arrived(s) <= arrived_percent + 1]
    return round(statistics.fmean(at_mark), 2) if at_mark else None


def unallocated_share(log: Path) -> float:
    """The GPU share a finished simon run left unallocated at 100% arrived load (0..1)."""
    with log.open(errors="replace") as handle:
        allocated = allocated_percent_at(parse_alloc_lines(handle))
    if allocated is None:
        raise InputError(f"{log}: no [Alloc] line reaches 100% arrived load (did the run finish?)")
    return round((100.0 - allocated) / 100.0, 5)


def allocated_curve(samples: Sequence[AllocSample], step_percent: int = 2) -> list[list[float]]:
    """[arrived load, allocated share] every STEP_PERCENT of arrived load the run reached (shares 0..1).

    The marks of aisched.sim.sharing's `curve`, each read as merge_alloc_discrete.py reads 100%.
    """
    curve = []
    for mark in range(0, 131, step_percent):
        allocated = allocated_percent_at(samples, mark)
        if allocated is not None:
            curve.append([round(mark / 100, 2), round(allocated / 100, 5)])
    return curve


def mean_curve(curves: Sequence[Sequence[Sequence[float]]]) -> list[list[float]]:
    """The mean allocated share at each load mark that every one of CURVES has."""
    common = set.intersection(*({point[0] for point in curve} for curve in curves)) if curves else set()
    by_load = [{point[0]: point[1] for point in curve} for curve in curves]
    return [[load, round(statistics.fmean(c[load] for c in by_load), 5)] for load in sorted(common)]


def expected_unallocated(source: Path, pod_list: str, policy: str) -> dict[str, Any] | None:
    """The artifact's own cached figure (mean over its 10 seeds) for POD_LIST and POLICY, if it has one."""
    path = source / EXPECTED_RESULTS
    if not path.is_file():
        return None
    with path.open(newline="") as handle:
        rows = [
            row
            for row in csv.DictReader(handle)
            if row["workload"] == pod_list and row["sc_policy"] == ARTIFACT_POLICIES[policy].directory
        ]
    shares = {int(row["seed"]): round((100.0 - float(row["100"])) / 100.0, 5) for row in rows if row.get("100")}
    if not shares:
        return None
    return {"unallocated_gpu_share_at_full_load": round(statistics.fmean(shares.values()), 5), "per_seed": shares}


def prepare_input(source: Path, python: Path, work: Path, pod_list: str) -> Path:
    """The artifact's input folder for POD_LIST (its node YAML and the pod YAML its own script writes)."""
    folder = work / "inputs" / pod_list
    pods_yaml = folder / f"{pod_list}.yaml"
    if not pods_yaml.is_file():
        csv_path = source / "data" / "csv" / f"{pod_list}.csv"
        require_files([(csv_path, "--pod-lists (a name under SOURCE/data/csv)")])
        folder.parent.mkdir(parents=True, exist_ok=True)
        # The script writes STEM/STEM.yaml under its working directory.
        subprocess.run(
            [str(python), str(source / "data" / "pod_csv_to_yaml.py"), str(csv_path)], cwd=folder.parent, check=True
        )
    shutil.copy(source / "data" / "node_yaml" / f"{NODE_LIST}.yaml", folder)
    return folder


def run_finished(log: Path) -> bool:
    """Whether LOG is a whole simon run: `apply` ends by printing Success! or Failed! (pods left unscheduled)."""
    if not log.is_file():
        return False
    with log.open("rb") as handle:
        handle.seek(max(0, log.stat().st_size - 4096))
        tail = handle.read()
    return b"Success!" in tail or b"Failed!" in tail


def run_artifact(artifact: Artifact, pod_list: str, policy: str, seed: int) -> Path:
    """Run POLICY on POD_LIST with SEED in the artifact's simulator; the log's path (reused if complete)."""
    source, binary, python, work = artifact.source, artifact.binary, artifact.python, artifact.work
    experiment = work / pod_list / ARTIFACT_POLICIES[policy].directory / str(seed)
    log = experiment / "simon.log"
    if run_finished(log):
        return log
    inputs = prepare_input(source, python, work, pod_list)
    experiment.mkdir(parents=True, exist_ok=True)
    for old in experiment.glob("*.yaml"):
        old.unlink()
    # Without -e the artifact's script only writes the two configs; the binary is ours to point at.
    generate = [str(python), "scripts/generate_config_and_run.py", "-d", str(experiment), "-f", str(inputs)]
    options = ["-tune", TUNE_RATIO, "-tuneseed", str(seed), "--shuffle-pod=true"]
    subprocess.run([*generate, *ARTIFACT_POLICIES[policy].flags, *options], cwd=source, check=True, capture_output=True)
    (cluster_config,) = experiment.glob("cc_*.yaml")
    (scheduler_config,) = experiment.glob("sc_*.yaml")
    command = [str(binary), "apply", "--extended-resources", "gpu", "-f", str(cluster_config)]
    with log.open("wb") as out:
        # The working directory is the artifact's: its configs name paths relative to it.
        subprocess.run(
            [*command, "--default-scheduler-config", str(scheduler_config)],
            cwd=source,
            stdout=out,
            stderr=out,
            check=True,
        )
    return log


def _artifact_job(job: tuple[Artifact, str, str, int]) -> tuple[str, str, int, float, list[list[float]]]:
    artifact, pod_list, policy, seed = job
    log = run_artifact(artifact, pod_list, policy, seed)
    with log.open(errors="replace") as handle:
        curve = allocated_curve(parse_alloc_lines(handle))
    return pod_list, policy, seed, unallocated_share(log), curve


def _our_job(job: tuple[Path, Path, str, str, int]) -> tuple[str, str, int, float]:
    nodes, pods, pod_list, policy, seed = job
    run = simulate(read_nodes(nodes), read_tasks(pods), ARTIFACT_POLICIES[policy].ours, seed)
    return pod_list, policy, seed, round(run.unallocated_at_full_load, 5)


def side_by_side(
    artifact: dict[tuple[str, str], dict[int, float]],
    ours: dict[tuple[str, str], dict[int, float]],
    expected: dict[tuple[str, str], dict[str, Any] | None],
    curves: dict[tuple[str, str], list[list[list[float]]]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per pod list and policy: the artifact's figure (and mean curve), ours, and ours minus theirs (GPU share)."""
    table: dict[str, dict[str, Any]] = {}
    for (pod_list, policy), theirs in artifact.items():
        mine = ours[pod_list, policy]
        theirs_mean, mine_mean = statistics.fmean(theirs.values()), statistics.fmean(mine.values())
        table.setdefault(pod_list, {})[policy] = {
            "artifact": {
                "unallocated_gpu_share_at_full_load": round(theirs_mean, 5),
                "per_seed": theirs,
                "curve": mean_curve((curves or {}).get((pod_list, policy), [])),
            },
            "artifact_cached_results": expected[pod_list, policy],
            "ours": {
                "policy": ARTIFACT_POLICIES[policy].ours,
                "unallocated_gpu_share_at_full_load": round(mine_mean, 5),
                "per_seed": mine,
            },
            "gap": round(mine_mean - theirs_mean, 5),
            "ratio": round(mine_mean / theirs_mean, 4) if theirs_mean > 0 else None,
        }
    return table


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--source", type=Path, default=CACHE / "src", help="the artifact's source directory")
    parser.add_argument("--binary", type=Path, default=CACHE / "bin" / "simon", help="the artifact's simon binary")
    parser.add_argument(
        "--python", type=Path, default=CACHE / "pyenv" / "bin" / "python", help="a Python with pandas and PyYAML"
    )
    parser.add_argument("--work-dir", type=Path, default=CACHE / "runs", help="inputs, configs and logs go here")
    parser.add_argument("--pod-lists", nargs="+", default=["openb_pod_list_default"])
    parser.add_argument("--policies", nargs="+", default=["FGD"], choices=list(ARTIFACT_POLICIES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[42], help=f"artifact seeds ({ARTIFACT_SEEDS[0]}..)")
    parser.add_argument("--our-seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--workers", type=int, default=1, help="runs at once (one simon run takes ~10 min)")
    add_output_arguments(parser, "fgd_artifact.json")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    source, work = args.source.resolve(), args.work_dir.resolve()
    # A venv's python is a symlink: resolving it would leave the venv and its packages.
    binary, python = args.binary.resolve(), args.python.absolute()
    nodes = source / "data" / "csv" / f"{NODE_LIST}.csv"
    require_files([(binary, "--binary"), (python, "--python"), (nodes, "--source")])
    pod_paths = {name: source / "data" / "csv" / f"{name}.csv" for name in args.pod_lists}
    require_files([(path, "--pod-lists (a name under SOURCE/data/csv)") for path in pod_paths.values()])
    for name in args.pod_lists:
        prepare_input(source, python, work, name)  # once, before the runs share the folder
    cells = [(name, policy) for name in args.pod_lists for policy in args.policies]
    setup = Artifact(source, binary, python, work)
    artifact_jobs = [(setup, n, p, s) for n, p in cells for s in args.seeds]
    our_jobs = [(nodes, pod_paths[n], n, p, s) for n, p in cells for s in args.our_seeds]
    artifact: dict[tuple[str, str], dict[int, float]] = {cell: {} for cell in cells}
    ours: dict[tuple[str, str], dict[int, float]] = {cell: {} for cell in cells}
    curves: dict[tuple[str, str], list[list[list[float]]]] = {cell: [] for cell in cells}
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for name, policy, seed, share, curve in pool.map(_artifact_job, artifact_jobs):
            artifact[name, policy][seed] = share
            curves[name, policy].append(curve)
            print(f"artifact {name} {policy} seed {seed}: unallocated {share:.4f}", flush=True)
        for name, policy, seed, share in pool.map(_our_job, our_jobs):
            ours[name, policy][seed] = share
            print(f"ours     {name} {policy} seed {seed}: unallocated {share:.4f}", flush=True)
    expected = {(name, policy): expected_unallocated(source, name, policy) for name, policy in cells}
    figures: dict[str, Any] = {
        "artifact": "hkust-adsl/kubernetes-scheduler-simulator (bin/simon), its run script's configs",
        "nodes": f"{NODE_LIST}.csv",
        "definition": "100% minus merge_alloc_discrete.py's allocated GPU % at 100% arrived GPU load",
        "tune_ratio": float(TUNE_RATIO),
        "seeds": {"artifact": args.seeds, "ours": args.our_seeds},
        "pod_lists": side_by_side(artifact, ours, expected, curves),
        "provenance": provenance(),
    }
    for name, row in figures["pod_lists"].items():
        for policy, cell in row.items():
            print(
                f"{name} {policy:14} artifact {cell['artifact']['unallocated_gpu_share_at_full_load']:.4f}"
                f"  ours {cell['ours']['unallocated_gpu_share_at_full_load']:.4f}  gap {cell['gap']:+.4f}"
            )
    write_figures(figures, args.output, args.update_results, "fgd_artifact.json")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_reporting_input_errors(run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
