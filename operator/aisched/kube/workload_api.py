"""The API calls on other kinds' workloads: list them, record an admission on one, suspend it, place its pods.

Every kind is reached by its group, version and plural through the generic object paths
(`/apis/<group>/<version>/...`), so one call serves a Job, a PyTorchJob or a RayCluster alike; a
kind whose CRD is not installed lists as empty (404), and is asked for nothing else.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from kubernetes.client.exceptions import ApiException

from aisched.kube.client import KubeClient, Listing
from aisched.kube.labels import HOSTNAME
from aisched.policy.workloads.model import ADMISSION_GATE, WorkloadKind

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class KindApi:
    group: str
    version: str
    plural: str
    suspend_path: tuple[str, ...] | None
    """Where its spec says suspend (None: a kind that cannot be suspended: its pods go instead)."""

    def suspend_patch(self, suspended: bool) -> dict[str, Any]:
        if self.suspend_path is None:
            return {}
        patch: dict[str, Any] = {self.suspend_path[-1]: suspended}
        for step in reversed(self.suspend_path[:-1]):
            patch = {step: patch}
        return patch


KIND_APIS: Final[Mapping[WorkloadKind, KindApi]] = {
    WorkloadKind.BATCH_JOB: KindApi("batch", "v1", "jobs", ("spec", "suspend")),
    WorkloadKind.PYTORCH_JOB: KindApi("kubeflow.org", "v1", "pytorchjobs", ("spec", "runPolicy", "suspend")),
    WorkloadKind.RAY_JOB: KindApi("ray.io", "v1", "rayjobs", ("spec", "suspend")),
    WorkloadKind.RAY_CLUSTER: KindApi("ray.io", "v1", "rayclusters", ("spec", "suspend")),
    WorkloadKind.DEPLOYMENT: KindApi("apps", "v1", "deployments", None),
    WorkloadKind.STATEFUL_SET: KindApi("apps", "v1", "statefulsets", None),
}


class WorkloadApi:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    async def list_kind(
        self, kind: WorkloadKind, convert: Callable[[dict[str, Any]], T], *, page_size: int
    ) -> Listing[T] | None:
        """Every object of KIND in every namespace; None when the cluster does not serve the kind."""
        api = KIND_APIS[kind]
        method = functools.partial(self.kube.custom.list_cluster_custom_object, api.group, api.version, api.plural)
        try:
            return await self.kube._list(method, convert, page_size)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def list_kind_metadata(
        self, kind: WorkloadKind, convert: Callable[[dict[str, Any]], T], *, page_size: int
    ) -> Listing[T] | None:
        """The metadata of every object of KIND (a relist needs no more); None when the cluster does not serve it."""
        api = KIND_APIS[kind]
        try:
            return await self.kube.list_metadata(
                f"/apis/{api.group}/{api.version}/{api.plural}", convert, page_size=page_size
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def patch_object(self, kind: WorkloadKind, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        """Merge PATCH into the object; False when it is gone, or changed since the resourceVersion PATCH names."""
        api = KIND_APIS[kind]
        try:
            await self.kube._send(
                self.kube.custom.patch_namespaced_custom_object,
                api.group,
                api.version,
                namespace,
                api.plural,
                name,
                patch,
                _content_type="application/merge-patch+json",
            )
        except ApiException as error:
            if error.status in (404, 409):
                return False
            raise
        return True

    async def place_pod(
        self, namespace: str, name: str, node: str | None, gates: tuple[str, ...], *, has_selector: bool
    ) -> None:
        """Pin the gated pod to NODE (None: a pod of no GPUs, kube-scheduler's to place) and lift the
        admission gate, leaving any other gate, in one write: the API server allows a node selector to be
        added only while the pod is gated, so both land together or neither does."""
        ops: list[dict[str, Any]] = []
        if node is not None:
            if has_selector:
                ops.append({"op": "add", "path": f"/spec/nodeSelector/{_pointer(HOSTNAME)}", "value": node})
            else:
                ops.append({"op": "add", "path": "/spec/nodeSelector", "value": {HOSTNAME: node}})
        kept = [{"name": g} for g in gates if g != ADMISSION_GATE]
        ops.append({"op": "test", "path": "/spec/schedulingGates", "value": [{"name": g} for g in gates]})
        ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": kept})
        try:
            await self.kube._send(
                self.kube.core.patch_namespaced_pod, name, namespace, ops, _content_type="application/json-patch+json"
            )
        except ApiException as error:
            if error.status not in (404, 409, 422):  # gone, changed under us (the next event retries), or placed
                raise


def _pointer(key: str) -> str:
    """KEY as one JSON pointer step (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
