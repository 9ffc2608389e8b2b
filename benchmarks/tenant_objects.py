"""Tenant objects: the operator's memory with a namespace full of the largest TrainingJobs the CRD admits.

Issue #27: a tenant's objects cost the operator memory, and a tenant may create as many
as its namespace holds. The template is Kubernetes' PodTemplateSpec, closed (the API server
prunes any field Kubernetes does not define), and every list of it is bounded
(aisched.api.pod_template), but an object's bytes are bounded by etcd only (1.5 MiB a
request by default); so the largest admissible TrainingJob is one of about `--object-bytes`
of JSON whose container lists are all at their bounds (16 containers and 16 init
containers, each with 256 env entries, 256 envFrom sources, 1,024 args and 256 command
items: the most items, so the most memory once parsed) and whose remaining bytes go where
the closed schema still takes the most items per byte: empty objects (128 projected volumes
of 64 empty sources, 64 empty DNS options), then empty strings in a node affinity's values
(64 terms of 64 expressions of 256). The API server refuses a larger one (the benchmark
shrinks it until it is taken).

Setup: a local cluster (`aisched.testing.cluster`, the small preset) with the generated
CRDs, and the operator as users run it (`aisched run --standalone`, default settings). The
jobs name a Queue that does not exist, so every one waits: the operator holds them all.

Figures: the operator's resident memory idle, once it has seen half the `--jobs` jobs and all
of them (what the second half added is what a job costs, without once-only costs), and its
peak (VmHWM) while they arrived; then after a restart, as the operator meets them all at
once in its first list: its peak and its settled memory. Each against the chart's memory
limit (helm/aisched/values.yaml), and projected to `--quota-jobs`, the count of the
ResourceQuota example in docs/tenancy.md. Baseline in the same run: the operator restarted
once more on Python's own allocator (PYTHONMALLOC=pymalloc; it runs on glibc's otherwise).
`--jobs` defaults to 1,000: a namespace without a ResourceQuota holds as many as etcd takes,
and 1,000 such objects are most of etcd's default 2 GiB quota (1,365 of 1.5 MiB fill it); a
local API server on a small machine holds tens (about 280 MiB each on 2 cores).

Usage: .venv/bin/python -m benchmarks.tenant_objects [--jobs 1000] [--object-bytes 1400000]
       [--settle-seconds 20] [--threads 2] [--quota-jobs 200] [--timeout 1200] [--output PATH]
       [--update-results]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from aisched.api import GROUP, VERSION
from aisched.api.pod_template import (
    MAX_ARGS,
    MAX_COMMAND,
    MAX_CONTAINERS,
    MAX_ENV,
    MAX_LIST_ITEMS,
    MAX_SCALAR_LIST_ITEMS,
    MAX_VOLUMES,
)
from aisched.controller.main import WATCH_PAGE, WORKER_IDLE_SECONDS
from aisched.controller.process_tuning import ALLOCATOR_VARIABLE
from aisched.testing.cluster import LocalCluster, start_cluster, stop_cluster, wait_for
from aisched.testing.operator import OperatorProcess
from benchmarks.common import REPO_ROOT, add_output_arguments, run_reporting_input_errors, write_figures
from benchmarks.scale_probe import memory_mib, read_operator

NAMESPACE = "tenant"
VALUES = REPO_ROOT / "helm" / "aisched" / "values.yaml"
# etcd's default --max-request-bytes is 1.5 MiB; the object's metadata and managedFields take some of it.
DEFAULT_OBJECT_BYTES = 1_400_000
_UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, "K": 1e3 / 2**20, "M": 1e6 / 2**20, "G": 1e9 / 2**20}


def _container(name: str, index: int) -> dict[str, Any]:
    """A container with every typed list at its bound, of short distinct items (the most per byte)."""
    return {
        "name": name,
        "image": "busybox",
        "env": [{"name": f"E{index}_{i}", "value": str(i)} for i in range(MAX_ENV)],
        "envFrom": [{"prefix": f"P{index}_{i}"} for i in range(MAX_ENV)],
        "args": [f"a{index}_{i}" for i in range(MAX_ARGS)],
        "command": [f"c{index}_{i}" for i in range(MAX_COMMAND)],
    }


def largest_job(name: str, object_bytes: int) -> dict[str, Any]:
    """A TrainingJob the CRD admits of about OBJECT_BYTES of JSON, the most items it can hold.

    The bytes its bounded container lists leave go to the items the closed template still takes.
    """
    containers = [_container(f"c{i}", i) for i in range(MAX_CONTAINERS)]
    containers[0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    init_containers = [_container(f"i{i}", MAX_CONTAINERS + i) for i in range(MAX_CONTAINERS)]
    pod: dict[str, Any] = {"containers": containers, "initContainers": init_containers}
    job: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "gpusPerReplica": 1,
            "queue": "nowhere",  # no such Queue: the job waits, and the operator holds it
            "template": {"spec": pod},
        },
    }
    _pad(pod, object_bytes - json_bytes(job))
    return job


def _pad(pod: dict[str, Any], room: int) -> None:
    """Spend ROOM bytes of POD on what costs the most memory a byte: empty objects, then empty strings."""
    volumes = [{"name": f"v{i}", "projected": {"sources": [{}] * MAX_LIST_ITEMS}} for i in range(MAX_VOLUMES)]
    while volumes and json_bytes(volumes) + len(',"volumes":') > room:
        volumes.pop()
    if volumes:
        pod["volumes"] = volumes
        room -= json_bytes(volumes) + len(',"volumes":')
    dns: dict[str, Any] = {"options": [{}] * MAX_LIST_ITEMS}
    if json_bytes(dns) + len(',"dnsConfig":') <= room:
        pod["dnsConfig"] = dns
        room -= json_bytes(dns) + len(',"dnsConfig":')
    terms: list[dict[str, Any]] = []
    room -= len(
        ',"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[]}}}'
    )
    expression_bytes = json_bytes({"key": "k", "operator": "In", "values": []}) + 1
    term_bytes = json_bytes({"matchExpressions": []}) + 1
    while len(terms) < MAX_LIST_ITEMS and room > term_bytes + expression_bytes:
        expressions: list[dict[str, Any]] = []
        room -= term_bytes
        while len(expressions) < MAX_LIST_ITEMS and room > expression_bytes:
            room -= expression_bytes
            values = [""] * max(0, min(MAX_SCALAR_LIST_ITEMS, (room + 1) // 3))  # `"",` each, the last no comma
            room -= max(0, 3 * len(values) - 1)
            expressions.append({"key": "k", "operator": "In", "values": values})
        terms.append({"matchExpressions": expressions})
    if terms:
        required = {"nodeSelectorTerms": terms}
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def json_bytes(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def memory_limit_mib(values_text: str) -> float:
    """The operator's memory limit in the chart's values, in MiB."""
    values = yaml.safe_load(values_text)
    return quantity_mib(str(values["resources"]["limits"]["memory"]))


def quantity_mib(quantity: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?)?", quantity)
    if match is None:
        raise ValueError(f"not a memory quantity: {quantity}")
    number, unit = float(match.group(1)), match.group(2)
    return number / 2**20 if unit is None else number * _UNITS[unit]


def summarize(
    readings: dict[str, float], jobs: int, object_bytes: int, limit_mib: float, quota_jobs: int = 0
) -> dict[str, Any]:
    """The figures: READINGS (MiB) with what each job costs and the margin under the chart's limit;
    with QUOTA_JOBS, the worst peak projected to that many jobs from what each one kept."""

    def kib_per_job(settled: str) -> float:
        return round((readings[settled] - readings["idle_rss_mib"]) * 1024 / jobs, 1)

    worst = max(readings["peak_rss_mib"], readings["restart_peak_rss_mib"])
    figures: dict[str, Any] = {
        "jobs": jobs,
        "object_bytes": object_bytes,
        **{k: round(v, 1) for k, v in readings.items()},
        "settled_kib_per_job": kib_per_job("settled_rss_mib"),
        "restart_kib_per_job": kib_per_job("restart_settled_rss_mib"),
        "chart_limit_mib": round(limit_mib, 1),
        "peak_fraction_of_limit": round(worst / limit_mib, 3),
    }
    if "half_settled_rss_mib" in readings:
        added = readings["settled_rss_mib"] - readings["half_settled_rss_mib"]
        figures["marginal_kib_per_job"] = round(added * 1024 / (jobs - jobs // 2), 1)
    if "pymalloc_restart_settled_rss_mib" in readings:
        figures["pymalloc_restart_kib_per_job"] = kib_per_job("pymalloc_restart_settled_rss_mib")
    if quota_jobs > jobs:
        # Each job not created keeps what a job added in the second half of the run, or what one kept
        # after the restart, whichever is more (the first includes none of the once-only costs).
        kept = (
            max(
                0.0, figures.get("marginal_kib_per_job", figures["settled_kib_per_job"]), figures["restart_kib_per_job"]
            )
            / 1024
        )
        projected = worst + kept * (quota_jobs - jobs)
        figures["projected"] = {
            "jobs": quota_jobs,
            "peak_rss_mib": round(projected, 1),
            "fraction_of_limit": round(projected / limit_mib, 3),
        }
    return figures


def create_largest(custom: client.CustomObjectsApi, names: list[str], object_bytes: int, threads: int) -> int:
    """Create a job of each of NAMES, as large as the API server takes, THREADS at a time; the size taken."""
    size = object_bytes
    while True:
        try:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, "trainingjobs", largest_job(names[0], size)
            )
            break
        except ApiException as error:
            if error.status not in (413, 422, 500) or size < 100_000 or "too large" not in str(error.body).lower():
                raise
            size = int(size * 0.9)
            print(f"  refused as too large; trying {size} bytes", flush=True)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda n: create_patiently(custom, largest_job(n, size)), names[1:]))
    return json_bytes(largest_job(names[0], size))


def create_patiently(custom: client.CustomObjectsApi, job: dict[str, Any], attempts: int = 5) -> None:
    """Create JOB, again after the API server timed out over it (a loaded machine takes a minute
    over an object of a MiB and more); one the timed-out attempt created is there (409)."""
    for attempt in range(attempts):
        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "trainingjobs", job)
            return
        except ApiException as error:
            if error.status == 409 and attempt > 0:
                return
            if error.status not in (429, 500, 503, 504) or attempt == attempts - 1:
                raise
        except urllib3.exceptions.HTTPError:
            if attempt == attempts - 1:
                raise
        print(f"  creating {job['metadata']['name']} timed out; again", flush=True)


def jobs_seen(operator: OperatorProcess) -> int:
    """The jobs the operator counts; it must still be running (a busy one may not answer at once)."""
    assert operator.process is not None
    if operator.process.poll() is not None:
        raise RuntimeError(f"the operator exited ({operator.process.returncode}):\n{operator.log_tail()}")
    try:
        return int(sum(read_operator(operator.metrics_port).jobs_by_phase.values()))
    except OSError:
        return 0


def settle(pid: int, seconds: float) -> float:
    """The RSS once it has stopped falling for SECONDS (garbage freed, caches warm)."""
    time.sleep(seconds)
    return memory_mib(pid)[0]


def run(args: argparse.Namespace) -> dict[str, Any]:
    limit = memory_limit_mib(VALUES.read_text())
    with tempfile.TemporaryDirectory(prefix="aisched-tenant-") as state:
        print("starting a cluster...", flush=True)
        cluster = start_cluster(Path(state) / "cluster")
        try:
            readings, size = measure(cluster, Path(state), args)
        finally:
            stop_cluster(Path(state) / "cluster")
    return summarize(readings, args.jobs, size, limit, args.quota_jobs)


def measure(cluster: LocalCluster, state: Path, args: argparse.Namespace) -> tuple[dict[str, float], int]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    api.configuration.connection_pool_maxsize = 16
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    crds = REPO_ROOT / "crds"
    cluster.kubectl("apply", "--server-side", "-f", str(crds))
    cluster.kubectl("wait", "--for=condition=established", "--timeout=60s", "-f", str(crds))
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    operator = OperatorProcess(cluster, state / "operator.log", extra_env={"AISCHED_LOG_LEVEL": "WARNING"})
    readings: dict[str, float] = {}
    try:
        pid = start(operator)
        readings["idle_rss_mib"] = settle(pid, args.settle_seconds)
        print(f"idle: {readings['idle_rss_mib']:.0f} MiB; creating {args.jobs} jobs...", flush=True)
        # Half first, then the rest: what the second half adds is what a job costs, without what the
        # first jobs cost once (the client's pools, a status writer's first write, metric families).
        names, half = [f"big-{i:05d}" for i in range(args.jobs)], args.jobs // 2
        started = time.monotonic()
        size = create_largest(custom, names[:half], args.object_bytes, args.threads)
        creating = time.monotonic() - started
        wait_for(lambda: jobs_seen(operator) >= half, args.timeout, f"the operator to see {half} jobs")
        readings["half_settled_rss_mib"] = settle(pid, args.settle_seconds)
        started = time.monotonic()
        create_largest(custom, names[half:], size, args.threads)
        readings["create_seconds_per_job"] = (creating + time.monotonic() - started) / args.jobs
        wait_for(lambda: jobs_seen(operator) >= args.jobs, args.timeout, f"the operator to see {args.jobs} jobs")
        readings["peak_rss_mib"] = memory_mib(pid)[1]
        readings["settled_rss_mib"] = settle(pid, args.settle_seconds)
        print(f"{args.jobs} jobs of {size} bytes: peak {readings['peak_rss_mib']:.0f} MiB, settled "
              f"{readings['settled_rss_mib']:.0f} MiB; restarting...", flush=True)  # fmt: skip
        operator.stop()
        pid = start(operator)
        wait_for(lambda: jobs_seen(operator) >= args.jobs, args.timeout, "the restarted operator to see every job")
        readings["restart_peak_rss_mib"] = memory_mib(pid)[1]
        readings["restart_settled_rss_mib"] = settle(pid, args.settle_seconds)
        # The baseline, in the same run on the same jobs: Python's own small-object allocator, whose
        # arenas the parses of the largest jobs left pinned (aisched.controller.process_tuning).
        operator.stop()
        operator.extra_env[ALLOCATOR_VARIABLE] = "pymalloc"
        pid = start(operator)
        wait_for(lambda: jobs_seen(operator) >= args.jobs, args.timeout, "the operator on pymalloc to see every job")
        readings["pymalloc_restart_peak_rss_mib"] = memory_mib(pid)[1]
        readings["pymalloc_restart_settled_rss_mib"] = settle(pid, args.settle_seconds)
        return readings, size
    except BaseException:
        print(f"operator log (tail):\n{operator.log_tail()}", file=sys.stderr)
        raise
    finally:
        operator.stop()


def start(operator: OperatorProcess) -> int:
    operator.start()
    assert operator.process is not None
    return operator.process.pid


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--object-bytes", type=int, default=DEFAULT_OBJECT_BYTES, help="JSON bytes of each job")
    parser.add_argument("--settle-seconds", type=float, default=20)
    parser.add_argument(
        "--threads", type=int, default=2, help="jobs created at once (the API server takes seconds over each)"
    )
    parser.add_argument(
        "--quota-jobs",
        type=int,
        default=200,
        help="project the figures to this many jobs (docs/tenancy.md's ResourceQuota example) when --jobs is fewer",
    )
    parser.add_argument("--timeout", type=float, default=1200, help="seconds the operator may take to see the jobs")
    add_output_arguments(parser, "tenant_objects.json")
    return run_reporting_input_errors(measure_and_report, parser.parse_args(argv))


def measure_and_report(args: argparse.Namespace) -> int:
    result = run(args)
    result["settings"] = {
        "threads": args.threads,
        "settle_seconds": args.settle_seconds,
        "page": f"kopf {WATCH_PAGE}",
        "worker_idle_seconds": WORKER_IDLE_SECONDS,
    }
    print(report(result))
    write_figures(result, args.output, args.update_results, "tenant_objects.json")
    return 0 if result["peak_fraction_of_limit"] < 1 else 1


def report(result: dict[str, Any]) -> str:
    line = (
        f"{result['jobs']} TrainingJobs of {result['object_bytes']} bytes: operator idle {result['idle_rss_mib']} MiB, "
        f"peak {result['peak_rss_mib']} MiB, settled {result['settled_rss_mib']} MiB "
        f"({result['settled_kib_per_job']} KiB a job, {result.get('marginal_kib_per_job', '-')} KiB each of the "
        f"second half); after a restart peak {result['restart_peak_rss_mib']} MiB, "
        f"settled {result['restart_settled_rss_mib']} MiB ({result['restart_kib_per_job']} KiB a job); "
        f"chart limit {result['chart_limit_mib']} MiB (worst peak {result['peak_fraction_of_limit']:.0%} of it)"
    )
    if "pymalloc_restart_kib_per_job" in result:
        line += (
            f"; on pymalloc, restarted: peak {result['pymalloc_restart_peak_rss_mib']} MiB, settled "
            f"{result['pymalloc_restart_settled_rss_mib']} MiB ({result['pymalloc_restart_kib_per_job']} KiB a job)"
        )
    if "projected" in result:
        projected = result["projected"]
        line += (
            f"; projected to {projected['jobs']} jobs: {projected['peak_rss_mib']} MiB "
            f"({projected['fraction_of_limit']:.0%} of the limit)"
        )
    return line


if __name__ == "__main__":
    sys.exit(main())
