"""The replica pods of every InferenceService, as this controller knows them.

Fed by the pod watch and by our own writes: a pod is recorded the moment we
create or delete it, so a pass that runs before the watch catches up neither
creates nor retires a replica twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from aisched.kube.serving_builders import ServingPod, serving_pod_from_object
from aisched.kube.versions import VersionLedger

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
    _versions: VersionLedger[PodKey] = field(default_factory=VersionLedger)
    _unconfirmed: set[PodKey] = field(default_factory=set)
    """Pods we created that neither the watch nor a relist has shown yet."""
    confirmed: Callable[[PodKey], None] = lambda _key: None
    """Told of each pod the watch (or a relist) shows, or shows gone: what it was promised may settle."""

    def seen(self, pod: ServingPod) -> bool:
        """A watch event, or a listed copy; False (and ignored) when we hold a newer one."""
        key = (pod.namespace, pod.name)
        if self._versions.is_stale(key, pod.resource_version):
            return False
        self._versions.saw(key, pod.resource_version)
        self._unconfirmed.discard(key)
        self.pods.setdefault((pod.namespace, pod.service), {})[pod.name] = pod
        self.confirmed(key)
        return True

    def gone(self, pod: ServingPod) -> bool:
        """A deletion event, or a relist that no longer lists POD; False when we hold a newer copy."""
        key = (pod.namespace, pod.name)
        self.deleting.discard(key)
        if self._versions.is_stale(key, pod.resource_version):
            return False
        self._versions.deleted(key, pod.resource_version)
        self._unconfirmed.discard(key)
        self.confirmed(key)
        by_name = self.pods.get((pod.namespace, pod.service), {})
        by_name.pop(pod.name, None)
        if not by_name:
            self.pods.pop((pod.namespace, pod.service), None)
        return True

    def relisted(self, listed: Iterable[ServingPod], list_version: str) -> set[ServiceKey]:
        """A full relist at LIST_VERSION, repairing whatever a dropped watch missed; the services it changed.

        The list was read while events kept coming: a copy the watch gave after it wins,
        a pod the watch saw appear after it stays, and so does a pod we created since the
        last relist (the list may have been read before the create).
        """
        self._versions.begin_relist(list_version)
        held = {(p.namespace, p.name): p for by_name in self.pods.values() for p in by_name.values()}
        present, changed = set(), set()
        for pod in listed:
            key = (pod.namespace, pod.name)
            present.add(key)
            if held.get(key) != pod and self.seen(pod):
                changed.add((pod.namespace, pod.service))
        for key in self._versions.absent(present, list_version):
            vanished = held.get(key)
            if vanished is not None and key not in self._unconfirmed:
                self.gone(replace(vanished, resource_version=list_version))
                changed.add((vanished.namespace, vanished.service))
        self._unconfirmed.clear()  # the next relist judges them as any other pod
        self.deleting &= present
        return changed

    def unconfirmed(self, key: PodKey) -> bool:
        """We created the pod and no watch event or relist has shown it (or its end) yet."""
        return key in self._unconfirmed

    def created(self, objects: Iterable[dict[str, Any]]) -> None:
        """Pods we just created, recorded before the watch shows them."""
        for built in objects:
            pod = serving_pod_from_object(built, self.gpu_resource)
            assert pod is not None
            key = (pod.namespace, pod.name)
            # The watch may have told us more already (bound, ready): never overwrite it with what we sent.
            if pod.name not in self.pods.get((pod.namespace, pod.service), {}):
                self.pods.setdefault((pod.namespace, pod.service), {})[pod.name] = pod
                self._versions.saw(key, None)
                self._unconfirmed.add(key)

    def deleted(self, pods: Iterable[ServingPod]) -> None:
        """Pods we just deleted: they count as terminating until the watch shows them gone."""
        self.deleting.update((p.namespace, p.name) for p in pods)

    def services_on(self, node: str) -> set[ServiceKey]:
        """Services with a replica bound or pinned to NODE."""
        return {
            key for key, by_name in self.pods.items() if any(node in (p.node, p.pinned_node) for p in by_name.values())
        }

    def names_of(self, key: ServiceKey) -> set[str]:
        return set(self.pods.get(key, {}))

    def of(self, key: ServiceKey) -> list[ServingPod]:
        """The service's replica pods by name, those we deleted marked terminating."""
        return [
            replace(p, terminating=True) if (p.namespace, p.name) in self.deleting else p
            for _, p in sorted(self.pods.get(key, {}).items())
        ]
