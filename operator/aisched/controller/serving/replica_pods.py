"""The replica pods of every InferenceService, as this controller knows them.

Fed by the pod watch and by our own writes: a pod is recorded the moment we
create or delete it, so a pass that runs before the watch catches up neither
creates nor retires a replica twice.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from aisched.kube.serving_builders import ServingPod, serving_pod_from_object
from aisched.policy.cluster import ClusterSnapshot

ServiceKey = tuple[str, str]
"""(namespace, name) of an InferenceService."""
PodKey = tuple[str, str]
"""(namespace, name) of a pod."""


@dataclass
class ReplicaPods:
    gpu_resource: str
    pods: dict[ServiceKey, dict[str, ServingPod]] = field(default_factory=dict)
    """Replica pods by service, then pod name."""
    deleting: set[PodKey] = field(default_factory=set)
    """(namespace, pod) we deleted and whose deletion the watch has not shown yet."""

    def seen(self, pod: ServingPod) -> None:
        self.pods.setdefault((pod.namespace, pod.service), {})[pod.name] = pod

    def gone(self, pod: ServingPod) -> None:
        self.deleting.discard((pod.namespace, pod.name))
        self.pods.get((pod.namespace, pod.service), {}).pop(pod.name, None)

    def relisted(self, objects: Iterable[dict[str, Any]]) -> None:
        """A full relist: repairs whatever a dropped watch missed."""
        pods: dict[ServiceKey, dict[str, ServingPod]] = {}
        for obj in objects:
            pod = serving_pod_from_object(obj, self.gpu_resource)
            if pod is None:
                continue
            key = (pod.namespace, pod.service)
            # The list was read while events kept coming: an event newer than it wins.
            seen = self.pods.get(key, {}).get(pod.name)
            pods.setdefault(key, {})[pod.name] = seen if seen and seen.resource_version > pod.resource_version else pod
        self.pods = pods
        listed = {(p.namespace, p.name) for by_name in pods.values() for p in by_name.values()}
        self.deleting &= listed

    def created(self, objects: Iterable[dict[str, Any]]) -> None:
        """Pods we just created, recorded before the watch shows them."""
        for built in objects:
            pod = serving_pod_from_object(built, self.gpu_resource)
            assert pod is not None
            # The watch may have told us more already (bound, ready): never overwrite it with what we sent.
            self.pods.setdefault((pod.namespace, pod.service), {}).setdefault(pod.name, pod)

    def deleted(self, pods: Iterable[ServingPod]) -> None:
        """Pods we just deleted: they count as terminating until the watch shows them gone."""
        self.deleting.update((p.namespace, p.name) for p in pods)

    def names_of(self, key: ServiceKey) -> set[str]:
        return set(self.pods.get(key, {}))

    def of(self, key: ServiceKey) -> list[ServingPod]:
        """The service's replica pods by name, those we deleted marked terminating."""
        return [
            replace(p, terminating=True) if (p.namespace, p.name) in self.deleting else p
            for _, p in sorted(self.pods.get(key, {}).items())
        ]

    def unbound_gpus_by_node(self, snapshot: ClusterSnapshot, known_to_inventory: Container[PodKey]) -> dict[str, int]:
        """GPUs of pods pinned to a node of SNAPSHOT that neither the node nor the inventory counts yet."""
        unbound: dict[str, int] = {}
        for by_name in self.pods.values():
            for pod in by_name.values():
                node = pod.pinned_node
                # The inventory counts pinned pods once the watch has seen them; before that, we do.
                known = (pod.namespace, pod.name) in known_to_inventory
                if pod.node is None and not pod.finished and node is not None and node in snapshot and not known:
                    unbound[node] = unbound.get(node, 0) + pod.gpus
        return unbound
