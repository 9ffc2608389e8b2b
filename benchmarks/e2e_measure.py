"""What the end-to-end benchmark measures on the cluster: when each pod is bound, and what an arm cost."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from aisched.kube import labels
from aisched.kube.inventory import Inventory
from aisched.policy.cluster import ClusterSnapshot, level_rank
from aisched.policy.placement import GangRequest, Placement, place_gang
from aisched.settings import Settings
from aisched.testing.cluster import LocalCluster
from benchmarks.e2e_workloads import GangShape, rank_of

T = TypeVar("T")


@dataclass(frozen=True)
class BoundPod:
    job: str
    rank: int
    node: str
    at: float


@dataclass
class BindWatch:
    """Watches the namespace's pods: when each was first seen with spec.nodeName set.

    The API server drops a watcher that reads too slowly (this process shares two busy
    cores), so the watch resumes from the last resourceVersion it saw, and relists when
    that is too old (410 Gone; pods found bound then count as bound at the relist).
    """

    core: client.CoreV1Api
    namespace: str
    job_label: str = labels.JOB_NAME
    """The pod label naming its job: aisched's, or the Job controller's for plain Jobs."""
    bound: dict[str, BoundPod] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)
    """When the watch first saw a worker of each job: the operator (or the job controller) made it."""
    ended: set[str] = field(default_factory=set)  # pods that left Running: KWOK should keep them there
    resumed: int = 0  # watches the server ended early
    relisted: int = 0
    error: BaseException | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _watch: watch.Watch = field(default_factory=watch.Watch)
    _stopping: bool = False

    def start(self) -> None:
        version = self._relist()
        threading.Thread(target=self._follow, args=(version,), name="bind-watch", daemon=True).start()

    def _relist(self) -> str:
        listing = json.loads(self.core.list_namespaced_pod(self.namespace, _preload_content=False).data)
        for pod in listing["items"]:
            self._see(pod, time.monotonic())
        version: str = listing["metadata"]["resourceVersion"]
        return version

    def _follow(self, version: str) -> None:
        try:
            while not self._stopping:
                try:
                    version = self._stream(version)
                    self.resumed += not self._stopping
                except ApiException as error:
                    if error.status != 410:
                        raise
                    version = self._relist()
                    self.relisted += 1
        except BaseException as error:  # surfaced by wait_bound
            if not self._stopping:
                self.error = error
        with self._changed:
            self._changed.notify_all()

    def _stream(self, version: str) -> str:
        self._watch = watch.Watch()
        for event in self._watch.stream(
            self.core.list_namespaced_pod,
            self.namespace,
            resource_version=version,
            timeout_seconds=3600,
            allow_watch_bookmarks=True,
            deserialize=False,
        ):
            pod = event["object"]
            version = pod["metadata"]["resourceVersion"]
            if event["type"] != "BOOKMARK":
                self._see(pod, time.monotonic())
        return version

    def _see(self, pod: dict[str, Any], now: float) -> None:
        name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            self.ended.add(name)
        pod_labels = pod["metadata"].get("labels", {})
        job = pod_labels.get(self.job_label)
        if job is not None and job not in self.created:
            self.created[job] = now
        if not node or name in self.bound:
            return
        with self._changed:
            self.bound[name] = BoundPod(pod_labels[self.job_label], rank_of(pod), node, now)
            self._changed.notify_all()

    def wait_bound(self, count: int, timeout: float) -> dict[str, BoundPod]:
        with self._changed:
            self._changed.wait_for(lambda: len(self.bound) >= count or self.error is not None, timeout)
            if self.error is not None:
                raise RuntimeError("the pod watch failed") from self.error
            return dict(self.bound)

    def stop(self) -> None:
        self._stopping = True
        self._watch.stop()


def submit(
    create: Callable[[T], object], items: Sequence[T], key: Callable[[T], str], threads: int
) -> dict[str, float]:
    """Create every item from THREADS client threads; the monotonic time each request was sent."""
    sent: dict[str, float] = {}

    def one(item: T) -> None:
        sent[key(item)] = time.monotonic()
        create(item)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, items))  # re-raises the first failure
    return sent


WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})


@dataclass(frozen=True)
class Costs:
    """What an arm cost the machine: CPU seconds per process, and the API server's write
    requests and the seconds it spent serving them, per 'VERB resource/subresource'."""

    cpu_s: dict[str, float]
    writes: dict[str, float]
    write_seconds: dict[str, float]

    def since(self, before: Costs) -> dict[str, Any]:
        def delta(now: dict[str, float], then: dict[str, float], digits: int) -> dict[str, float]:
            changes = {k: round(v - then.get(k, 0.0), digits) for k, v in now.items()}
            return dict(sorted(((k, v) for k, v in changes.items() if v > 0), key=lambda kv: -kv[1]))

        return {
            "cpu_s": delta(self.cpu_s, before.cpu_s, 1),
            "api_writes": delta(self.writes, before.writes, 0),
            "api_write_s": delta(self.write_seconds, before.write_seconds, 2),
        }


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of PID so far (0 once it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def api_write_totals(api: client.ApiClient) -> tuple[dict[str, float], dict[str, float]]:
    """From the API server's /metrics: requests and seconds spent, per write verb and resource."""
    response = api.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
    )
    wanted = {"apiserver_request_total": "count", "apiserver_request_duration_seconds_sum": "seconds"}
    totals: dict[str, dict[str, float]] = {"count": {}, "seconds": {}}
    for family in text_string_to_metric_families(response.data.decode()):
        for sample in family.samples:
            kind = wanted.get(sample.name)
            if kind is None or sample.labels.get("verb") not in WRITE_VERBS:
                continue
            what = "/".join(filter(None, (sample.labels.get("resource"), sample.labels.get("subresource"))))
            key = f"{sample.labels['verb']} {what}"
            totals[kind][key] = totals[kind].get(key, 0.0) + sample.value
    return totals["count"], totals["seconds"]


def costs(api: client.ApiClient, cluster: LocalCluster, operator_pid: int | None) -> Costs:
    pids = {p.stem: int(p.read_text()) for p in (cluster.state_dir / "pids").glob("*.pid")}
    if operator_pid is not None:
        pids["aisched"] = operator_pid
    cpu = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
    cpu["this benchmark"] = time.process_time()
    return Costs(cpu, *api_write_totals(api))


# -- figures of one arm -------------------------------------------------------------------


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


@dataclass(frozen=True)
class Topology:
    """Which gangs sit in the tightest domain their shape could ever get (on the empty cluster)."""

    empty: ClusterSnapshot

    @classmethod
    def of(cls, core: client.CoreV1Api) -> Topology:
        inventory = Inventory(Settings(topology={"preset": "local"}))  # the local cluster's labels
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
