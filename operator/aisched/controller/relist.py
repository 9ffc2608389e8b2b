"""Listing the cluster: at start-up, then periodically, repairing whatever a dropped watch missed.

At start-up (`sync_caches`) every kind a cycle decides from is listed whole and handed to the
same record handlers as a watch event, before any loop starts: client-go's WaitForCacheSync.
A cycle that ran on what the watches had delivered so far once admitted a job beside a running
gang of its queue whose TrainingJob had not arrived yet, uncharged (a kill-at-write test saw it
on a loaded machine).

A watch that drops and reconnects (kopf lists again) never reports what was
deleted meanwhile; a relist does: nodes and pods go through the inventory,
which keeps newer watch state and deletes only what the list proves gone, and
TrainingJobs and InferenceServices the list no longer has are forgotten. The
controllers are told what changed, and only that: the jobs whose pods or nodes
the relist moved are marked, not every job.

Every list is paginated and each page reduced to what is kept before the next
is read, so a cluster of a hundred thousand pods is never held as JSON at once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aisched.api.common import GROUP, VERSION
from aisched.controller.serving import InferenceServiceController
from aisched.controller.serving.autoscaling import PLURAL as SERVICES
from aisched.controller.training import TrainingJobController
from aisched.controller.training.store import PLURAL as TRAINING_JOBS
from aisched.controller.workloads.controller import WorkloadController
from aisched.kube.client import KubeClient, Listing
from aisched.kube.inventory import Inventory, PodRecord
from aisched.kube.records import release_template, slim_object
from aisched.kube.serving_builders import ServingPod, serving_pod_from_object
from aisched.kube.versions import is_newer
from aisched.policy.workloads.model import WorkloadKind

log = logging.getLogger(__name__)
QUEUES = "queues"
ObjectKey = tuple[str, str]
"""(namespace, name) of a TrainingJob or an InferenceService."""


@dataclass(frozen=True, slots=True)
class ListedPod:
    """What each controller keeps of one listed pod."""

    record: PodRecord | None
    replica: ServingPod | None


@dataclass(frozen=True, slots=True)
class ListedObject:
    """One of our objects as a list names it: enough to tell which are gone."""

    namespace: str
    name: str
    resource_version: str


def listed_object(obj: dict[str, Any]) -> ListedObject:
    metadata = obj["metadata"]
    return ListedObject(metadata.get("namespace") or "", metadata["name"], metadata.get("resourceVersion") or "")


def gone_from_list(
    held: Mapping[ObjectKey, dict[str, Any]], listed: set[ObjectKey], list_version: str
) -> list[ObjectKey]:
    """Objects we hold that a list at LIST_VERSION left out, last seen no later than it.

    One seen at a newer version was created after the list was read, and stays.
    """
    return [
        key
        for key, obj in held.items()
        if key not in listed and not is_newer(obj["metadata"].get("resourceVersion"), list_version)
    ]


async def sync_caches(
    kube: KubeClient,
    inventory: Inventory,
    jobs: TrainingJobController,
    serving: InferenceServiceController,
    *,
    page_size: int,
    object_page_size: int,
    workloads: WorkloadController | None = None,
) -> None:
    """Fill every cache a cycle reads before the first cycle: Queues, nodes, pods, and each
    TrainingJob and InferenceService whole, as their watch events would.

    The periodic relist reads only our objects' metadata (a tenant's object may be a MiB of
    template); here OBJECT_PAGE_SIZE of them at a time are parsed, handed over and their templates
    let go before the next page.
    """
    await relist(kube, inventory, jobs, serving, page_size=page_size, workloads=workloads)

    def job_listed(obj: dict[str, Any]) -> None:
        jobs.job_seen(slim_object(obj))
        release_template(obj)

    def service_listed(obj: dict[str, Any]) -> None:
        serving.service_seen(slim_object(obj))

    # Nothing else runs yet: a handler called while a list pages is as good as after it.
    await kube.list_custom(TRAINING_JOBS, job_listed, page_size=object_page_size)
    await kube.list_custom(SERVICES, service_listed, page_size=object_page_size)
    if workloads is not None:  # every other kind the cluster serves: a kind it does not lists as nothing
        for kind in workloads.object_kinds:
            await workloads.api.list_kind(
                kind, functools.partial(workloads.object_seen, kind), page_size=object_page_size
            )


async def relist(
    kube: KubeClient,
    inventory: Inventory,
    jobs: TrainingJobController,
    serving: InferenceServiceController,
    *,
    page_size: int,
    workloads: WorkloadController | None = None,
) -> None:
    """List Queues, nodes, ResourceClaims, pods, TrainingJobs, InferenceServices and other kinds' workloads;
    apply each list, and tell the controllers."""
    gpu_resource = inventory.settings.gpu_resource

    listed_pods: list[tuple[str, str]] = []

    def listed_pod(obj: dict[str, Any]) -> ListedPod:
        if workloads is not None:  # the pods of other kinds' workloads, as their watch events would
            workloads.pod_changed(obj, deleted=False)
            metadata = obj.get("metadata") or {}
            listed_pods.append((metadata.get("namespace") or "", metadata.get("name") or ""))
        return ListedPod(inventory.pod_from_object(obj), serving_pod_from_object(obj, gpu_resource))

    # Queues first: the first scheduling cycle after a start must not run on jobs whose queue's quota
    # the Queue watch has not delivered yet (it admitted them uncharged; a kill-at-write test saw it).
    jobs.queues_relisted(await kube.list_cluster_objects(GROUP, VERSION, QUEUES, ""))
    nodes = await kube.list_nodes(inventory.node_from_object, page_size=page_size)
    claims = await kube.list_resource_claims(inventory.claim_from_object, page_size=page_size)
    pods = await kube.list_pods(listed_pod, page_size=page_size)
    training_jobs = await kube.list_custom_metadata(TRAINING_JOBS, listed_object, page_size=page_size)
    services = await kube.list_custom_metadata(SERVICES, listed_object, page_size=page_size)
    workload_objects: dict[WorkloadKind, Listing[ListedObject] | None] = {}
    if workloads is not None:
        for kind in workloads.object_kinds:
            workload_objects[kind] = await workloads.api.list_kind_metadata(kind, listed_object, page_size=page_size)
    # From here on nothing awaits: no watch event lands between a list and what it changed.
    # An object that cannot be read is logged by the inventory and left out of its list.
    changed_nodes = inventory.relist_nodes((n for n in nodes.items if n is not None), nodes.resource_version)
    # Claims before pods: each pod listed is counted against the claims as listed.
    changed_pods = inventory.relist_claims((c for c in claims.items if c is not None), claims.resource_version)
    changed_pods += inventory.relist_pods((p.record for p in pods.items if p.record is not None), pods.resource_version)
    serving.pods_relisted([p.replica for p in pods.items if p.replica is not None], pods.resource_version)
    for record in changed_pods:
        jobs.pod_changed(record)
    for name in changed_nodes:
        jobs.node_changed(name)
        serving.node_changed(name)
    listed_jobs = {(o.namespace, o.name) for o in training_jobs.items}
    # Pods were listed first: a worker whose job the later list lacks belongs to a deleted job.
    jobs.workers_unowned(p.record for p in pods.items if p.record is not None and p.record.job_key not in listed_jobs)
    for namespace, name in gone_from_list(jobs.jobs, listed_jobs, training_jobs.resource_version):
        log.info("TrainingJob %s/%s was deleted while the watch was away", namespace, name)
        jobs.job_gone(namespace, name)
    listed_services = {(o.namespace, o.name) for o in services.items}
    for namespace, name in gone_from_list(serving.services, listed_services, services.resource_version):
        log.info("InferenceService %s/%s was deleted while the watch was away", namespace, name)
        serving.service_gone(namespace, name)
    if workloads is not None:
        workloads.pods_relisted(listed_pods, pods.resource_version)
        for kind, listing in workload_objects.items():
            if listing is not None:  # None: a kind the cluster does not serve
                workloads.objects_relisted(
                    kind, ((o.namespace, o.name) for o in listing.items), listing.resource_version
                )
    log.debug(
        "relisted %d nodes (%d changed), %d pods (%d changed)",
        len(nodes.items),
        len(changed_nodes),
        len(pods.items),
        len(changed_pods),
    )
