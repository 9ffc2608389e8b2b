"""End to end on the `large` local cluster: how fast aisched gets several hundred gangs bound,
against the default kube-scheduler alone binding the same pods, in the same run.

Setup: `hack/cluster.sh up large` (1,008 KWOK nodes x 8 GPUs) in a temporary state
directory on free ports, torn down at the end (Ctrl-C included); `--cluster-dir` uses a
running cluster instead (e.g. `.cluster` after `make cluster-up PRESET=large`). Pods on
KWOK nodes stay Running until annotated (hack/kwok/stages.yaml), so every GPU a bound pod
holds stays held through the measurement.

Arm 1, aisched: the operator runs as users run it (`aisched run --standalone`, default
settings) and `--jobs` TrainingJobs (a seeded mix of gang shapes, `--mix`) are created
at once by `--concurrency` client threads. Arm 2, kube-scheduler alone: the operator is
stopped, the jobs are deleted and the cluster drains; then the very pods the operator
would create for those jobs (`build_worker_pod`), minus the scheduling gate, the node
pin and the owner, are created by the same number of client threads: the same
submission path and concurrency for both arms, so the comparison is fair (arm 2 sends
one request per pod, arm 1 one per job).

Measured per pod from one watch per arm (not polling): submission (just before the
create request of its job, or of the pod itself in arm 2) until the watch first shows
spec.nodeName set. Figures: p50 / p99 of that time, and pods bound per second =
pods / (last bind - first submission). ratio = aisched rate / kube-scheduler rate
(target: at least 0.8). Every gang must be whole (all its pods bound), and gangs are
counted in their smallest feasible domain when the nodes they bound to lie in a domain
as tight as the one `place_gang` finds for their shape on the empty cluster.

The cluster and the operator process are aisched.testing's drivers; what is measured (the
bind watch, CPU and API writes) is benchmarks/e2e_measure.py.

Usage: .venv/bin/python -m benchmarks.e2e_scale [--jobs 400] [--mix 1x1=30,1x2=15,...]
       [--concurrency 8] [--seed 1] [--cluster-dir DIR] [--timeout 300] [--output PATH] [--update-results]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from aisched.api import GROUP, VERSION, TrainingJob
from aisched.kube.builders import GangLaunch, WorkerSlot, build_worker_pod
from aisched.kube.inventory import Inventory
from aisched.policy.cluster import ClusterSnapshot, level_rank
from aisched.policy.placement import GangRequest, Placement, place_gang
from aisched.settings import Settings
from aisched.testing.cluster import LocalCluster, bin_dir, start_cluster, stop_cluster, wait_for
from aisched.testing.operator import OperatorProcess
from benchmarks.common import REPO_ROOT, add_output_arguments, require_files, run_reporting_input_errors, write_figures
from benchmarks.e2e_measure import BindWatch, costs, submit

NAMESPACE = "e2e-scale"
TARGET_RATIO = 0.8
# Most jobs on shared GPU clusters are small; a few are multi-node gangs.
DEFAULT_MIX = "1x1=30,1x2=15,1x4=15,2x4=10,1x8=12,2x8=10,4x8=8"
TEMPLATE: dict[str, Any] = {
    "spec": {"containers": [{"name": "trainer", "image": "python:3.11-slim", "command": ["sleep", "infinity"]}]}
}


# -- pure parts ------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class GangShape:
    replicas: int
    gpus_per_replica: int

    @property
    def label(self) -> str:
        return f"{self.replicas}x{self.gpus_per_replica}"


def parse_mix(text: str) -> dict[GangShape, float]:
    """'1x1=30,4x8=8' -> {GangShape(1, 1): 30.0, GangShape(4, 8): 8.0}."""
    mix: dict[GangShape, float] = {}
    for item in text.split(","):
        shape, _, weight = item.strip().partition("=")
        replicas, _, gpus = shape.partition("x")
        mix[GangShape(int(replicas), int(gpus))] = float(weight or 1)
    if not mix or min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise ValueError(f"a mix needs positive weights: {text!r}")
    return mix


def job_mix(count: int, mix: Mapping[GangShape, float], seed: int) -> list[GangShape]:
    """COUNT gang shapes in MIX's proportions (largest remainder), in a seeded random order."""
    total = sum(mix.values())
    exact = {shape: count * weight / total for shape, weight in mix.items()}
    counts = {shape: int(share) for shape, share in exact.items()}
    by_remainder = sorted(exact, key=lambda s: (exact[s] - counts[s], s), reverse=True)
    for shape in by_remainder[: count - sum(counts.values())]:
        counts[shape] += 1
    shapes = [shape for shape in sorted(counts) for _ in range(counts[shape])]
    random.Random(seed).shuffle(shapes)
    return shapes


@dataclass(frozen=True)
class ArmFigures:
    pods: int
    pods_per_s: float
    bind_p50_s: float
    bind_p99_s: float
    span_s: float


def arm_figures(submitted_bound: Sequence[tuple[float, float]]) -> ArmFigures:
    """From (submitted, bound) times per pod: latency percentiles and pods / (last bind - first submission)."""
    latencies = [bound - submitted for submitted, bound in submitted_bound]
    span = max(b for _, b in submitted_bound) - min(s for s, _ in submitted_bound)
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return ArmFigures(
        pods=len(latencies),
        pods_per_s=len(latencies) / span,
        bind_p50_s=cuts[49],
        bind_p99_s=cuts[98],
        span_s=span,
    )


def training_job(name: str, shape: GangShape) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicas": shape.replicas, "gpusPerReplica": shape.gpus_per_replica, "template": TEMPLATE},
    }


def plain_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods the operator would create for JOB, as plain pods: no gate, no node pin, no owner."""
    model = TrainingJob.model_validate({**job, "metadata": {**job["metadata"], "uid": "none"}})
    replicas = model.spec.replicas
    launch = GangLaunch(0, replicas, tuple(WorkerSlot(rank, "") for rank in range(replicas)))
    pods = []
    for slot in launch.slots:
        pod = build_worker_pod(model, launch, slot)
        pod["spec"].pop("schedulingGates", None)  # a lone worker has none
        del pod["spec"]["nodeSelector"], pod["metadata"]["ownerReferences"]
        pods.append(pod)
    return pods


@dataclass(frozen=True)
class Topology:
    """Which gangs sit in the tightest domain their shape could ever get (on the empty cluster)."""

    empty: ClusterSnapshot

    @classmethod
    def of(cls, core: client.CoreV1Api) -> Topology:
        inventory = Inventory(Settings())
        inventory.replace_nodes(json.loads(core.list_node(_preload_content=False).data)["items"])
        return cls(inventory.snapshot())

    def in_smallest_domain(self, shape: GangShape, nodes: list[str]) -> bool:
        ideal = place_gang(GangRequest(shape.replicas, shape.gpus_per_replica), self.empty)
        best = level_rank(ideal.level if isinstance(ideal, Placement) else None)
        return level_rank(self.empty.tightest_domain(nodes).level) <= best


def arm_report(
    shapes: Mapping[str, GangShape], sent: Mapping[str, float], watched: BindWatch, topology: Topology
) -> dict[str, Any]:
    """Figures of one arm; SENT is keyed by job (arm 1) or by pod name (arm 2)."""
    bound = watched.bound
    pairs = [(sent[pod.job] if pod.job in sent else sent[name], pod.at) for name, pod in bound.items()]
    figures = arm_figures(pairs)
    ranks: dict[str, set[int]] = {job: set() for job in shapes}
    nodes: dict[str, list[str]] = {job: [] for job in shapes}
    for pod in bound.values():
        ranks[pod.job].add(pod.rank)
        nodes[pod.job].append(pod.node)
    whole = [job for job, shape in shapes.items() if ranks[job] == set(range(shape.replicas))]
    multi = [job for job in whole if shapes[job].replicas > 1]
    return {
        "pods": figures.pods,
        "pods_per_s": round(figures.pods_per_s, 2),
        "bind_p50_s": round(figures.bind_p50_s, 3),
        "bind_p99_s": round(figures.bind_p99_s, 3),
        "span_s": round(figures.span_s, 2),
        "submit_s": round(max(sent.values()) - min(sent.values()), 2),  # the clients' part of the span
        "gangs_whole": len(whole),
        "in_smallest_domain": sum(topology.in_smallest_domain(shapes[j], nodes[j]) for j in whole),
        "multi_pod_gangs": len(multi),
        "multi_pod_in_smallest_domain": sum(topology.in_smallest_domain(shapes[j], nodes[j]) for j in multi),
        "pods_ended": len(watched.ended),
        "watch_resumed": watched.resumed,
        "watch_relisted": watched.relisted,
    }


@contextmanager
def local_cluster(cluster_dir: Path | None) -> Iterator[LocalCluster]:
    """The cluster in CLUSTER_DIR, or a fresh `large` one that is torn down whatever happens."""
    if cluster_dir is not None:
        yield LocalCluster(state_dir=cluster_dir.resolve(), bin_dir=bin_dir())
        return
    with tempfile.TemporaryDirectory(prefix="aisched-e2e-") as state:
        try:
            print("starting the large cluster (1,008 nodes x 8 GPUs)...", flush=True)
            yield start_cluster(Path(state) / "cluster", "large")
        finally:
            stop_cluster(Path(state) / "cluster")


def prepare(cluster: LocalCluster, core: client.CoreV1Api) -> None:
    """aisched's CRDs established and an empty namespace whose default ServiceAccount exists."""
    crds = REPO_ROOT / "crds"
    for args in (
        ("apply", "--server-side", "--force-conflicts", "-f", str(crds)),
        ("wait", "--for=condition=established", "--timeout=60s", "-f", str(crds)),
    ):
        result = cluster.kubectl(*args)
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {args[0]} failed: {result.stderr}")
    if core.list_namespace(field_selector=f"metadata.name={NAMESPACE}").items:
        raise RuntimeError(f"namespace {NAMESPACE} exists; delete it first")
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    wait_for(
        lambda: core.list_namespaced_service_account(NAMESPACE, field_selector="metadata.name=default").items,
        60,
        "the default ServiceAccount",
    )


def measure(
    core: client.CoreV1Api,
    create: Callable[[dict[str, Any]], object],
    objects: list[dict[str, Any]],
    pods: int,
    *,
    threads: int,
    timeout: float,
) -> tuple[dict[str, float], BindWatch]:
    watcher = BindWatch(core, NAMESPACE)
    watcher.start()
    try:
        sent = submit(create, objects, lambda o: str(o["metadata"]["name"]), threads)
        bound = watcher.wait_bound(pods, timeout)
    finally:
        watcher.stop()
    if len(bound) < pods:
        raise TimeoutError(f"only {len(bound)} of {pods} pods bound within {timeout:.0f}s")
    return sent, watcher


def drain(custom: client.CustomObjectsApi, core: client.CoreV1Api, timeout: float) -> None:
    """Delete every TrainingJob and wait until no pod is left in the namespace."""
    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "trainingjobs")
    wait_for(lambda: not core.list_namespaced_pod(NAMESPACE).items, timeout, "the cluster to drain", interval=1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    shapes = {f"job-{i:04d}": shape for i, shape in enumerate(job_mix(args.jobs, parse_mix(args.mix), args.seed))}
    jobs = [training_job(name, shape) for name, shape in shapes.items()]
    pods = sum(s.replicas for s in shapes.values())
    with local_cluster(args.cluster_dir) as cluster, tempfile.TemporaryDirectory(prefix="aisched-e2e-op-") as logs:
        log_path = args.operator_log or Path(logs) / "operator.log"
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        api.configuration.connection_pool_maxsize = max(args.concurrency, 4) + 2
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        prepare(cluster, core)
        topology = Topology.of(core)
        operator = OperatorProcess(
            cluster,
            log_path,
            extra_env={
                "AISCHED_RESYNC_SECONDS": str(Settings.model_fields["resync_seconds"].default),
                "AISCHED_LOG_LEVEL": args.operator_log_level,
            },
        )
        operator.start()
        try:
            # The operator creates the default Queue once its caches are filled: it is ready.
            wait_for(lambda: custom.list_cluster_custom_object(GROUP, VERSION, "queues")["items"], 60, "a Queue")
            print(f"arm 1: {len(jobs)} TrainingJobs ({pods} pods) through aisched...", flush=True)

            def create_job(job: dict[str, Any]) -> object:
                return custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "trainingjobs", job)

            operator_pid = operator.process.pid if operator.process else None
            before = costs(api, cluster, operator_pid)
            sent, watched = measure(core, create_job, jobs, pods, threads=args.concurrency, timeout=args.timeout)
            aisched_costs = costs(api, cluster, operator_pid).since(before)
        except BaseException:
            print(f"operator log (tail):\n{operator.log_tail()}", file=sys.stderr)
            raise
        finally:
            operator.stop()
        aisched = arm_report(shapes, sent, watched, topology)
        print("draining...", flush=True)
        drain(custom, core, args.timeout)
        plain = [pod for job in jobs for pod in plain_pods(job)]
        print(f"arm 2: the same {len(plain)} pods through kube-scheduler alone...", flush=True)
        before = costs(api, cluster, None)
        sent, watched = measure(
            core,
            lambda pod: core.create_namespaced_pod(NAMESPACE, pod),
            plain,
            pods,
            threads=args.concurrency,
            timeout=args.timeout,
        )
        baseline = {**arm_report(shapes, sent, watched, topology), **costs(api, cluster, None).since(before)}
        aisched.update(aisched_costs)
    return {
        "nodes": len(topology.empty.node_names()),
        "jobs": len(jobs),
        "pods": pods,
        "aisched_pods_per_s": aisched["pods_per_s"],
        "kube_scheduler_pods_per_s": baseline["pods_per_s"],
        "ratio": round(aisched["pods_per_s"] / baseline["pods_per_s"], 3),
        "bind_p50_s": aisched["bind_p50_s"],
        "bind_p99_s": aisched["bind_p99_s"],
        "baseline_bind_p50_s": baseline["bind_p50_s"],
        "baseline_bind_p99_s": baseline["bind_p99_s"],
        "gangs_whole": aisched["gangs_whole"],
        "in_smallest_domain": aisched["in_smallest_domain"],
        "aisched": aisched,
        "kube_scheduler": baseline,
        "settings": {"mix": args.mix, "seed": args.seed, "concurrency": args.concurrency},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=400, help="TrainingJobs submitted at once")
    parser.add_argument("--mix", default=DEFAULT_MIX, help="gang shapes REPLICASxGPUS=WEIGHT, comma-separated")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads submitting, in both arms")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300, help="seconds each arm may take to bind every pod")
    parser.add_argument("--cluster-dir", type=Path, help="a running hack/cluster.sh cluster's state dir")
    parser.add_argument("--operator-log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.add_argument("--operator-log", type=Path, help="keep the operator's log here")
    add_output_arguments(parser, "e2e_scale.json")
    return run_reporting_input_errors(measure_and_report, parser.parse_args(argv))


def measure_and_report(args: argparse.Namespace) -> int:
    if args.cluster_dir is not None:
        require_files([(args.cluster_dir / "admin.kubeconfig", "--cluster-dir, a running cluster's state dir")])
    started = time.monotonic()
    result = run(args)
    result["wall_s"] = round(time.monotonic() - started, 1)
    for arm in ("aisched", "kube_scheduler"):
        figures = result[arm]
        print(
            f"{arm:>15}: {figures['pods']} pods bound at {figures['pods_per_s']:.1f} pods/s, "
            f"p50 {figures['bind_p50_s']:.2f} s, p99 {figures['bind_p99_s']:.2f} s, "
            f"{figures['gangs_whole']}/{result['jobs']} gangs whole, "
            f"{figures['multi_pod_in_smallest_domain']}/{figures['multi_pod_gangs']} multi-pod gangs "
            "in their smallest domain"
        )
    verdict = "meets" if result["ratio"] >= TARGET_RATIO else "misses"
    print(f"ratio {result['ratio']:.2f} ({verdict} the {TARGET_RATIO} target); {result['wall_s']:.0f} s in all")
    write_figures(result, args.output, args.update_results, "e2e_scale.json")
    return 0 if result["gangs_whole"] == result["jobs"] else 1


if __name__ == "__main__":
    sys.exit(main())
