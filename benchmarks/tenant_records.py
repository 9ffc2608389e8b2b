"""Tenant records: what the operator keeps of each TrainingJob, by the shape a tenant gives it, in process.

Issue #27: a tenant's objects cost the operator memory in the number its namespace holds.
`tenant_objects` measures the operator process against a real API server, which on a small
machine holds tens of the largest objects, not hundreds; this one puts JOBS objects of each
shape through the TrainingJob store as its watch does (`json.loads` of the object's JSON,
`JobStore.seen`, which keeps a large template without what only the pods need, and the model
read once as the cycle reads it), in a fresh process per shape on glibc's allocator (as the
operator runs), and reads the resident memory they leave once the allocator has given back
what they freed. Shapes, each the most items the CRD admits where it puts them:

- `usual`: a template as people write it (one container, a few env entries, a mount);
- `process`: 1.4 MB whose items are in what a large template is kept without: every container
  at its bounds of env, envFrom, args and command, then empty objects and strings in affinity
  (`tenant_objects.largest_job`);
- `kept`: items in what a large template keeps for the pod policy and placement: 32 containers
  with every capability, host port and hostPath mount the bounds allow, 128 hostPath volumes,
  tolerations, a node selector, sysctls and supplemental groups at their bounds.

Baseline in the same run: each shape kept whole (`--whole`, the record before the template
was elided). Figures: KiB a job above the idle process, and that projected to `--quota-jobs`
(the ResourceQuota example of docs/tenancy.md) against the chart's memory limit.

Usage: .venv/bin/python -m benchmarks.tenant_records [--jobs 200] [--quota-jobs 200]
       [--output PATH] [--update-results]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from aisched.api import GROUP, VERSION
from aisched.api.pod_template import (
    MAX_CAPABILITIES,
    MAX_CAPABILITY_LENGTH,
    MAX_CONTAINERS,
    MAX_LIST_ITEMS,
    MAX_NODE_SELECTOR,
    MAX_PATH_LENGTH,
    MAX_PORTS,
    MAX_RESOURCES,
    MAX_SCALAR_LIST_ITEMS,
    MAX_STRING_LENGTH,
    MAX_TOLERATIONS,
    MAX_VOLUME_MOUNTS,
    MAX_VOLUMES,
)
from aisched.controller import templates
from aisched.controller.cluster_state import ClusterState
from aisched.controller.process_tuning import ALLOCATOR_VARIABLE, trim_heap
from aisched.controller.training.store import JobStore
from aisched.kube.inventory import Inventory
from aisched.settings import Settings
from benchmarks.common import REPO_ROOT, add_output_arguments, write_figures
from benchmarks.scale_probe import memory_mib
from benchmarks.tenant_objects import DEFAULT_OBJECT_BYTES, VALUES, largest_job, memory_limit_mib

SHAPES = ("usual", "process", "kept")
# Supplemental groups and sysctls: the schema's bound for a list of scalars, or of objects.
MAX_SYSCTLS = MAX_LIST_ITEMS


def _job(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "tenant", "resourceVersion": "1", "uid": name},
        "spec": {"gpusPerReplica": 1, "queue": "nowhere", "template": {"spec": pod}},
    }


def usual_job(name: str) -> dict[str, Any]:
    container = {
        "name": "trainer",
        "image": "registry.example.com/team/trainer:1.4.2",
        "args": ["--epochs", "10", "--batch-size", "64"],
        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "HF_HOME", "value": "/cache"}],
        "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "64Gi"}},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    pod = {"containers": [container], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
    return _job(name, pod)


def _capability(container: str, index: int) -> str:
    """A capability name of its longest, distinct in the whole template."""
    return f"CAP_{container}_{index}_".ljust(MAX_CAPABILITY_LENGTH, "X")


def _kept_container(name: str) -> dict[str, Any]:
    """A container with every list the elided record keeps at its bound, of short distinct items."""
    return {
        "name": name,
        "image": "busybox",
        "resources": {"limits": {f"example.com/r{i}": "1" for i in range(MAX_RESOURCES)}},
        "ports": [{"containerPort": i + 1, "hostPort": i + 1} for i in range(MAX_PORTS)],
        "volumeMounts": [{"name": f"h{v}", "mountPath": f"/m{v}"} for v in range(MAX_VOLUME_MOUNTS)],
        "securityContext": {
            "capabilities": {
                "add": [_capability(name, i) for i in range(MAX_CAPABILITIES)],
                "drop": [_capability(f"d{name}", i) for i in range(MAX_CAPABILITIES)],
            }
        },
    }


def kept_job(name: str, object_bytes: int = DEFAULT_OBJECT_BYTES) -> dict[str, Any]:
    """Every list the elided record keeps at its bound; the bytes left go to strings it keeps (the
    hostPath volumes' paths, then SELinux levels: a byte a byte, the least of what it keeps)."""
    containers = [_kept_container(f"c{i}") for i in range(MAX_CONTAINERS)]
    limits = containers[0]["resources"]["limits"]
    limits.pop(next(iter(limits)))
    limits["nvidia.com/gpu"] = 1
    init_containers = [_kept_container(f"i{i}") for i in range(MAX_CONTAINERS)]
    volumes: list[dict[str, Any]] = [{"name": f"h{v}", "hostPath": {"path": f"/p{v}"}} for v in range(MAX_VOLUMES)]
    pod = {
        "containers": containers,
        "initContainers": init_containers,
        "volumes": volumes,
        "tolerations": [{"key": f"k{i}", "operator": "Exists"} for i in range(MAX_TOLERATIONS)],
        "nodeSelector": {f"k{i}": "v" for i in range(MAX_NODE_SELECTOR)},
        "securityContext": {
            "supplementalGroups": list(range(MAX_SCALAR_LIST_ITEMS)),
            "sysctls": [{"name": f"s{i}", "value": "1"} for i in range(MAX_SYSCTLS)],
        },
    }
    job = _job(name, pod)
    room = object_bytes - len(json.dumps(job, separators=(",", ":")))
    for volume in volumes:
        path = volume["hostPath"]["path"]
        volume["hostPath"]["path"] = path + "/x" * (
            (min(MAX_PATH_LENGTH, len(path) + room // MAX_VOLUMES) - len(path)) // 2
        )
    # What the paths could not take goes to the containers' SELinux levels, kept with their security context.
    room = object_bytes - len(json.dumps(job, separators=(",", ":")))
    everyone = [*containers, *init_containers]
    level = "s" * min(MAX_STRING_LENGTH, max(0, room // len(everyone) - len(',"seLinuxOptions":{"level":""}')))
    for container in everyone:
        container["securityContext"]["seLinuxOptions"] = {"level": level}
    return job


BUILDERS: dict[str, Callable[[str], dict[str, Any]]] = {
    "usual": usual_job,
    "process": lambda name: largest_job(name, DEFAULT_OBJECT_BYTES),
    "kept": kept_job,
}


def settled_mib() -> float:
    gc.collect()
    trim_heap()
    return memory_mib(os.getpid())[0]


def child(shape: str, jobs: int, whole: bool) -> dict[str, Any]:
    """In this process: JOBS objects of SHAPE through the store; the memory before and after."""
    if whole:
        templates.KEPT_TEMPLATE_BYTES = sys.maxsize  # type: ignore[misc]  # the baseline: nothing elided
    texts = [json.dumps(BUILDERS[shape](f"job-{i}"), separators=(",", ":")) for i in range(2)]
    store = JobStore(ClusterState(Inventory(Settings())))
    idle = settled_mib()
    for i in range(jobs):
        # The watch's parse of the object: two texts that differ by name, so no parse is shared.
        obj = json.loads(texts[i % 2].replace(f'"job-{i % 2}"', f'"job-{i:06d}"'))
        key = store.seen(obj)
        assert key is not None
        # One the CRD refuses would measure nothing a tenant can make (and is kept whole, for its condition).
        assert store.read(store.jobs[key]) is not None, store.refusal(store.jobs[key])
        del obj
    settled = settled_mib()
    assert len(store.jobs) == jobs
    return {"object_bytes": len(texts[0]), "idle_rss_mib": idle, "settled_rss_mib": settled}


def measure(shape: str, jobs: int, whole: bool) -> dict[str, Any]:
    """CHILD in a fresh process on glibc's allocator, as the operator runs."""
    command = [sys.executable, "-m", "benchmarks.tenant_records", "--child", shape, "--jobs", str(jobs)]
    env = {**os.environ, ALLOCATOR_VARIABLE: "malloc"}
    done = subprocess.run(
        [*command, *(["--whole"] if whole else [])], capture_output=True, text=True, env=env, cwd=REPO_ROOT, check=True
    )
    reading: dict[str, Any] = json.loads(done.stdout)
    return reading


def summarize(readings: dict[str, dict[str, Any]], jobs: int, quota_jobs: int, limit_mib: float) -> dict[str, Any]:
    figures: dict[str, Any] = {"jobs": jobs, "quota_jobs": quota_jobs, "chart_limit_mib": limit_mib, "shapes": {}}
    for name, reading in readings.items():
        per_job = (reading["settled_rss_mib"] - reading["idle_rss_mib"]) * 1024 / jobs
        projected = reading["idle_rss_mib"] + per_job * quota_jobs / 1024
        figures["shapes"][name] = {
            **{k: round(v, 1) for k, v in reading.items()},
            "kib_per_job": round(per_job, 1),
            "projected_rss_mib": round(projected, 1),
            "projected_fraction_of_limit": round(projected / limit_mib, 3),
        }
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--quota-jobs", type=int, default=200)
    parser.add_argument("--child", choices=SHAPES, help=argparse.SUPPRESS)
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    add_output_arguments(parser, "tenant_records.json")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.jobs, args.whole)))
        return 0
    readings = {}
    for shape in SHAPES:
        for whole in (False, True):
            name = f"{shape}_whole" if whole else shape
            readings[name] = measure(shape, args.jobs, whole)
            print(f"{name}: {readings[name]}", flush=True)
    figures = summarize(readings, args.jobs, args.quota_jobs, memory_limit_mib(VALUES.read_text()))
    for name, shape in figures["shapes"].items():
        print(
            f"{name:>14}: {shape['object_bytes']:>9,} B of JSON, {shape['kib_per_job']:>8,.1f} KiB a job; "
            f"{args.quota_jobs} jobs: {shape['projected_rss_mib']:,.0f} MiB "
            f"({shape['projected_fraction_of_limit']:.0%} of the chart's {figures['chart_limit_mib']:.0f} MiB)"
        )
    write_figures(figures, args.output, args.update_results, "tenant_records.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
