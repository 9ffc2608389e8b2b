"""The cluster-scoped Queue: GPU quota, fair-share weight and borrowing for a team."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from aisched.api.common import API_VERSION, ApiModel, Condition, Name, cel, defaulted_to, validated_by

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

    @model_validator(mode="after")
    def _type_quota_within_nominal(self) -> QueueSpec:
        for quota in self.gpu_type_quotas or []:
            if quota.gpus > self.nominal_gpus:
                raise ValueError("each gpuTypeQuotas entry must be <= nominalGPUs")
        return self


class QueueStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
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
