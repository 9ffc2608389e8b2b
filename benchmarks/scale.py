"""Scale: the operator on thousands of GPU nodes with a backlog of ten thousand TrainingJobs.

Setup: a local cluster of the `xlarge` preset's first zone (1,008 KWOK nodes x 8 GPUs) in a
temporary state directory, with 600 s node Leases (hack/clusters/xlarge.yaml says why); the
operator runs as users run it (`aisched run --standalone`, default settings, WARNING logs).

Idle curve: with the operator running and no job, the cluster grows to each of `--steps`
nodes (the benchmark creates the next zones' nodes); once they are Ready and the operator
has settled, its resident memory is read.

Backlog: `--jobs` TrainingJobs of a seeded mix of gang shapes (mostly single workers, some
multi-node gangs; e2e_workloads.DEFAULT_MIX) are created at an even rate over
`--submit-seconds`, more GPUs than the cluster has. Each job's workers run for a seeded
time between `--run-seconds` MIN and MAX (KWOK ends them: aisched.io/fake-exit-after), so
jobs finish and the backlog drains while new ones arrive. The run ends when every job has
bound its workers, or at `--timeout`.

Figures: operator peak RSS (VmHWM) and idle RSS per step; the scheduling cycle's p50 / p99
from the operator's own histogram (aisched_scheduling_cycle_seconds: reading the jobs and
the cluster and deciding, which is what holds its event loop) over the backlog phase, and
its mean per 5 s interval against the jobs waiting then; bind latency per job, from its
first worker's creation (the operator admitted it) to its last worker bound, and from its
submission (queueing included); API requests per job by verb (every client's: the operator,
kube-scheduler, KWOK and the controllers); operator CPU seconds per job; the operator's full
garbage collections (aisched_gc_pause_seconds, generation 2: count, p99, total), which stall
its loop wherever they land. `--plot` (and
`--update-results`, into docs/scale.png) draws RSS against nodes and the cycle against the
backlog.

`--operator-cpus` gives the operator CPUs of its own, as its pod has in a cluster, and the
local control plane the rest; by default they share every CPU, and a cycle's wall time
includes waiting for one.

Usage: .venv/bin/python -m benchmarks.scale [--steps 1008,2016,5040] [--jobs 10000]
       [--submit-seconds 240] [--run-seconds 60,240] [--seed 1] [--timeout 1800]
       [--operator-cpus 1] [--plot PATH] [--output PATH] [--update-results]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from aisched.api import GROUP, VERSION
from aisched.testing.cluster import LocalCluster, open_default_queue, start_cluster, stop_cluster, wait_for
from aisched.testing.nodes import load_description, render_nodes
from aisched.testing.operator import OperatorProcess
from benchmarks.common import REPO_ROOT, add_output_arguments, run_reporting_input_errors, write_figures
from benchmarks.e2e_measure import BindWatch, process_cpu_seconds
from benchmarks.e2e_workloads import DEFAULT_MIX, NAMESPACE, GangShape, job_mix, parse_mix, training_job
from benchmarks.scale_plot import plot
from benchmarks.scale_probe import (
    HistogramState,
    Sampler,
    api_requests_by_verb,
    cycle_curve,
    memory_mib,
    percentile,
    read_operator,
)

DESCRIPTION = REPO_ROOT / "hack" / "clusters" / "xlarge.yaml"
NODE_LEASE_SECONDS = 600
SETTLE_SECONDS = 20
TARGET_PEAK_RSS_MIB = 500
TARGET_CYCLE_P99_S = 1.0


def first_nodes(count: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The xlarge description cut to its first zones holding COUNT nodes, and every node it renders."""
    description = load_description(DESCRIPTION)
    nodes = render_nodes(description)
    zones, held = [], 0
    for zone in description["zones"]:
        if held >= count:
            break
        zones.append(zone)
        held += sum(1 for n in nodes if n["metadata"]["labels"]["topology.kubernetes.io/zone"] == zone["name"])
    return {**description, "zones": zones}, nodes


def grow(core: client.CoreV1Api, nodes: list[dict[str, Any]], have: int, want: int) -> None:
    """Create nodes HAVE..WANT of the rendered list, then wait until all WANT are Ready."""

    def create(node: dict[str, Any]) -> None:
        core.create_node(node)  # with its status: a Node keeps it on create, as a kubelet registers

    def gpu_nodes() -> int:
        listed = core.list_node(_preload_content=False)
        return bytes(listed.data).count(b'"nvidia.com/gpu":"8"') // 2  # capacity and allocatable

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, nodes[have:want]))

    def ready() -> bool:
        listed = core.list_node(_preload_content=False)
        return bytes(listed.data).count(b'"type":"Ready","status":"True"') >= want

    wait_for(ready, 900, f"{want} Ready nodes", interval=5)
    if gpu_nodes() < want:
        raise RuntimeError(f"only {gpu_nodes()} of {want} nodes advertise 8 GPUs")


def job_with_run_time(name: str, shape: GangShape, run_seconds: int) -> dict[str, Any]:
    job = training_job(name, shape)
    template = {
        **job["spec"]["template"],
        "metadata": {
            "annotations": {"aisched.io/fake-exit": "Succeeded", "aisched.io/fake-exit-after": f"{run_seconds}s"}
        },
    }
    return {**job, "spec": {**job["spec"], "template": template}}


def submit_evenly(custom: client.CustomObjectsApi, jobs: list[dict[str, Any]], seconds: float) -> dict[str, float]:
    """Create JOBS at an even rate over SECONDS from 8 threads; when each was sent (monotonic)."""
    started = time.monotonic()
    sent: dict[str, float] = {}

    def one(indexed: tuple[int, dict[str, Any]]) -> None:
        index, job = indexed
        delay = started + seconds * index / len(jobs) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent[job["metadata"]["name"]] = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "trainingjobs", job)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, enumerate(jobs)))
    return sent


def bind_figures(watched: BindWatch, sent: dict[str, float], replicas: dict[str, int]) -> dict[str, Any]:
    """Per job whose gang bound whole: first worker created -> last bound, and submission -> last bound."""
    bound_at: dict[str, list[float]] = {}
    for pod in watched.bound.values():
        bound_at.setdefault(pod.job, []).append(pod.at)
    created = watched.created
    admitted_to_bound, submitted_to_bound = [], []
    for job, times in bound_at.items():
        if len(times) < replicas[job] or job not in created:
            continue
        admitted_to_bound.append(max(times) - created[job])
        submitted_to_bound.append(max(times) - sent[job])
    return {
        "jobs_bound": len(admitted_to_bound),
        "bind_p50_s": round(percentile(admitted_to_bound, 0.5), 3),
        "bind_p99_s": round(percentile(admitted_to_bound, 0.99), 3),
        "submit_to_bind_p50_s": round(percentile(submitted_to_bound, 0.5), 1),
        "submit_to_bind_p99_s": round(percentile(submitted_to_bound, 0.99), 1),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    steps = sorted(int(s) for s in args.steps.split(","))
    description, nodes = first_nodes(steps[0])
    if steps[-1] > len(nodes):
        raise ValueError(f"the xlarge preset has {len(nodes)} nodes; --steps asks for {steps[-1]}")
    rng = random.Random(args.seed)
    low, high = (int(s) for s in args.run_seconds.split(","))
    shapes = {f"j{i:05d}": s for i, s in enumerate(job_mix(args.jobs, parse_mix(args.mix), args.seed))}
    jobs = [job_with_run_time(name, shape, rng.randint(low, high)) for name, shape in shapes.items()]
    if args.operator_cpus:
        # Everything this starts inherits the other CPUs; the operator is moved to its own once started.
        os.sched_setaffinity(0, os.sched_getaffinity(0) - args.operator_cpus)
    os.environ.update({"AISCHED_NODE_LEASE_SECONDS": str(NODE_LEASE_SECONDS), "AISCHED_CLUSTER_TIMEOUT": "1800"})
    with tempfile.TemporaryDirectory(prefix="aisched-scale-") as state:
        first = Path(state) / "first-zone.yaml"
        first.write_text(yaml.safe_dump(description))
        print(f"starting a cluster of {steps[0]} nodes...", flush=True)
        cluster = start_cluster(Path(state) / "cluster", str(first))
        try:
            return measure(cluster, Path(state), args, Plan(steps, nodes, jobs, shapes))
        finally:
            stop_cluster(Path(state) / "cluster")


@dataclass(frozen=True)
class Plan:
    steps: list[int]
    """Cluster sizes of the idle curve, the last the backlog's."""
    nodes: list[dict[str, Any]]
    """Every node of the xlarge preset, rendered."""
    jobs: list[dict[str, Any]]
    shapes: dict[str, GangShape]


def measure(cluster: LocalCluster, state: Path, args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    crds = REPO_ROOT / "crds"
    cluster.kubectl("apply", "--server-side", "-f", str(crds))
    cluster.kubectl("wait", "--for=condition=established", "--timeout=60s", "-f", str(crds))
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    operator = OperatorProcess(cluster, state / "operator.log", extra_env={"AISCHED_LOG_LEVEL": "WARNING"})
    operator.extra_env["AISCHED_RESYNC_SECONDS"] = "300"
    # The liveness bound must exceed the resync (the settings refuse it otherwise, as they should).
    operator.extra_env["AISCHED_LIVENESS_PASS_SECONDS"] = "900"
    operator.start()
    assert operator.process is not None
    pid = operator.process.pid
    if args.operator_cpus:
        pin_process(pid, args.operator_cpus)
    try:
        wait_for(lambda: custom.list_cluster_custom_object(GROUP, VERSION, "queues")["items"], 120, "a Queue")
        open_default_queue(api)  # created granting nothing: the benchmark's jobs name no queue
        idle: dict[str, float] = {}
        have = plan.steps[0]
        for step in plan.steps:
            if step > have:
                print(f"growing to {step} nodes...", flush=True)
                grow(core, plan.nodes, have, step)
                have = step
            time.sleep(SETTLE_SECONDS)
            idle[str(step)] = round(memory_mib(pid)[0], 1)
            print(f"  {step} nodes, idle: operator RSS {idle[str(step)]} MiB", flush=True)
        figures = backlog(api, operator, plan.jobs, plan.shapes, args)
        figures["idle_rss_mib"] = idle
        figures["nodes"] = have
        return figures
    except BaseException:
        print(f"operator log (tail):\n{operator.log_tail()}", file=sys.stderr)
        raise
    finally:
        operator.stop()
        print_errors(state / "operator.log")


def pin_process(pid: int, cpus: set[int]) -> None:
    """Every thread of PID onto CPUS (the threads it starts later inherit them)."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(thread), cpus)


def cpu_set(text: str) -> set[int]:
    cpus = {int(cpu) for cpu in text.split(",") if cpu}
    if not cpus or not cpus < os.sched_getaffinity(0):
        raise argparse.ArgumentTypeError(f"{text!r}: some of this machine's CPUs, not all of them")
    return cpus


def print_errors(log: Path, most: int = 40) -> None:
    """The operator's ERROR lines and tracebacks: the state directory, log included, goes at the end."""
    if not log.exists():
        return
    lines = log.read_text(errors="replace").splitlines()
    errors = [i for i, line in enumerate(lines) if " ERROR " in line]
    print(f"operator log: {len(errors)} ERROR lines", flush=True)
    for index in errors[:3]:  # each with the traceback that follows it
        print("\n".join(lines[index : index + most]), flush=True)


def backlog(
    api: client.ApiClient,
    operator: OperatorProcess,
    jobs: list[dict[str, Any]],
    shapes: dict[str, GangShape],
    args: argparse.Namespace,
) -> dict[str, Any]:
    assert operator.process is not None
    pid = operator.process.pid
    replicas = {name: shape.replicas for name, shape in shapes.items()}
    pods = sum(replicas.values())
    before = read_operator(operator.metrics_port)
    requests_before, cpu_before = api_requests_by_verb(api), process_cpu_seconds(pid)
    sampler = Sampler(pid, operator.metrics_port)
    watched = BindWatch(client.CoreV1Api(api), NAMESPACE)
    watched.start()
    sampler.start()
    started = time.monotonic()
    print(f"backlog: {len(jobs)} TrainingJobs ({pods} workers) over {args.submit_seconds} s...", flush=True)
    try:
        sent = submit_evenly(client.CustomObjectsApi(api), jobs, args.submit_seconds)
        left = max(1.0, args.timeout - (time.monotonic() - started))
        watched.wait_bound(pods, left)
    finally:
        sampler.stop()
        watched.stop()
    elapsed = time.monotonic() - started
    after = read_operator(operator.metrics_port)
    cycles: HistogramState = after.cycle.since(before.cycle)
    cycles_cpu: HistogramState = after.cycle_cpu.since(before.cycle_cpu)
    full_gcs: HistogramState = after.full_gc.since(before.full_gc)
    requests = api_requests_by_verb(api)
    cpu = process_cpu_seconds(pid) - cpu_before
    per_job = {
        verb: round((total - requests_before.get(verb, 0.0)) / len(jobs), 2)
        for verb, total in sorted(requests.items())
        if total > requests_before.get(verb, 0.0)
    }
    return {
        "jobs": len(jobs),
        "workers": pods,
        "workers_bound": len(watched.bound),
        "backlog_s": round(elapsed, 1),
        "operator_peak_rss_mib": round(memory_mib(pid)[1], 1),
        "cycles": int(cycles.count),
        "cycle_p50_s": round(cycles.quantile(0.5), 4),
        "cycle_p99_s": round(cycles.quantile(0.99), 4),
        "cycle_mean_s": round(cycles.total / cycles.count, 4) if cycles.count else 0.0,
        "cycle_cpu_p50_s": round(cycles_cpu.quantile(0.5), 4),
        "cycle_cpu_p99_s": round(cycles_cpu.quantile(0.99), 4),
        "cycle_cpu_mean_s": round(cycles_cpu.total / cycles_cpu.count, 4) if cycles_cpu.count else 0.0,
        "full_gc_count": int(full_gcs.count),
        "full_gc_p99_s": round(full_gcs.quantile(0.99), 4),
        "full_gc_total_s": round(full_gcs.total, 3),
        **bind_figures(watched, sent, replicas),
        "api_requests_per_job": per_job,
        "operator_cpu_s_per_job": round(cpu / len(jobs), 4),
        "cycle_against_backlog": cycle_curve(sampler.samples),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", default="1008,2016,5040", help="cluster sizes (nodes) for the idle RSS curve")
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--mix", default=DEFAULT_MIX, help="gang shapes REPLICASxGPUS=WEIGHT, comma-separated")
    parser.add_argument("--submit-seconds", type=float, default=240)
    parser.add_argument("--run-seconds", default="60,240", help="MIN,MAX seconds each job's workers run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the backlog phase may take")
    parser.add_argument(
        "--operator-cpus",
        type=cpu_set,
        help="CPUs (comma-separated) the operator runs on alone, the cluster and the benchmark on the others; "
        "default: all share every CPU",
    )
    parser.add_argument("--plot", type=Path, help="draw RSS and cycle time here (PNG)")
    add_output_arguments(parser, "scale.json")
    return run_reporting_input_errors(measure_and_report, parser.parse_args(argv))


def measure_and_report(args: argparse.Namespace) -> int:
    started = time.monotonic()
    result = run(args)
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["settings"] = {"mix": args.mix, "seed": args.seed, "submit_seconds": args.submit_seconds}
    if args.operator_cpus:
        result["settings"]["operator_cpus"] = sorted(args.operator_cpus)
    print(
        f"{result['nodes']} nodes, {result['jobs']} jobs: operator peak RSS {result['operator_peak_rss_mib']} MiB "
        f"(target {TARGET_PEAK_RSS_MIB}), cycle p50 {result['cycle_p50_s']} s p99 {result['cycle_p99_s']} s "
        f"(target < {TARGET_CYCLE_P99_S}; CPU p50 {result['cycle_cpu_p50_s']} s p99 {result['cycle_cpu_p99_s']} s), "
        f"bind p50 {result['bind_p50_s']} s p99 {result['bind_p99_s']} s, "
        f"{result['operator_cpu_s_per_job']} operator CPU s per job; idle RSS {result['idle_rss_mib']}"
    )
    write_figures(result, args.output, args.update_results, "scale.json")
    target = args.plot or (REPO_ROOT / "docs" / "scale.png" if args.update_results else None)
    if target is not None:
        plot(result, target)
        print(f"wrote {target}")
    return 0 if result["workers_bound"] == result["workers"] else 1


if __name__ == "__main__":
    sys.exit(main())
