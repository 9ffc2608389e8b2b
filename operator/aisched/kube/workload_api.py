"""The API calls on other kinds' workloads: list them, record an admission on one, suspend it, place its pods.

Every kind is reached by its group, version and plural through the generic object paths
(`/apis/<group>/<version>/...`), so one call serves a Job, a PyTorchJob or a RayCluster alike; a
kind whose CRD is not installed lists as empty (404), and is asked for nothing else.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from kubernetes.client.exceptions import ApiException

from aisched.kube.client import KubeClient, Listing
from aisched.kube.labels import HOSTNAME
from aisched.kube.ownership import names_owner
from aisched.policy.workloads.model import ADMISSION_GATE, CHARGED_QUEUE_LABEL, WorkloadKind

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class KindApi:
    group: str
    version: str
    kind: str
    plural: str
    suspend_path: tuple[str, ...] | None
    """Where its spec says suspend (None: a kind that cannot be suspended: its pods go instead)."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def suspend_patch(self, suspended: bool) -> dict[str, Any]:
        if self.suspend_path is None:
            return {}
        patch: dict[str, Any] = {self.suspend_path[-1]: suspended}
        for step in reversed(self.suspend_path[:-1]):
            patch = {step: patch}
        return patch


KIND_APIS: Final[Mapping[WorkloadKind, KindApi]] = {
    WorkloadKind.BATCH_JOB: KindApi("batch", "v1", "Job", "jobs", ("spec", "suspend")),
    WorkloadKind.PYTORCH_JOB: KindApi(
        "kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", ("spec", "runPolicy", "suspend")
    ),
    WorkloadKind.RAY_JOB: KindApi("ray.io", "v1", "RayJob", "rayjobs", ("spec", "suspend")),
    WorkloadKind.RAY_CLUSTER: KindApi("ray.io", "v1", "RayCluster", "rayclusters", ("spec", "suspend")),
    WorkloadKind.DEPLOYMENT: KindApi("apps", "v1", "Deployment", "deployments", None),
    WorkloadKind.STATEFUL_SET: KindApi("apps", "v1", "StatefulSet", "statefulsets", None),
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
            return await self.kube.list_paged(method, convert, page_size)
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
            await self.kube.send(
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
        self,
        namespace: str,
        name: str,
        node: str | None,
        gates: tuple[str, ...],
        *,
        has_selector: bool,
        queue: str,
        has_labels: bool = True,
    ) -> None:
        """Pin the gated pod to NODE (None: a pod of no GPUs, kube-scheduler's to place), label it with the
        QUEUE it is charged to, and lift the admission gate, leaving any other gate, in one write: the API
        server allows a node selector to be added only while the pod is gated, so all land together or none
        does, and no pod runs without the label."""
        ops: list[dict[str, Any]] = []
        if has_labels:
            ops.append({"op": "add", "path": f"/metadata/labels/{_pointer(CHARGED_QUEUE_LABEL)}", "value": queue})
        else:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {CHARGED_QUEUE_LABEL: queue}})
        if node is not None:
            if has_selector:
                ops.append({"op": "add", "path": f"/spec/nodeSelector/{_pointer(HOSTNAME)}", "value": node})
            else:
                ops.append({"op": "add", "path": "/spec/nodeSelector", "value": {HOSTNAME: node}})
        kept = [{"name": g} for g in gates if g != ADMISSION_GATE]
        ops.append({"op": "test", "path": "/spec/schedulingGates", "value": [{"name": g} for g in gates]})
        ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": kept})
        try:
            await self.kube.send(
                self.kube.core.patch_namespaced_pod, name, namespace, ops, _content_type="application/json-patch+json"
            )
        except ApiException as error:
            if error.status not in (404, 409, 422):  # gone, changed under us (the next event retries), or placed
                raise


POD_GROUP_API: Final = ("scheduling.k8s.io", "v1beta1", "podgroups")
"""Kubernetes' PodGroup (Beta in 1.37, behind GenericWorkload): kube-scheduler binds its pods all or none."""
POD_GROUP_RUN_ANNOTATION: Final = "aisched.io/admission-generation"
"""On a PodGroup the operator made: the admission it was made for (`AdmittedRecord.generation`)."""
POD_GROUP_MANAGED_LABEL: Final = "aisched.io/pod-group"
"""On a PodGroup the operator made, for people to find them; what makes one the operator's is its owner."""


POD_GROUP_ATTEMPTS: Final = 50
POD_GROUP_RETRY_SECONDS: Final = 0.2
"""An earlier run's PodGroup being deleted is waited for this long between tries (10 s in all)."""


class PodGroupTakenError(Exception):
    """A PodGroup of the name a workload's pods ask for exists, and the operator did not make it."""


@dataclass(frozen=True, slots=True)
class PodGroupOwner:
    """The workload a PodGroup is made for: it goes with it (its owner reference)."""

    api_version: str
    kind: str
    name: str
    uid: str


class PodGroups:
    """Kubernetes' PodGroups for the gangs the operator places, where the cluster serves them."""

    def __init__(self, kube: KubeClient, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.kube = kube
        self.sleep = sleep

    async def ensure(self, namespace: str, name: str, *, min_count: int, owner: PodGroupOwner, run: int) -> bool:
        """The gang PodGroup NAME of MIN_COUNT pods for admission RUN of OWNER: made, or made again where an
        earlier admission's is left (its pods have all scheduled once, so kube-scheduler would no longer wait
        for the new run's together). False when the cluster serves no PodGroups. Raises `PodGroupTakenError`
        when one of that name is not the operator's: its pods are never placed under a tenant's policy."""
        group, version, plural = POD_GROUP_API
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {POD_GROUP_MANAGED_LABEL: "true"},
                "annotations": {POD_GROUP_RUN_ANNOTATION: str(run)},
                "ownerReferences": [
                    {
                        "apiVersion": owner.api_version,
                        "kind": owner.kind,
                        "name": owner.name,
                        "uid": owner.uid,
                        "controller": False,
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        }
        for _ in range(POD_GROUP_ATTEMPTS):
            try:
                await self.kube.send(
                    self.kube.custom.create_namespaced_custom_object, group, version, namespace, plural, body
                )
                return True
            except ApiException as error:
                if error.status == 404:
                    return False  # not served (or its namespace is going): the gates alone hold the gang
                if error.status != 409:
                    raise
            found = await self._get(namespace, name)
            if found is not None:
                metadata = found.get("metadata") or {}
                if not names_owner(found, body):
                    raise PodGroupTakenError(
                        f"PodGroup {name} exists and was not made by aisched for this workload: its pods stay held"
                    )
                deleting = metadata.get("deletionTimestamp") is not None
                if not deleting and (metadata.get("annotations") or {}).get(POD_GROUP_RUN_ANNOTATION) == str(run):
                    return True
                if not deleting:
                    await self._delete(namespace, name)
                # Its finalizer goes once no live pod names it (kube-controller-manager's PodGroup protection):
                # the last run's pods are gone before a run is admitted, so that is a moment away.
                await self.sleep(POD_GROUP_RETRY_SECONDS)
        raise TimeoutError(f"PodGroup {name} of an earlier run is still being deleted")

    async def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        group, version, plural = POD_GROUP_API
        try:
            data = await self.kube.send(
                self.kube.custom.get_namespaced_custom_object, group, version, namespace, plural, name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        found: dict[str, Any] = json.loads(data)
        return found

    async def _delete(self, namespace: str, name: str) -> None:
        group, version, plural = POD_GROUP_API
        try:
            await self.kube.send(
                self.kube.custom.delete_namespaced_custom_object, group, version, namespace, plural, name
            )
        except ApiException as error:
            if error.status != 404:
                raise


def _pointer(key: str) -> str:
    """KEY as one JSON pointer step (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")
