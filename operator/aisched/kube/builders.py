"""Pure builders of the Kubernetes objects a TrainingJob runs as: worker pods
and the headless Service that gives them stable DNS names for rendezvous."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Protocol

from aisched.api import TrainingJob
from aisched.api.reserved_keys import without_reserved
from aisched.kube import labels
from aisched.kube.torch_env import (
    TORCH_PORT,
    TORCHRUN_DEFAULT_SHUTDOWN_SECONDS,
    TorchTopology,
    rendezvous_id,
    torch_environment,
)
from aisched.workload.contract import (
    CHECKPOINT_DIR_ENV,
    CHECKPOINT_INTERVAL_ENV,
    GANG_GENERATION_ENV,
    RESUME_PATH_ENV,
    RESUME_STEP_ENV,
)

MASTER_PORT = TORCH_PORT  # torchrun's default rendezvous port


@dataclass(frozen=True)
class WorkerSlot:
    """One worker of a placed gang: its rank and the node it is pinned to."""

    rank: int
    node: str


@dataclass(frozen=True)
class GangLaunch:
    """Everything that differs between launches of the same job."""

    generation: int
    world_size: int
    slots: tuple[WorkerSlot, ...]
    gpu_resource: str = "nvidia.com/gpu"
    checkpoint_interval_seconds: int | None = None
    resume_step: int | None = None
    resume_path: str | None = None
    termination_grace_seconds: int | None = None
    # The grace the operator deletes the workers with when it stops them to save (torchrun must wait as long).
    stop_grace_seconds: int | None = None
    tolerations: tuple[dict[str, Any], ...] = ()
    priority_class_name: str = ""
    """The operator's class for every worker (settings.worker_priority_class_name); empty: none."""


def worker_hostname(job_name: str, rank: int) -> str:
    return f"{job_name}-worker-{rank}"


def worker_pod_name(job_name: str, generation: int, rank: int) -> str:
    # The generation is in the name so a restarted gang never waits for the
    # previous pods' names to be released.
    return f"{job_name}-g{generation}-w{rank}"


class Owner(Protocol):
    """Our custom resources' models: what an owner reference names."""

    @property
    def api_version(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def metadata(self) -> dict[str, Any]: ...


def owner_reference(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "name": owner.metadata["name"],
        "uid": owner.metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _job_labels(job: TrainingJob) -> dict[str, str]:
    return {
        labels.MANAGED_BY: "aisched",
        labels.JOB_KIND: "TrainingJob",
        labels.JOB_NAME: str(job.metadata["name"]),
    }


def build_headless_service(job: TrainingJob) -> dict[str, Any]:
    name = str(job.metadata["name"])
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": job.metadata["namespace"],
            "labels": _job_labels(job),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            # Workers must find each other before they are Ready.
            "publishNotReadyAddresses": True,
            "selector": _job_labels(job),
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


def _env(job: TrainingJob, launch: GangLaunch, rank: int) -> list[dict[str, str]]:
    name = str(job.metadata["name"])
    topology = TorchTopology(
        # A lone worker rendezvous with itself; a gang through its headless Service.
        master_addr=f"{worker_hostname(name, 0)}.{name}" if launch.world_size > 1 else "localhost",
        nnodes=launch.world_size,
        nproc_per_node=max(1, job.spec.gpus_per_replica),
        node_rank=rank,
        rendezvous_id=rendezvous_id(str(job.metadata["uid"]), launch.generation) if job.spec.elastic else None,
        shutdown_grace_seconds=_longest_grace(job, launch),
    )
    env = {**torch_environment(topology), GANG_GENERATION_ENV: str(launch.generation)}
    if job.spec.checkpoint and job.spec.checkpoint.path:
        env[CHECKPOINT_DIR_ENV] = job.spec.checkpoint.path
    if launch.checkpoint_interval_seconds:
        env[CHECKPOINT_INTERVAL_ENV] = str(launch.checkpoint_interval_seconds)
    if launch.resume_step is not None:
        env[RESUME_STEP_ENV] = str(launch.resume_step)
        if launch.resume_path:
            env[RESUME_PATH_ENV] = launch.resume_path
    return [{"name": key, "value": value} for key, value in env.items()]


def _longest_grace(job: TrainingJob, launch: GangLaunch) -> int:
    """The longest the kubelet may let a worker run after SIGTERM: the pod's own grace or the operator's."""
    own = launch.termination_grace_seconds
    if own is None:
        declared = job.spec.template.get("spec", {}).get("terminationGracePeriodSeconds")
        own = declared if type(declared) is int else TORCHRUN_DEFAULT_SHUTDOWN_SECONDS
    return max(own, launch.stop_grace_seconds or 0)


def _with_env(container: dict[str, Any], env: list[dict[str, str]]) -> None:
    ours = {item["name"] for item in env}
    kept = [item for item in container.get("env", []) if item.get("name") not in ours]
    container["env"] = env + kept


def request_gpus(containers: list[dict[str, Any]], resource: str, count: int) -> None:
    """The job's GPUs, on the container the template put them on (else the first), and never more.

    The CRD refuses templates that ask otherwise for nvidia.com/gpu; this holds for whatever
    resource the operator is set to count, so no template gets GPUs its queue does not account.
    """

    def names_it(container: dict[str, Any]) -> bool:
        resources = container.get("resources") or {}
        return any(resource in (resources.get(kind) or {}) for kind in ("limits", "requests"))

    chosen = next((c for c in containers if names_it(c)), containers[0])
    for container in containers:
        for amounts in (container.get("resources") or {}).values():
            if isinstance(amounts, dict):
                amounts.pop(resource, None)
    resources = chosen.setdefault("resources", {})
    resources.setdefault("limits", {})[resource] = count
    resources.setdefault("requests", {})[resource] = count


def set_priority(spec: dict[str, Any], priority_class_name: str) -> None:
    """The pod's priority is the operator's, whatever the template says.

    Who goes first among tenants is the queues' decision (spec.priority within a queue's cap).
    A class in the template would let kube-scheduler preempt another team's pods for it
    (system-node-critical is usable in any namespace), so the CRD refuses these fields at apply
    and the builders drop them here too, for objects stored before that rule.
    """
    for field in ("priorityClassName", "priority", "preemptionPolicy"):
        spec.pop(field, None)  # the Priority admission plugin refuses a priority that disagrees with the class
    if priority_class_name:
        spec["priorityClassName"] = priority_class_name


DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def build_worker_pod(job: TrainingJob, launch: GangLaunch, slot: WorkerSlot) -> dict[str, Any]:
    name = str(job.metadata["name"])
    template = copy.deepcopy(job.spec.template)
    spec: dict[str, Any] = template.get("spec", {})
    metadata: dict[str, Any] = template.get("metadata", {})
    pod_labels = {
        **without_reserved(metadata.get("labels")),
        **_job_labels(job),
        labels.GANG_GENERATION: str(launch.generation),
        labels.RANK: str(slot.rank),
    }
    env = _env(job, launch, slot.rank)
    for container in spec["containers"]:
        _with_env(container, env)
    if job.spec.gpu_share is None:  # a share is the claim's or the MIG instance's (controller/sharing.py)
        request_gpus(spec["containers"], launch.gpu_resource, job.spec.gpus_per_replica)
    spec["restartPolicy"] = "Never"  # the operator restarts the whole gang, never one worker
    set_priority(spec, launch.priority_class_name)
    spec["hostname"] = worker_hostname(name, slot.rank)
    if launch.world_size > 1:
        spec["subdomain"] = name  # the headless Service: workers reach each other by host name
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "kubernetes.io/hostname": slot.node}
    if launch.world_size > 1:  # held until every pod of the gang exists; a lone worker has none to wait for
        spec["schedulingGates"] = [{"name": labels.GANG_GATE}]
    if launch.tolerations:
        spec["tolerations"] = [*spec.get("tolerations", []), *launch.tolerations]
    if launch.termination_grace_seconds is not None:
        spec["terminationGracePeriodSeconds"] = launch.termination_grace_seconds
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": worker_pod_name(name, launch.generation, slot.rank),
            "namespace": job.metadata["namespace"],
            "labels": pod_labels,
            # Karpenter never consolidates or drifts a node away under a worker: a gang loses a node
            # only to an interruption, which it checkpoints on. Whatever the template says.
            "annotations": {
                **without_reserved(metadata.get("annotations")),
                DO_NOT_DISRUPT: "true",
                labels.QUEUE_ANNOTATION: job.spec.queue,
            },
            "ownerReferences": [owner_reference(job)],
            "finalizers": [labels.REPORT_FINALIZER],
        },
        "spec": spec,
    }
