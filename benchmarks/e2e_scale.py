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
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config, utils

from aisched.api import GROUP, VERSION
from aisched.settings import Settings
from aisched.testing.cluster import LocalCluster, bin_dir, open_default_queue, start_cluster, stop_cluster, wait_for
from aisched.testing.operator import OperatorProcess
from benchmarks.common import REPO_ROOT, add_output_arguments, require_files, run_reporting_input_errors, write_figures
from benchmarks.e2e_measure import BindWatch, Topology, arm_report, costs, submit
from benchmarks.e2e_workloads import (
    DEFAULT_MIX,
    NAMESPACE,
    indexed_job,
    job_mix,
    parse_mix,
    plain_pods,
    training_job,
)

T = TypeVar("T", dict[str, Any], list[dict[str, Any]])
# aisched against what people run without it (an Indexed Job and a headless Service per gang).
TARGET_RATIO_VS_INDEXED_JOB = 1.0


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


def name_of(submitted: dict[str, Any] | list[dict[str, Any]]) -> str:
    """What a submission is known by: its object's name, or the last of a gang's objects' (its Job)."""
    last = submitted[-1] if isinstance(submitted, list) else submitted
    return str(last["metadata"]["name"])


def measure(
    api: client.ApiClient,
    create: Callable[[T], object],
    objects: Sequence[T],
    pods: int,
    *,
    threads: int,
    timeout: float,
) -> tuple[dict[str, float], BindWatch]:
    watcher = BindWatch(client.CoreV1Api(api), NAMESPACE)
    watcher.start()
    try:
        sent = submit(create, objects, name_of, threads)
        bound = watcher.wait_bound(pods, timeout)
    finally:
        watcher.stop()
    if len(bound) < pods:
        raise TimeoutError(f"only {len(bound)} of {pods} pods bound within {timeout:.0f}s")
    return sent, watcher


def drain(api: client.ApiClient, timeout: float) -> None:
    """Delete every TrainingJob, Job, Service and pod of the namespace; wait until no pod is left."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    client.CustomObjectsApi(api).delete_collection_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "trainingjobs")
    batch.delete_collection_namespaced_job(NAMESPACE, propagation_policy="Background")
    for service in core.list_namespaced_service(NAMESPACE).items:
        core.delete_namespaced_service(service.metadata.name, NAMESPACE)
    core.delete_collection_namespaced_pod(NAMESPACE)
    wait_for(lambda: not core.list_namespaced_pod(NAMESPACE).items, timeout, "the cluster to drain", interval=1)


def aisched_arm(
    cluster: LocalCluster, api: client.ApiClient, jobs: list[dict[str, Any]], pods: int, args: argparse.Namespace
) -> tuple[dict[str, float], BindWatch, dict[str, Any]]:
    """Arm 1: the TrainingJobs through the operator, run as users run it."""
    custom = client.CustomObjectsApi(api)
    with tempfile.TemporaryDirectory(prefix="aisched-e2e-op-") as logs:
        operator = OperatorProcess(
            cluster,
            args.operator_log or Path(logs) / "operator.log",
            extra_env={
                "AISCHED_RESYNC_SECONDS": str(Settings.model_fields["resync_seconds"].default),
                "AISCHED_LOG_LEVEL": args.operator_log_level,
            },
        )
        operator.start()
        try:
            # The operator creates the default Queue once its caches are filled: it is ready.
            wait_for(lambda: custom.list_cluster_custom_object(GROUP, VERSION, "queues")["items"], 60, "a Queue")
            open_default_queue(api)  # created granting nothing: the benchmark's jobs name no queue
            print(f"arm 1: {len(jobs)} TrainingJobs ({pods} pods) through aisched...", flush=True)

            def create_job(job: dict[str, Any]) -> object:
                return custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "trainingjobs", job)

            operator_pid = operator.process.pid if operator.process else None
            before = costs(api, cluster, operator_pid)
            sent, watched = measure(api, create_job, jobs, pods, threads=args.concurrency, timeout=args.timeout)
            return sent, watched, costs(api, cluster, operator_pid).since(before)
        except BaseException:
            print(f"operator log (tail):\n{operator.log_tail()}", file=sys.stderr)
            raise
        finally:
            operator.stop()


def plain_arm(
    cluster: LocalCluster,
    api: client.ApiClient,
    objects: Sequence[T],
    *,
    create: Callable[[T], object],
    pods: int,
    args: argparse.Namespace,
) -> tuple[dict[str, float], BindWatch, dict[str, Any]]:
    """An arm without the operator: OBJECTS created by the same client threads as arm 1's jobs."""
    before = costs(api, cluster, None)
    sent, watched = measure(api, create, objects, pods, threads=args.concurrency, timeout=args.timeout)
    return sent, watched, costs(api, cluster, None).since(before)


def create_gang(api: client.ApiClient) -> Callable[[list[dict[str, Any]]], object]:
    """Creates one gang's objects (its headless Service, then its Job) in order, from one thread."""

    def create(objects: list[dict[str, Any]]) -> object:
        return utils.create_from_dict(api, {"apiVersion": "v1", "kind": "List", "items": objects}, namespace=NAMESPACE)

    return create


def run(args: argparse.Namespace) -> dict[str, Any]:
    shapes = {f"job-{i:04d}": shape for i, shape in enumerate(job_mix(args.jobs, parse_mix(args.mix), args.seed))}
    jobs = [training_job(name, shape) for name, shape in shapes.items()]
    pods = sum(s.replicas for s in shapes.values())
    with local_cluster(args.cluster_dir) as cluster:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        api.configuration.connection_pool_maxsize = max(args.concurrency, 4) + 2
        core = client.CoreV1Api(api)
        prepare(cluster, core)
        topology = Topology.of(core)
        arms: dict[str, dict[str, Any]] = {}
        sent, watched, spent = aisched_arm(cluster, api, jobs, pods, args)
        arms["aisched"] = {**arm_report(shapes, sent, watched, topology), **spent}
        print("draining...", flush=True)
        drain(api, args.timeout)
        gangs = [indexed_job(job) for job in jobs]
        print(f"arm 2: the same {pods} workers as {len(gangs)} Indexed Jobs + headless Services...", flush=True)
        sent, watched, spent = plain_arm(cluster, api, gangs, create=create_gang(api), pods=pods, args=args)
        arms["indexed_job"] = {**arm_report(shapes, sent, watched, topology), **spent}
        drain(api, args.timeout)
        plain = [pod for job in jobs for pod in plain_pods(job)]
        print(f"arm 3: the same {len(plain)} pods through kube-scheduler alone...", flush=True)
        sent, watched, spent = plain_arm(
            cluster, api, plain, create=lambda pod: core.create_namespaced_pod(NAMESPACE, pod), pods=pods, args=args
        )
        arms["kube_scheduler"] = {**arm_report(shapes, sent, watched, topology), **spent}
    return summary(arms, len(topology.empty.node_names()), len(jobs), pods, args)


def summary(
    arms: dict[str, dict[str, Any]], nodes: int, jobs: int, pods: int, args: argparse.Namespace
) -> dict[str, Any]:
    ours, indexed, bare = arms["aisched"], arms["indexed_job"], arms["kube_scheduler"]
    return {
        "nodes": nodes,
        "jobs": jobs,
        "pods": pods,
        "aisched_pods_per_s": ours["pods_per_s"],
        "indexed_job_pods_per_s": indexed["pods_per_s"],
        "kube_scheduler_pods_per_s": bare["pods_per_s"],
        "ratio_vs_indexed_job": round(ours["pods_per_s"] / indexed["pods_per_s"], 3),
        "ratio": round(ours["pods_per_s"] / bare["pods_per_s"], 3),
        "bind_p50_s": ours["bind_p50_s"],
        "bind_p99_s": ours["bind_p99_s"],
        "indexed_job_bind_p50_s": indexed["bind_p50_s"],
        "indexed_job_bind_p99_s": indexed["bind_p99_s"],
        "baseline_bind_p50_s": bare["bind_p50_s"],
        "baseline_bind_p99_s": bare["bind_p99_s"],
        "gangs_whole": ours["gangs_whole"],
        "in_smallest_domain": ours["in_smallest_domain"],
        **arms,
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
    for arm in ("aisched", "indexed_job", "kube_scheduler"):
        figures = result[arm]
        print(
            f"{arm:>15}: {figures['pods']} pods bound at {figures['pods_per_s']:.1f} pods/s, "
            f"p50 {figures['bind_p50_s']:.2f} s, p99 {figures['bind_p99_s']:.2f} s, "
            f"{figures['gangs_whole']}/{result['jobs']} gangs whole, "
            f"{figures['multi_pod_in_smallest_domain']}/{figures['multi_pod_gangs']} multi-pod gangs "
            "in their smallest domain"
        )
    ratio = result["ratio_vs_indexed_job"]
    verdict = "meets" if ratio >= TARGET_RATIO_VS_INDEXED_JOB else "misses"
    print(
        f"aisched / Indexed Job {ratio:.2f} ({verdict} the {TARGET_RATIO_VS_INDEXED_JOB} target), "
        f"aisched / bare pods {result['ratio']:.2f}; {result['wall_s']:.0f} s in all"
    )
    write_figures(result, args.output, args.update_results, "e2e_scale.json")
    return 0 if result["gangs_whole"] == result["jobs"] else 1


if __name__ == "__main__":
    sys.exit(main())
