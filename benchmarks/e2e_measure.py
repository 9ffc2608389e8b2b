"""What the end-to-end benchmark measures on the cluster: when each pod is bound, and what an arm cost."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from aisched.kube import labels
from aisched.testing.cluster import LocalCluster

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
    bound: dict[str, BoundPod] = field(default_factory=dict)
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
        if not node or name in self.bound:
            return
        pod_labels = pod["metadata"].get("labels", {})
        with self._changed:
            self.bound[name] = BoundPod(pod_labels[labels.JOB_NAME], int(pod_labels[labels.RANK]), node, now)
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
