"""`aisched_job_pod_info`: which pods belong to which TrainingJob or InferenceService.

One series per live pod, so per-pod metrics (DCGM's) join to jobs; both kinds share it.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Gauge

from aisched.metrics.labels import KINDS, PREFIX, check, one_of


class PodInfo:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.info = Gauge(
            f"{PREFIX}_job_pod_info",
            "1 for each pod aisched runs, by namespace, pod, job_name (the owner's name) and kind "
            f"({one_of(KINDS)}); joins per-pod metrics such as DCGM's to jobs.",
            ["namespace", "pod", "job_name", "kind"],
            registry=registry,
        )
        self._pods: dict[tuple[str, str, str], set[str]] = {}

    def record(self, namespace: str, job_name: str, kind: str, pods: Iterable[str]) -> None:
        """Replace the set of pods that belong to one job or service."""
        key = (namespace, job_name, check("kind", kind, KINDS))
        current = set(pods)
        for gone in self._pods.get(key, set()) - current:
            self.info.remove(namespace, gone, job_name, kind)
        for pod in current:
            self.info.labels(namespace, pod, job_name, kind).set(1)
        self._pods[key] = current

    def forget(self, namespace: str, name: str, kind: str) -> None:
        self._pods.pop((namespace, name, kind), None)
        self.info.remove_by_labels({"namespace": namespace, "job_name": name, "kind": kind})

    def clear(self) -> None:
        self.info.clear()
        self._pods.clear()
