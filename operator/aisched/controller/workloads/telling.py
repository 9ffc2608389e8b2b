"""What a workload of another kind is told: an Event on its object (a pod group: on its first pod),
once per change of what is said, so that `kubectl describe` shows why it waits, runs or stopped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from aisched.controller.workloads.book import WorkloadEntry
from aisched.controller.workloads.pods import WorkloadRef
from aisched.kube.client import KubeClient
from aisched.kube.workload_api import KIND_APIS
from aisched.policy.workloads.model import WorkloadKind

KIND_NAMES: Final = {
    WorkloadKind.BATCH_JOB: "Job",
    WorkloadKind.PYTORCH_JOB: "PyTorchJob",
    WorkloadKind.RAY_JOB: "RayJob",
    WorkloadKind.RAY_CLUSTER: "RayCluster",
    WorkloadKind.DEPLOYMENT: "Deployment",
    WorkloadKind.STATEFUL_SET: "StatefulSet",
}


@dataclass
class Teller:
    kube: KubeClient
    _said: dict[WorkloadRef, tuple[str, str]] = field(default_factory=dict)

    def say(self, entry: WorkloadEntry, event_type: str, reason: str, message: str) -> None:
        if self._said.get(entry.ref) == (reason, message):
            return
        self._said[entry.ref] = (reason, message)
        kind, namespace, name = entry.ref
        target: dict[str, Any]
        if kind is WorkloadKind.POD_GROUP:
            if not entry.pods:
                return
            target = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": namespace, "name": min(entry.pods)}}
        else:
            api = KIND_APIS[kind]
            target = {
                "apiVersion": f"{api.group}/{api.version}",
                "kind": KIND_NAMES[kind],
                "metadata": {"namespace": namespace, "name": name, "uid": entry.uid},
            }
        self.kube.post_event(target, event_type, reason, message)

    def forget(self, ref: WorkloadRef) -> None:
        self._said.pop(ref, None)
