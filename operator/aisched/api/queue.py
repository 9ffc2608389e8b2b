"""The cluster-scoped Queue: GPU quota, fair-share weight and borrowing for a team."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from aisched.api.common import API_VERSION, ApiModel, Condition, Name, cel, conditions_field, defaulted_to, validated_by

DEFAULT_QUEUE = "default"


class GPUTypeQuota(ApiModel):
    gpu_type: str = Field(min_length=1, max_length=128, description="nvidia.com/gpu.product value.")
    gpus: int = Field(ge=0, le=1_000_000)


class BorrowingSpec(ApiModel):
    enabled: bool = Field(default=True, description="May this queue use other queues' idle quota in its cohort?")
    limit_gpus: int | None = Field(default=None, ge=0, description="Most GPUs borrowed at once; unset means no limit.")


class AllowedToleration(ApiModel):
    key: str = Field(
        min_length=1,
        max_length=316,
        description="Taint key a job's template may tolerate (a toleration with an empty key, which tolerates "
        "every taint, is never allowed).",
    )
    value: str | None = Field(
        default=None,
        max_length=63,
        description="The only value it may tolerate (operator Equal); unset allows any value, and operator Exists.",
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The only effect it may tolerate; unset allows any, and none (every effect)."
    )


# What a queue's worker pods may ask for beyond compute (aisched.policy.pod_policy): the Pod Security
# Standards' levels, with allowances an administrator turns on one by one.
Capability = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Z0-9_]+$")]
Sysctl = Annotated[
    str,
    Field(
        min_length=1, max_length=253, pattern=r"^[a-z0-9]([-_a-z0-9]*[a-z0-9])?([./][a-z0-9]([-_a-z0-9]*[a-z0-9])?)*$"
    ),
]
VolumeType = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z]+$")]
ObjectName = Annotated[
    str,
    Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
]


class AllowedHostPath(ApiModel):
    path_prefix: str = Field(
        min_length=1,
        max_length=4096,
        pattern=r"^/",
        description="A host directory a pod may mount, with everything below it (by path components, after "
        "normalisation; a path with '..' is never allowed).",
    )
    read_only: bool = Field(default=True, description="Only read-only mounts of it (every volumeMount readOnly).")


class PodPolicySpec(ApiModel):
    level: Literal["privileged", "baseline", "restricted"] = Field(
        default="baseline",
        description="The Pod Security Standard a job's template is held to, as Pod Security Admission holds a "
        "pod: baseline (no privilege, host namespaces, host paths or ports, added capabilities beyond the "
        "standard's, unconfined profiles, unsafe sysctls), restricted (baseline, plus non-root, no privilege "
        "escalation, capabilities dropped, a seccomp profile, the usual volume types) or privileged (none).",
    )
    allow_privileged: bool = Field(default=False, description="Privileged containers (and Windows host processes).")
    allow_host_network: bool = Field(default=False, description="hostNetwork: the node's network namespace.")
    allow_host_pid: bool = Field(default=False, alias="allowHostPID", description="hostPID: the node's processes.")
    allow_host_ipc: bool = Field(default=False, alias="allowHostIPC", description="hostIPC: the node's IPC namespace.")
    allow_host_ports: bool = Field(default=False, description="Container ports with a hostPort.")
    allowed_host_paths: list[AllowedHostPath] = Field(
        default_factory=list, max_length=64, description="hostPath volumes, under these prefixes only."
    )
    allowed_capabilities: list[Capability] = Field(
        default_factory=list,
        max_length=64,
        description="Capabilities a container may add beyond the level's (e.g. IPC_LOCK, SYS_PTRACE).",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    allowed_sysctls: list[Sysctl] = Field(
        default_factory=list,
        max_length=64,
        description="Sysctls a pod may set beyond the standard's safe ones.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    allow_unconfined_seccomp: bool = Field(default=False, description="An Unconfined seccomp profile.")
    allow_unconfined_app_armor: bool = Field(default=False, description="An unconfined AppArmor profile.")
    allow_unmasked_proc_mount: bool = Field(default=False, description="procMount Unmasked.")
    allow_privilege_escalation: bool = Field(
        default=False, description="Restricted level: containers need not set allowPrivilegeEscalation: false."
    )
    allow_run_as_root: bool = Field(
        default=False, description="Restricted level: containers need not run as non-root (runAsNonRoot, runAsUser)."
    )
    allowed_volume_types: list[VolumeType] = Field(
        default_factory=list,
        max_length=64,
        description="Restricted level: volume types beyond configMap, csi, downwardAPI, emptyDir, ephemeral, "
        "persistentVolumeClaim, projected and secret (hostPath is allowedHostPaths' alone).",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    allowed_service_account_names: list[ObjectName] = Field(
        default_factory=lambda: ["default"],
        max_length=64,
        description="ServiceAccounts of the job's namespace its pods may run as, at every level; the default "
        "is the namespace's default ServiceAccount only.",
        json_schema_extra={"x-kubernetes-list-type": "set", "default": ["default"]},
    )
    allowed_runtime_class_names: list[ObjectName] = Field(
        default_factory=list,
        max_length=64,
        description="RuntimeClasses its pods may name (e.g. nvidia), at every level; none by default.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


DEFAULT_MIN_RUN_SECONDS = 600


class TimeSlicingSpec(ApiModel):
    enabled: bool = Field(
        default=True,
        description="May a job of this queue that has had more GPU-time (attained service) be preempted, "
        "to a checkpoint and as a whole gang, for an equal-priority job that has had less? It resumes "
        "from its checkpoint when GPUs free up.",
    )
    min_run_seconds: int = Field(
        default=DEFAULT_MIN_RUN_SECONDS,
        ge=0,
        le=31_536_000,
        description="Seconds a gang runs after it starts before it may be preempted for attained service.",
    )


class QueueSpec(ApiModel):
    model_config = validated_by(
        cel(
            "!has(self.gpuTypeQuotas) || self.gpuTypeQuotas.all(q, q.gpus <= self.nominalGPUs)",
            "each gpuTypeQuotas entry must be <= nominalGPUs",
        )
    )

    nominal_gpus: int = Field(ge=0, le=1_000_000, description="GPUs this queue is guaranteed.")
    gpu_type_quotas: list[GPUTypeQuota] | None = Field(
        default=None,
        max_length=64,
        description="Per GPU type caps inside nominalGPUs.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["gpuType"]},
    )
    weight: int = Field(default=1, ge=1, le=1000, description="Fair-share weight among queues.")
    cohort: str | None = Field(
        default=None, max_length=63, description="Queues in one cohort lend each other idle quota."
    )
    borrowing: BorrowingSpec = defaulted_to(BorrowingSpec)
    time_slicing: TimeSlicingSpec = defaulted_to(TimeSlicingSpec)
    namespaces: list[Name] | None = Field(
        default=None,
        max_length=1024,
        description="Namespaces whose TrainingJobs this queue takes; unset takes every namespace. A list, not "
        "a label selector: a tenant who may label its own namespace cannot bind it to a queue.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    max_priority: int | None = Field(
        default=None,
        ge=-1_000_000,
        le=1_000_000_000,
        description="The highest spec.priority a job of this queue may ask for; unset caps none.",
    )
    allowed_tolerations: list[AllowedToleration] | None = Field(
        default=None,
        max_length=64,
        description="Tolerations a job of this queue may carry in its template, each covered by an entry; a "
        "job with any other is refused (TolerationNotAllowed). Unset allows any. Set it on every queue once "
        "nodes are tainted for a team, so that only that team's queue reaches them.",
    )
    pod_policy: PodPolicySpec = Field(
        default_factory=PodPolicySpec,
        json_schema_extra={"default": PodPolicySpec().to_wire()},
        description="What a job's pods may ask for beyond compute: a job whose template asks more is refused "
        "(PodPolicyViolation). The default is the baseline Pod Security Standard with the namespace's default "
        "ServiceAccount: creating a job must give no more than creating its pods would.",
    )

    @model_validator(mode="after")
    def _type_quota_within_nominal(self) -> QueueSpec:
        for quota in self.gpu_type_quotas or []:
            if quota.gpus > self.nominal_gpus:
                raise ValueError("each gpuTypeQuotas entry must be <= nominalGPUs")
        return self


class QueueStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[Condition] = conditions_field()
    used_gpus: int | None = Field(default=None)
    borrowed_gpus: int | None = Field(default=None)
    admitted_jobs: int | None = None
    pending_jobs: int | None = None


class Queue(ApiModel):
    """A team's share of the cluster's GPUs."""

    api_version: Literal["aisched.io/v1alpha1"] = API_VERSION
    kind: Literal["Queue"] = "Queue"
    metadata: Annotated[dict[str, Any], Field(default_factory=dict)]
    spec: QueueSpec
    status: QueueStatus = Field(default_factory=QueueStatus)
