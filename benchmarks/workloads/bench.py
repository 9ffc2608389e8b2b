"""End to end on the `large` local cluster: plain `batch/v1` Indexed Jobs (a seeded gang mix) admitted
and placed by aisched, by Kueue with Topology-Aware Scheduling, and bound by kube-scheduler alone.

Setup: `hack/cluster.sh up large` (1,008 KWOK nodes x 8 GPUs; `--nodes N` renders a cluster of N
nodes in racks of 24 for a smoke run) in a temporary state directory on free ports, torn down at
the end; `--cluster-dir` uses a running cluster instead. Every arm submits the same `--jobs` Indexed
Jobs (parallelism = completions = the gang's pods, each pod asking its GPUs, annotated
`aisched.io/kwok-keep-running` so that KWOK keeps it Running and its GPUs held) from `--concurrency`
client threads; the namespace is drained between arms.

Arm aisched: the Jobs labelled `scheduling.aisched.io/queue`, the chart's workload admission policies
in force in the benchmark namespace (aisched.testing.workload_policies, the benchmark's
identity playing the operator's), the operator run as users run it (`aisched run --standalone`,
default settings). Arm kueue: Kueue v0.17.0 out of cluster (benchmarks/workloads/kueue.py: its
default Configuration, its webhooks served), a Topology of zone / rack / node, a TAS
ResourceFlavor, a ClusterQueue with the cluster's GPUs and a LocalQueue; the Jobs labelled
`kueue.x-k8s.io/queue-name`, their pod template preferring a rack
(`kueue.x-k8s.io/podset-preferred-topology`); Kueue's Job webhook suspends them at creation.
Arm kube_scheduler: the Jobs unlabelled: no admission, no gang.

Measured per pod from one watch per arm: its Job's create request until the watch first shows the
pod's spec.nodeName. Figures per arm: pods bound per second (pods / (last bind - first
submission)), p50 / p99 of submit-to-bind, gangs whole (every pod of the Job bound) as a fraction,
and CPU seconds and API writes spent; for aisched also its scheduling cycles (count, time, CPU, p50 /
p99, from its own histograms). Targets: aisched at least 2x Kueue's rate with every gang
whole, and at least 0.8x kube-scheduler's.

Usage: .venv/bin/python -m benchmarks.workloads [--jobs 400] [--nodes 1008] [--arms aisched,kueue,kube_scheduler]
       [--mix ...] [--concurrency 8] [--seed 1] [--cluster-dir DIR] [--timeout 300] [--output PATH]
       [--update-results]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from aisched.settings import Settings
from aisched.testing.cluster import LocalCluster, bin_dir, open_default_queue, start_cluster, stop_cluster
from aisched.testing.operator import OperatorProcess
from aisched.testing.workload_policies import workload_policies  # the chart's policies, for one namespace
from benchmarks.common import add_output_arguments, provenance, require_files, run_reporting_input_errors, write_figures
from benchmarks.e2e_measure import BindWatch, Topology, arm_report, costs, process_cpu_seconds, submit
from benchmarks.e2e_scale import drain, prepare
from benchmarks.e2e_workloads import DEFAULT_MIX, NAMESPACE, GangShape, job_mix, parse_mix
from benchmarks.scale_probe import OperatorReading, read_operator
from benchmarks.workloads.kueue import kueue_running
from benchmarks.workloads.objects import ARMS, Arm, cluster_description, gang_job, summary

LARGE_PRESET_NODES = 1008
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the Job controller's, on every pod it makes
GPUS_PER_NODE = 8  # every node of the presets and of cluster_description


@contextmanager
def local_cluster(cluster_dir: Path | None, nodes: int) -> Iterator[LocalCluster]:
    """The cluster in CLUSTER_DIR, or a fresh one of NODES nodes (the `large` preset at 1,008),
    torn down whatever happens."""
    if cluster_dir is not None:
        yield LocalCluster(state_dir=cluster_dir.resolve(), bin_dir=bin_dir())
        return
    with tempfile.TemporaryDirectory(prefix="aisched-workloads-") as state:
        preset = "large"
        if nodes != LARGE_PRESET_NODES:
            preset = str(Path(state) / "cluster.yaml")
            Path(preset).write_text(yaml.safe_dump(cluster_description(nodes)))
        try:
            print(f"starting a cluster of {nodes} nodes x 8 GPUs...", flush=True)
            yield start_cluster(Path(state) / "cluster", preset)
        finally:
            stop_cluster(Path(state) / "cluster")


def measure(
    api: client.ApiClient, jobs: list[dict[str, Any]], pods: int, args: argparse.Namespace
) -> tuple[dict[str, float], BindWatch, bool]:
    """JOBS created from the client threads; when each was sent, the watch of their pods, and
    whether every pod was bound within the timeout (an arm that falls short is still reported)."""
    batch = client.BatchV1Api(api)
    watcher = BindWatch(client.CoreV1Api(api), NAMESPACE, job_label=JOB_NAME_LABEL)
    watcher.start()
    try:
        sent = submit(
            lambda job: batch.create_namespaced_job(NAMESPACE, job, _preload_content=False),
            jobs,
            lambda job: str(job["metadata"]["name"]),
            args.concurrency,
        )
        bound = watcher.wait_bound(pods, args.timeout)
    finally:
        watcher.stop()
    return sent, watcher, len(bound) >= pods


def report(
    shapes: dict[str, GangShape],
    measured: tuple[dict[str, float], BindWatch, bool],
    topology: Topology,
    spent: dict[str, Any],
) -> dict[str, Any]:
    sent, watched, complete = measured
    if not watched.bound:
        return {"pods": 0, "pods_per_s": 0.0, "gangs_whole": 0, "gangs_whole_fraction": 0.0, "complete": False}
    figures = arm_report(shapes, sent, watched, topology)
    return {
        **figures,
        "complete": complete,
        "gangs_whole_fraction": round(figures["gangs_whole"] / len(shapes), 4),
        **spent,
    }


def cpu_of(name: str, pid: int | None, before: float) -> dict[str, float]:
    return {} if pid is None else {name: round(process_cpu_seconds(pid) - before, 1)}


@dataclass(frozen=True)
class Bench:
    """What every arm runs against: the cluster, a client of it, the gangs, the empty cluster's topology."""

    cluster: LocalCluster
    api: client.ApiClient
    shapes: dict[str, GangShape]
    topology: Topology
    args: argparse.Namespace

    @property
    def pods(self) -> int:
        return sum(shape.replicas for shape in self.shapes.values())


def run_arm(bench: Bench, arm: Arm, work_dir: Path) -> dict[str, Any]:
    """ARM's figures, the namespace drained after it."""
    cluster, api, args = bench.cluster, bench.api, bench.args
    jobs = [gang_job(name, NAMESPACE, shape, arm) for name, shape in bench.shapes.items()]
    print(f"arm {arm}: {len(jobs)} Indexed Jobs ({bench.pods} pods)...", flush=True)
    if arm == "aisched":
        return aisched_arm(bench, jobs, work_dir)
    if arm == "kueue":
        gpus = len(bench.topology.empty.node_names()) * GPUS_PER_NODE
        with kueue_running(cluster, NAMESPACE, gpus, work_dir) as kueue:
            pid = kueue.process.pid if kueue.process else None
            before, kueue_cpu = costs(api, cluster, None), process_cpu_seconds(pid) if pid else 0.0
            measured = measure(api, jobs, bench.pods, args)
            spent = costs(api, cluster, None).since(before)
            spent["cpu_s"] = {**cpu_of("kueue", pid, kueue_cpu), **spent["cpu_s"]}
            figures = report(bench.shapes, measured, bench.topology, spent)
            drain(api, args.timeout)  # while Kueue runs: it lifts its Workloads' finalizers
            return figures
    before = costs(api, cluster, None)
    measured = measure(api, jobs, bench.pods, args)
    figures = report(bench.shapes, measured, bench.topology, costs(api, cluster, None).since(before))
    drain(api, args.timeout)
    return figures


def aisched_arm(bench: Bench, jobs: list[dict[str, Any]], work_dir: Path) -> dict[str, Any]:
    """The operator as users run it, the chart's workload policies in force in the namespace."""
    cluster, api, args = bench.cluster, bench.api, bench.args
    with workload_policies(cluster, NAMESPACE):
        operator = OperatorProcess(
            cluster,
            args.operator_log or work_dir / "operator.log",
            extra_env={
                "AISCHED_RESYNC_SECONDS": str(Settings.model_fields["resync_seconds"].default),
                "AISCHED_LOG_LEVEL": args.operator_log_level,
            },
        )
        operator.start()
        try:
            open_default_queue(api)  # one nobody wrote grants nothing; the benchmark is the one tenant
            pid = operator.process.pid if operator.process else None
            before, cycles_before = costs(api, cluster, pid), read_operator(operator.metrics_port)
            measured = measure(api, jobs, bench.pods, args)
            figures = report(bench.shapes, measured, bench.topology, costs(api, cluster, pid).since(before))
            figures["scheduling_cycles"] = cycles(read_operator(operator.metrics_port), cycles_before)
            drain(api, args.timeout)
            return figures
        except BaseException:
            print(f"operator log (tail):\n{operator.log_tail()}", file=sys.stderr)
            raise
        finally:
            operator.stop()


def cycles(after: OperatorReading, before: OperatorReading) -> dict[str, float]:
    """The operator's scheduling cycles in the arm (its own histograms): how many, their time and CPU."""
    wall, cpu = after.cycle.since(before.cycle), after.cycle_cpu.since(before.cycle_cpu)
    return {
        "count": wall.count,
        "seconds": round(wall.total, 2),
        "cpu_seconds": round(cpu.total, 2),
        "p50_s": round(wall.quantile(0.5), 4),
        "p99_s": round(wall.quantile(0.99), 4),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    shapes = {f"job-{i:04d}": shape for i, shape in enumerate(job_mix(args.jobs, parse_mix(args.mix), args.seed))}
    pods = sum(s.replicas for s in shapes.values())
    arms: dict[Arm, dict[str, Any] | None] = dict.fromkeys(ARMS)
    timings: dict[str, float] = {}
    with local_cluster(args.cluster_dir, args.nodes) as cluster, tempfile.TemporaryDirectory() as work:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        api.configuration.connection_pool_maxsize = max(args.concurrency, 4) + 2
        core = client.CoreV1Api(api)
        prepare(cluster, core)
        bench = Bench(cluster, api, shapes, Topology.of(core), args)
        for arm in args.arms:
            started = time.monotonic()
            arm_dir = Path(work) / arm
            arm_dir.mkdir()
            arms[arm] = run_arm(bench, arm, arm_dir)
            timings[arm] = round(time.monotonic() - started, 1)
        nodes = len(bench.topology.empty.node_names())
    settings = {"mix": args.mix, "seed": args.seed, "concurrency": args.concurrency, "arms": list(args.arms)}
    result = summary(arms, nodes=nodes, jobs=len(shapes), pods=pods, settings=settings)
    result["arm_wall_s"] = timings
    return result


def parse_arms(text: str) -> tuple[Arm, ...]:
    """'aisched,kueue' -> ('aisched', 'kueue'), in the order given; an unknown arm is refused."""
    chosen = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in chosen if name not in ARMS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"arms are among {', '.join(ARMS)}, not {text!r}")
    return tuple(arm for name in chosen for arm in ARMS if arm == name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.workloads", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--jobs", type=int, default=400, help="Indexed Jobs submitted at once, in each arm")
    parser.add_argument("--nodes", type=int, default=LARGE_PRESET_NODES, help="the fresh cluster's nodes (8 GPUs each)")
    parser.add_argument("--arms", type=parse_arms, default=ARMS, help=f"comma-separated, of {','.join(ARMS)}")
    parser.add_argument("--mix", default=DEFAULT_MIX, help="gang shapes PODSxGPUS=WEIGHT, comma-separated")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads submitting, in every arm")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300, help="seconds each arm may take to bind every pod")
    parser.add_argument("--cluster-dir", type=Path, help="a running hack/cluster.sh cluster's state dir")
    parser.add_argument("--operator-log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.add_argument("--operator-log", type=Path, help="keep the operator's log here")
    add_output_arguments(parser, "workloads.json")
    return run_reporting_input_errors(measure_and_report, parser.parse_args(argv))


def measure_and_report(args: argparse.Namespace) -> int:
    if args.cluster_dir is not None:
        require_files([(args.cluster_dir / "admin.kubeconfig", "--cluster-dir, a running cluster's state dir")])
    started = time.monotonic()
    result = run(args)
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["provenance"] = provenance()
    for arm in ARMS:
        figures = result[arm]
        if figures is None:
            print(f"{arm:>15}: not run")
            continue
        print(
            f"{arm:>15}: {figures['pods']}/{result['pods']} pods bound at {figures['pods_per_s']:.1f} pods/s, "
            f"p50 {figures.get('bind_p50_s')} s, p99 {figures.get('bind_p99_s')} s, "
            f"{figures['gangs_whole']}/{result['jobs']} gangs whole"
        )
    print(
        f"aisched / Kueue {result['ratio_vs_kueue']}, aisched / kube-scheduler {result['ratio_vs_kube_scheduler']}; "
        f"targets {result['targets']}; {result['wall_s']:.0f} s in all"
    )
    write_figures(result, args.output, args.update_results, "workloads.json")
    ours = result["aisched"]
    return 0 if ours is None or ours["gangs_whole"] == result["jobs"] else 1


if __name__ == "__main__":
    sys.exit(main())
