"""The InferenceService custom resource: autoscaled replicas of a model server."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import Field, model_validator

from aisched.api.common import (
    API_VERSION,
    LABEL_VALUE_PATTERN,
    ApiModel,
    Condition,
    Name,
    Reason,
    SpotPolicy,
    StatusText,
    cel,
    check_name,
    conditions_field,
    defaulted_to,
    name_rule,
    validated_by,
)
from aisched.api.pod_priority import PRIORITY_RULES, check_priority_rules
from aisched.api.pod_template import TEMPLATE_RULES, PodTemplate, check_template_rules
from aisched.api.reserved_keys import RESERVED_KEY_RULES, check_reserved_keys
from aisched.api.running_shape import INFERENCE_SERVICE_SHAPE_RULES
from aisched.api.sharing import SHARE_RULES, GpuShare, check_share_rules

# Its Service takes its name, its replica pods are `<name>-<hash>-<n>`.
_NAME_RULE, _NAME_MESSAGE = name_rule("InferenceService", "its Service and replica pods are named after it")


class MetricType(StrEnum):
    REQUESTS_PER_SECOND = "RequestsPerSecond"
    CONCURRENCY = "Concurrency"
    GPU_UTILIZATION = "GPUUtilization"
    PROMQL = "PromQL"
    LLM = "LLM"
    """What an LLM server reports (queue, batch, KV cache, TTFT/TPOT) against latency objectives."""


class LlmEngine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"


# Prometheus's metric-name grammar (aisched.policy.llm_scaling.engines.is_metric_name): a tenant's
# series name is pasted into a selector as a quoted string, but only a plain name is accepted at all.
METRIC_NAME_PATTERN = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
_SeriesName = Annotated[str, Field(max_length=200, pattern=METRIC_NAME_PATTERN)]


class LlmSeriesNames(ApiModel):
    """The engine preset's series, renamed where a server exports them under other names."""

    waiting: _SeriesName | None = None
    running: _SeriesName | None = None
    kv_usage: _SeriesName | None = None
    ttft_histogram: _SeriesName | None = None
    tpot_histogram: _SeriesName | None = None


class LatencyObjectivesSpec(ApiModel):
    ttft_seconds: float = Field(default=2.0, gt=0, le=600, description="Time to first token the percentile meets.")
    tpot_seconds: float = Field(default=0.1, gt=0, le=60, description="Time per output token the percentile meets.")
    percentile: float = Field(default=0.95, gt=0, lt=1, description="Of requests, as a fraction (0.95: p95).")


class LlmMetricSpec(ApiModel):
    engine: LlmEngine = Field(default=LlmEngine.VLLM, description="Engine preset: which series its servers export.")
    series: LlmSeriesNames | None = Field(default=None, description="Series names that differ from the preset's.")
    objectives: LatencyObjectivesSpec = defaulted_to(LatencyObjectivesSpec)
    kv_usage_target: float = Field(default=0.8, gt=0, le=1, description="KV cache fill one replica should run at.")
    waiting_per_replica_target: float = Field(
        default=2.0, ge=0, le=10000, description="Requests waiting per replica before the queue asks for more."
    )
    replica_capacity_rps: float | None = Field(
        default=None,
        gt=0,
        description="Requests per second one replica carries within the objectives (a load test's figure); "
        "unset, the rate and forecast signals are not used.",
    )
    cold_start_seconds: float = Field(
        default=120.0, gt=0, le=3600, description="Pod created to ready: how far ahead of forecast load to scale."
    )


class MetricSpec(ApiModel):
    model_config = validated_by(
        cel(
            "self.type != 'PromQL' || has(self.query)",
            "metric type PromQL needs metric.query",
        ),
        cel(
            "self.type == 'LLM' || has(self.targetPerReplica)",
            "metric.targetPerReplica is needed unless the type is LLM",
        ),
        cel("self.type != 'LLM' || has(self.llm)", "metric type LLM needs metric.llm"),
    )

    type: MetricType = Field(
        default=MetricType.REQUESTS_PER_SECOND,
        description="What to scale on; every type but PromQL has a built-in per-replica query.",
    )
    query: str | None = Field(
        default=None,
        max_length=4096,
        description="PromQL returning the service-wide value; divided by ready replicas. Every selector is "
        "confined to the service's namespace; a query that cannot be is refused (MetricQueryRefused).",
    )
    target_per_replica: float | None = Field(
        default=None, gt=0, description="Desired metric value per replica; every type but LLM needs it."
    )
    llm: LlmMetricSpec | None = Field(
        default=None, description="Type LLM: the engine and the latency objectives to scale to."
    )

    @model_validator(mode="after")
    def _promql_needs_query(self) -> MetricSpec:
        if self.type == MetricType.PROMQL and not self.query:
            raise ValueError("metric type PromQL needs metric.query")
        if self.type != MetricType.LLM and self.target_per_replica is None:
            raise ValueError("metric.targetPerReplica is needed unless the type is LLM")
        if self.type == MetricType.LLM and self.llm is None:
            raise ValueError("metric type LLM needs metric.llm")
        return self


HPA_LAW_MAX_SCALE_UP_PER_MINUTE: Final = 4
HPA_LAW_MAX_SCALE_DOWN_PER_MINUTE: Final = 1


class AutoscalingSpec(ApiModel):
    model_config = validated_by(
        cel("self.minReplicas <= self.maxReplicas", "autoscaling.minReplicas must be <= maxReplicas"),
        cel(
            "self.minReplicas > 0 || self.scaleToZero",
            "autoscaling.minReplicas 0 needs scaleToZero: true",
        ),
    )

    enabled: bool = Field(default=True, description="False hands spec.replicas to kubectl scale or another autoscaler.")
    min_replicas: int = Field(default=1, ge=0, le=1000)
    max_replicas: int = Field(default=10, ge=1, le=1000)
    metric: MetricSpec
    tolerance: float = Field(default=0.1, ge=0, le=1, description="No scaling while |value/target - 1| is within this.")
    scale_up_stabilization_seconds: int = Field(default=0, ge=0, le=3600)
    scale_down_stabilization_seconds: int = Field(default=300, ge=0, le=3600)
    max_scale_up_replicas_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description=f"Unset: {HPA_LAW_MAX_SCALE_UP_PER_MINUTE} for a metric with targetPerReplica; no cap for type LLM",
    )
    max_scale_down_replicas_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description=(
            f"Unset: {HPA_LAW_MAX_SCALE_DOWN_PER_MINUTE} for a metric with targetPerReplica; no cap for type LLM "
            "(its scale-down window holds the fleet)."
        ),
    )
    scale_to_zero: bool = Field(default=False, description="Allow zero replicas when idle.")

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError("autoscaling.minReplicas must be <= maxReplicas")
        if self.min_replicas == 0 and not self.scale_to_zero:
            raise ValueError("autoscaling.minReplicas 0 needs scaleToZero: true")
        return self


class ServingSpotSpec(ApiModel):
    policy: SpotPolicy = Field(default=SpotPolicy.NEVER)
    min_on_demand_replicas: int = Field(
        default=1, ge=0, le=1000, description="Replicas kept on on-demand capacity whatever spot does."
    )


class RolloutSpec(ApiModel):
    model_config = validated_by(
        cel(
            "self.maxSurge > 0 || self.maxUnavailable > 0",
            "rollout.maxSurge and rollout.maxUnavailable cannot both be 0",
        )
    )

    max_surge: int = Field(default=1, ge=0, le=100)
    max_unavailable: int = Field(default=0, ge=0, le=100)

    @model_validator(mode="after")
    def _can_progress(self) -> RolloutSpec:
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("rollout.maxSurge and rollout.maxUnavailable cannot both be 0")
        return self


class InferenceServiceSpec(ApiModel):
    model_config = validated_by(*TEMPLATE_RULES, *SHARE_RULES, *PRIORITY_RULES, *RESERVED_KEY_RULES)

    replicas: int = Field(default=1, ge=0, le=1000, description="Model server pods (scale).")
    gpus_per_replica: int = Field(ge=1, le=64)
    gpu_type: str | None = Field(
        default=None,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="GPU product (node label nvidia.com/gpu.product), e.g. NVIDIA-L4.",
    )
    gpu_share: GpuShare | None = Field(
        default=None,
        description="Part of one GPU instead of whole ones (gpusPerReplica 1): a fraction or a MIG profile.",
    )
    template: PodTemplate
    port: int = Field(default=8080, ge=1, le=65535, description="Port the Service forwards to.")
    autoscaling: AutoscalingSpec | None = None
    spot: ServingSpotSpec = defaulted_to(ServingSpotSpec)
    rollout: RolloutSpec = defaulted_to(RolloutSpec)
    queue: Name = Field(
        default="default",
        description="The Queue whose tenancy its replicas go through: bound namespaces, allowed tolerations "
        "and podPolicy (what a pod may ask beyond compute). A service the queue refuses creates no pod.",
    )
    priority: int = Field(
        default=0,
        ge=-1_000_000,
        le=1_000_000_000,
        description="Against TrainingJobs and other services, for free GPUs: new replicas are placed in the same "
        "cycle as gangs, higher priority first. Replicas never preempt and are never preempted. At most the "
        "queue's maxPriority.",
    )

    @model_validator(mode="after")
    def _template_rules(self) -> InferenceServiceSpec:
        check_template_rules(self.template, self.gpus_per_replica)
        check_share_rules(self.gpu_share, self.gpus_per_replica, self.gpu_type, self.template)
        check_priority_rules(self.template)
        check_reserved_keys(self.template)
        return self


class ScalingDecision(ApiModel):
    time: datetime
    from_replicas: int
    to_replicas: int
    reason: Reason


class InferenceServiceStatus(ApiModel):
    phase: StatusText | None = None
    observed_generation: int | None = None
    conditions: list[Condition] = conditions_field()
    replicas: int | None = None
    ready_replicas: int | None = None
    desired_replicas: int | None = None
    on_demand_replicas: int | None = None
    spot_replicas: int | None = None
    selector: StatusText | None = None
    current_metric_value: float | None = None
    last_scaling: ScalingDecision | None = None


class InferenceService(ApiModel):
    """Replicas of a model server on GPUs behind a Service, scaled to demand."""

    model_config = validated_by(_NAME_RULE, *INFERENCE_SERVICE_SHAPE_RULES)

    api_version: Literal["aisched.io/v1alpha1"] = API_VERSION
    kind: Literal["InferenceService"] = "InferenceService"
    metadata: Annotated[dict[str, Any], Field(default_factory=dict)]
    spec: InferenceServiceSpec
    status: InferenceServiceStatus = Field(default_factory=InferenceServiceStatus)

    @model_validator(mode="after")
    def _name_fits_child_objects(self) -> InferenceService:
        check_name(self.metadata.get("name"), _NAME_MESSAGE)
        return self
