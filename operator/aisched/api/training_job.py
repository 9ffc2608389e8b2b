"""The TrainingJob custom resource: a gang of GPU workers that train one model."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from aisched.api.common import (
    API_VERSION,
    LABEL_VALUE_PATTERN,
    MAX_DURATION_SECONDS,
    ApiModel,
    CapacityType,
    Condition,
    Message,
    Name,
    Reason,
    SpotPolicy,
    StatusText,
    TopologyLevelName,
    cel,
    check_name,
    conditions_field,
    defaulted_to,
    name_rule,
    validated_by,
)
from aisched.api.pod_priority import PRIORITY_RULES, check_priority_rules
from aisched.api.pod_template import MAX_PATH_LENGTH, TEMPLATE_RULES, PodTemplate, check_template_rules
from aisched.api.reserved_keys import RESERVED_KEY_RULES, check_reserved_keys
from aisched.api.running_shape import TRAINING_JOB_SHAPE_RULES
from aisched.api.sharing import SHARE_RULES, GpuShare, check_share_rules

# The most workers a gang may have; a placement names a node for each.
MAX_REPLICAS = 4096
# A node's name: a DNS subdomain.
MAX_NODE_NAME_LENGTH = 253

# The headless Service takes the job's name and each worker's host name is `<name>-worker-<rank>`.
_NAME_RULE, _NAME_MESSAGE = name_rule(
    "TrainingJob", "the workers' host names and the headless Service are named after them"
)


class TrainingJobPhase(StrEnum):
    QUEUED = "Queued"
    DEFERRED = "Deferred"
    PLACING = "Placing"
    RUNNING = "Running"
    CHECKPOINTING = "Checkpointing"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class TopologySpec(ApiModel):
    """How close together the gang's GPUs must be, in levels of the cluster's topology.

    Level names are the operator's configuration (settings.topology), not a fixed list, so the
    API server cannot rank them: the operator refuses, with a condition, a level its topology does
    not have, one no node is labelled with, and a preferred level wider than the required one.
    """

    required_level: TopologyLevelName | None = Field(
        default=None,
        description="The whole gang must fit inside one domain of this level, or it stays queued.",
    )
    preferred_level: TopologyLevelName | None = Field(
        default=None,
        description="Aim for one domain of this level; fall back to wider ones when it does not fit.",
    )


class CheckpointSpec(ApiModel):
    """Where workers save their state and how often."""

    path: str | None = Field(
        default=None,
        max_length=1024,
        description="Directory (usually on a shared volume) the workers save checkpoints to; "
        "passed to them as AISCHED_CHECKPOINT_DIR.",
    )
    interval_seconds: int | None = Field(
        default=None,
        ge=30,
        le=86400,
        description="Fixed checkpoint interval. Unset: the operator picks the Young/Daly optimum "
        "from the interruption rate of the capacity the job runs on.",
    )
    cost_seconds: int = Field(
        default=60,
        ge=1,
        le=3600,
        description="How long one checkpoint takes to write; refined from what workers report.",
    )


class SpotSpec(ApiModel):
    policy: SpotPolicy = Field(
        default=SpotPolicy.NEVER,
        description="Never: on-demand only. Prefer: spot when it can be had; without it, waits while the "
        "deadline leaves slack, else on-demand (no deadline: on-demand at once). Only: spot only, waiting for it.",
    )


class CarbonMode(StrEnum):
    FORECAST = "Forecast"
    THRESHOLD = "Threshold"


class CarbonSpec(ApiModel):
    """Carbon-aware deferral: start (or run chunks) when the grid is cleanest."""

    model_config = validated_by(
        cel(
            "self.mode != 'Threshold' || has(self.thresholdGramsPerKWh)",
            "carbon.mode Threshold needs carbon.thresholdGramsPerKWh",
        )
    )

    deferrable: bool = Field(default=False, description="May the start be delayed for a cleaner grid?")
    mode: CarbonMode = Field(
        default=CarbonMode.FORECAST,
        description="Forecast: start at the cleanest time before the deadline. "
        "Threshold: run whenever intensity is below thresholdGramsPerKWh.",
    )
    max_delay_seconds: int | None = Field(
        default=None, ge=0, le=30 * 86400, description="Latest start relative to submission."
    )
    threshold_grams_per_kwh: float | None = Field(default=None, gt=0, le=2000)
    interruptible: bool = Field(
        default=False,
        description="May the run be split into chunks in the cleanest hours (needs checkpointing)?",
    )
    region: str | None = Field(
        default=None,
        max_length=128,
        # Letters, digits, - and _ (DE, US-CAL-CISO, CAISO_NORTH, 13): the region is spliced into a PromQL
        # query, a URL path and a file name, where a quote, a slash or a dot could take it elsewhere.
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$",
        description="Grid region of the forecast (letters, digits, - and _); default from settings.",
    )

    @model_validator(mode="after")
    def _threshold_needs_value(self) -> CarbonSpec:
        if self.mode == CarbonMode.THRESHOLD and self.threshold_grams_per_kwh is None:
            raise ValueError("carbon.mode Threshold needs carbon.thresholdGramsPerKWh")
        return self


class RunPolicy(ApiModel):
    backoff_limit: int = Field(
        default=3, ge=0, le=100, description="Gang restarts after worker failures before Failed."
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DURATION_SECONDS,
        description="Fail the job when it has been running longer than this (at most a year).",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=MAX_DURATION_SECONDS,
        description="Delete the job this long after it succeeds or fails (at most a year).",
    )


_SPEC_RULES = [
    *TEMPLATE_RULES,
    *SHARE_RULES,
    *PRIORITY_RULES,
    *RESERVED_KEY_RULES,
    cel(
        "has(self.minReplicas) == has(self.maxReplicas)",
        "elastic jobs set both minReplicas and maxReplicas",
    ),
    cel(
        "!has(self.minReplicas) || self.minReplicas <= self.replicas",
        "minReplicas must be <= replicas",
    ),
    cel(
        "!has(self.maxReplicas) || self.replicas <= self.maxReplicas",
        "replicas must be <= maxReplicas",
    ),
    cel(
        "!has(self.deadline) || has(self.expectedDurationSeconds)",
        "a deadline needs expectedDurationSeconds, so the operator knows the latest start that meets it",
    ),
    cel(
        "!has(self.carbon) || !self.carbon.deferrable || has(self.expectedDurationSeconds)",
        "a deferrable job needs expectedDurationSeconds to plan its start",
    ),
    cel(
        "!has(self.carbon) || !self.carbon.deferrable || has(self.deadline) || has(self.carbon.maxDelaySeconds)",
        "a deferrable job needs a deadline or carbon.maxDelaySeconds",
    ),
    cel(
        "!has(self.carbon) || !has(self.carbon.interruptible) || !self.carbon.interruptible || has(self.checkpoint)",
        "carbon.interruptible needs checkpoint settings to resume between chunks",
    ),
]


class TrainingJobSpec(ApiModel):
    model_config = validated_by(*_SPEC_RULES)

    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS, description="Worker pods in the gang.")
    min_replicas: int | None = Field(
        default=None, ge=1, le=MAX_REPLICAS, description="Elastic jobs: the fewest workers it may run with."
    )
    max_replicas: int | None = Field(
        default=None, ge=1, le=MAX_REPLICAS, description="Elastic jobs: the most workers it may grow to."
    )
    gpus_per_replica: int = Field(
        ge=1, le=64, description="nvidia.com/gpu per worker; a worker's GPUs are on one node."
    )
    gpu_type: str | None = Field(
        default=None,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="GPU product (node label nvidia.com/gpu.product), e.g. NVIDIA-H100-80GB-HBM3.",
    )
    gpu_share: GpuShare | None = Field(
        default=None,
        description="Part of one GPU instead of whole ones (gpusPerReplica 1): a fraction or a MIG profile.",
    )
    template: PodTemplate
    topology: TopologySpec = defaulted_to(TopologySpec)
    queue: Name = Field(default="default", description="The Queue this job is admitted through.")
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000_000, description="Higher runs first and may preempt.")
    deadline: datetime | None = Field(default=None, description="When the job must be finished (RFC 3339).")
    expected_duration_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DURATION_SECONDS,
        description="How long the job runs at full size, for deadline planning (at most a year).",
    )
    checkpoint: CheckpointSpec | None = None
    spot: SpotSpec = defaulted_to(SpotSpec)
    carbon: CarbonSpec = defaulted_to(CarbonSpec)
    run_policy: RunPolicy = defaulted_to(RunPolicy)
    suspend: bool = Field(default=False, description="True stops the gang; false lets it run again.")

    @model_validator(mode="after")
    def _cross_field_rules(self) -> TrainingJobSpec:
        """The same rules as the CEL above, so tests and the simulator see the same verdicts."""
        elastic = (self.min_replicas is None, self.max_replicas is None)
        if elastic[0] != elastic[1]:
            raise ValueError("elastic jobs set both minReplicas and maxReplicas")
        if self.min_replicas is not None and self.min_replicas > self.replicas:
            raise ValueError("minReplicas must be <= replicas")
        if self.max_replicas is not None and self.replicas > self.max_replicas:
            raise ValueError("replicas must be <= maxReplicas")
        if self.deadline is not None and self.expected_duration_seconds is None:
            raise ValueError(
                "a deadline needs expectedDurationSeconds, so the operator knows the latest start that meets it"
            )
        if self.carbon.deferrable:
            if self.expected_duration_seconds is None:
                raise ValueError("a deferrable job needs expectedDurationSeconds to plan its start")
            if self.deadline is None and self.carbon.max_delay_seconds is None:
                raise ValueError("a deferrable job needs a deadline or carbon.maxDelaySeconds")
        if self.carbon.interruptible and self.checkpoint is None:
            raise ValueError("carbon.interruptible needs checkpoint settings to resume between chunks")
        return self

    @model_validator(mode="after")
    def _template_rules(self) -> TrainingJobSpec:
        check_template_rules(self.template, self.gpus_per_replica)
        check_share_rules(self.gpu_share, self.gpus_per_replica, self.gpu_type, self.template)
        check_priority_rules(self.template)
        check_reserved_keys(self.template)
        return self

    @property
    def elastic(self) -> bool:
        return self.min_replicas is not None

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


NodeName = Annotated[str, Field(max_length=MAX_NODE_NAME_LENGTH)]


class Placement(ApiModel):
    level: TopologyLevelName | None = Field(default=None, description="The tightest level the gang fits in.")
    domain: StatusText | None = Field(default=None, description="That domain's label value.")
    nodes: list[NodeName] = Field(
        default_factory=list, max_length=MAX_REPLICAS, description="Node of each worker, by rank."
    )
    capacity_type: CapacityType | None = None
    gpu_type: StatusText | None = None
    # What the gang was admitted with, so that its charge is what its workers were given whatever the
    # spec says later (`aisched.policy.scheduler.jobs.admitted_shape`); unset on older placements.
    gpus_per_replica: int | None = Field(
        default=None, ge=1, le=64, description="spec.gpusPerReplica when the gang was admitted."
    )
    gpu_share: GpuShare | None = Field(default=None, description="spec.gpuShare when the gang was admitted.")


class CheckpointRecord(ApiModel):
    step: int = Field(ge=0)
    # As a worker reported it, in a termination message of at most 4 KiB (aisched.workload.contract).
    path: str | None = Field(default=None, max_length=MAX_PATH_LENGTH)
    time: datetime


class Deferral(ApiModel):
    until: datetime
    reason: Message
    forecast_grams_per_kwh: float | None = None
    expected_saving_percent: float | None = None
    expected_saving_grams: float | None = None


class TrainingJobStatus(ApiModel):
    phase: TrainingJobPhase | None = None
    reason: Reason | None = Field(default=None, description="Reason of the latest phase change.")
    message: Message | None = None
    observed_generation: int | None = None
    conditions: list[Condition] = conditions_field()
    replicas: int | None = Field(default=None, ge=0, description="Workers in the current gang.")
    ready_replicas: int | None = Field(default=None, ge=0)
    selector: StatusText | None = Field(default=None, description="Label selector of the workers (scale).")
    gpus: int | None = Field(default=None, ge=0, description="GPUs the current gang holds.")
    gpu_equivalents: float | None = Field(
        default=None,
        ge=0,
        le=1_000_000,
        description="GPU-equivalents the current gang is charged: its GPUs, or its workers' parts of GPUs "
        "(three workers with 30% each: 0.9).",
    )
    placement: Placement | None = None
    gang_generation: int | None = Field(
        default=None, ge=0, description="Incremented on every (re)start of the gang; names its pods."
    )
    restarts: int | None = Field(default=None, ge=0)
    interruptions: int | None = Field(default=None, ge=0)
    lost_work_seconds: float | None = Field(default=None, ge=0)
    saved_on_notice: int | None = Field(
        default=None,
        ge=0,
        description="Interruptions whose notice the workers' checkpoint landed in; the more, the less often "
        "the operator has them checkpoint on their own.",
    )
    last_checkpoint: CheckpointRecord | None = None
    checkpoint_interval_seconds: int | None = None
    deferral: Deferral | None = None
    chunk_end: datetime | None = Field(
        default=None,
        description="Interruptible carbon-aware jobs: when the chunk running now ends; the gang then "
        "checkpoints and waits, Deferred, for its next chunk.",
    )
    chunk_work_done_seconds: float | None = Field(
        default=None,
        ge=0,
        description="Interruptible carbon-aware jobs: work done in the chunks that ended, taken off "
        "expectedDurationSeconds when the rest is planned.",
    )
    estimated_emissions_grams: float | None = Field(
        default=None, description="CO2-equivalent emitted so far, from GPU power and grid intensity."
    )
    queued_time: datetime | None = None
    start_time: datetime | None = None
    run_start_time: datetime | None = Field(
        default=None, description="When the current gang was placed; unset while the job waits."
    )
    attained_gpu_seconds: float | None = Field(
        default=None,
        ge=0,
        description="GPU-seconds of service of the gang's earlier runs (the current one not yet counted): "
        "the scheduler orders equal-priority jobs by it, least first.",
    )
    completion_time: datetime | None = None


class TrainingJob(ApiModel):
    """A gang of GPU workers placed together, queued fairly, checkpointed and resumed."""

    model_config = validated_by(_NAME_RULE, *TRAINING_JOB_SHAPE_RULES)

    api_version: Literal["aisched.io/v1alpha1"] = API_VERSION
    kind: Literal["TrainingJob"] = "TrainingJob"
    metadata: Annotated[dict[str, Any], Field(default_factory=dict)]
    spec: TrainingJobSpec
    status: TrainingJobStatus = Field(default_factory=TrainingJobStatus)

    @model_validator(mode="after")
    def _name_fits_child_objects(self) -> TrainingJob:
        check_name(self.metadata.get("name"), _NAME_MESSAGE)
        return self
