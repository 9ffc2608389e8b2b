"""An InferenceService's `autoscaling` (metric type LLM) as the policy's spec: one translation, for the
operator and for the simulator's aisched arm, so a benchmark runs what a user's manifest asks."""

from __future__ import annotations

from aisched.api.inference_service import AutoscalingSpec, LlmMetricSpec
from aisched.policy.llm_scaling.decide import LatencyObjectives, LlmScalingSpec


def llm_scaling_spec(autoscaling: AutoscalingSpec, llm: LlmMetricSpec, sync_period_s: float) -> LlmScalingSpec:
    objectives = llm.objectives
    return LlmScalingSpec(
        min_replicas=autoscaling.min_replicas,
        max_replicas=autoscaling.max_replicas,
        objectives=LatencyObjectives(objectives.ttft_seconds, objectives.tpot_seconds, objectives.percentile),
        scale_to_zero=autoscaling.scale_to_zero,
        kv_usage_target=llm.kv_usage_target,
        waiting_per_replica_target=llm.waiting_per_replica_target,
        scale_down_window_s=autoscaling.scale_down_stabilization_seconds,
        sync_period_s=sync_period_s,
        replica_capacity_rps=llm.replica_capacity_rps,
        max_scale_up_per_minute=autoscaling.max_scale_up_replicas_per_minute,
        max_scale_down_per_minute=autoscaling.max_scale_down_replicas_per_minute,
    )
