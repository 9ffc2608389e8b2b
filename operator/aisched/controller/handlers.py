"""kopf handlers: each records what it sees and pokes the reconcile loop. No decisions here.

They are coroutines so that they run on the event loop with the reconcile loops: kopf runs
plain functions in worker threads, where they would race the loops over the caches.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import kopf

from aisched.api import GROUP, VERSION
from aisched.controller.serving import InferenceServiceController
from aisched.controller.training import TrainingJobController
from aisched.controller.workloads.controller import WorkloadController
from aisched.kube.inventory import Inventory
from aisched.kube.records import release_template, slim_object
from aisched.kube.workload_api import KIND_APIS
from aisched.policy.workloads.model import WorkloadKind


def register(
    registry: kopf.OperatorRegistry,
    inventory: Inventory,
    jobs: TrainingJobController,
    serving: InferenceServiceController,
    *,
    pods_watched: asyncio.Event | None = None,
    workloads: WorkloadController | None = None,
) -> None:
    """PODS_WATCHED: set at the pod watch's first event (see `main._relist_once_watching`)."""

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def node_event(event: kopf.RawEvent, name: str, **_: Any) -> None:
        if event["type"] == "DELETED":
            changed = inventory.delete_node(name, _resource_version(event))
        else:
            changed = inventory.upsert_node(dict(event["object"]))
        if changed:  # a heartbeat changes nothing placement sees, and wakes nobody
            jobs.node_changed(name)
            serving.node_changed(name)

    @kopf.on.event("", "v1", "pods", registry=registry)
    async def pod_event(event: kopf.RawEvent, name: str, namespace: str | None, **_: Any) -> None:
        if pods_watched is not None:
            pods_watched.set()
        if event["type"] == "DELETED":
            record = inventory.delete_pod(namespace or "", name, _resource_version(event))
        else:
            record = inventory.upsert_pod(dict(event["object"]))
        jobs.pod_changed(record)
        serving.pod_changed(dict(event["object"]), deleted=event["type"] == "DELETED")
        if workloads is not None:
            workloads.pod_changed(event["object"], deleted=event["type"] == "DELETED")

    @kopf.on.event("resource.k8s.io", "v1", "resourceclaims", registry=registry)
    async def claim_event(event: kopf.RawEvent, name: str, namespace: str | None, **_: Any) -> None:
        # What a pod holds through DRA is what its claims are allocated: a claim's change is its pods'.
        if event["type"] == "DELETED":
            changed = inventory.delete_claim(namespace or "", name, _resource_version(event))
        else:
            changed = inventory.upsert_claim(dict(event["object"]))
        for record in changed:
            jobs.pod_changed(record)
        if changed:
            serving.capacity_changed()

    @kopf.on.event(GROUP, VERSION, "trainingjobs", registry=registry)
    async def training_job_event(event: kopf.RawEvent, name: str, namespace: str | None, **_: Any) -> None:
        if event["type"] == "DELETED":
            jobs.job_gone(namespace or "", name)
        else:
            jobs.job_seen(slim_object(dict(event["object"])))
        release_template(cast(dict[str, Any], event["object"]))  # kopf's RawBody: the parsed JSON

    @kopf.on.event(GROUP, VERSION, "queues", registry=registry)
    async def queue_event(event: kopf.RawEvent, name: str, **_: Any) -> None:
        if event["type"] == "DELETED":
            jobs.queue_gone(name)
        else:
            jobs.queue_seen(slim_object(dict(event["object"])))
        serving.queue_changed(name)  # its tenancy may take (or refuse) services now

    @kopf.on.event(GROUP, VERSION, "inferenceservices", registry=registry)
    async def inference_service_event(event: kopf.RawEvent, name: str, namespace: str | None, **_: Any) -> None:
        if event["type"] == "DELETED":
            serving.service_gone(namespace or "", name)
        else:
            serving.service_seen(slim_object(dict(event["object"])))

    if workloads is not None:
        for kind in workloads.object_kinds:
            _watch_kind(registry, workloads, kind)


def _watch_kind(registry: kopf.OperatorRegistry, workloads: WorkloadController, kind: WorkloadKind) -> None:
    """Every object of KIND, while the cluster serves it (kopf waits for a CRD that is not installed)."""
    api = KIND_APIS[kind]

    @kopf.on.event(api.group, api.version, api.plural, registry=registry)
    async def workload_event(event: kopf.RawEvent, name: str, namespace: str | None, **_: Any) -> None:
        if event["type"] == "DELETED":
            workloads.object_gone(kind, namespace or "", name, _resource_version(event))
        else:
            workloads.object_seen(kind, event["object"])


def _resource_version(event: kopf.RawEvent) -> str | None:
    version = (event["object"].get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None
