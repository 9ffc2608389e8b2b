"""LLM-serving autoscaling: replicas from queue, KV cache and latency against objectives, ahead of forecast load."""

from aisched.policy.llm_scaling.decide import (
    LatencyObjectives,
    LlmScalingSpec,
    ScalingDecision,
    ScalingMemory,
    ServiceSignals,
    decide_llm_replicas,
)
from aisched.policy.llm_scaling.engines import ENGINE_PRESETS, SGLANG, TGI, VLLM, EnginePreset, engine_preset
from aisched.policy.llm_scaling.from_api import llm_scaling_spec
from aisched.policy.llm_scaling.history import ColdStartEstimate, LoadHistory

__all__ = [
    "ENGINE_PRESETS",
    "SGLANG",
    "TGI",
    "VLLM",
    "ColdStartEstimate",
    "EnginePreset",
    "LatencyObjectives",
    "LlmScalingSpec",
    "LoadHistory",
    "ScalingDecision",
    "ScalingMemory",
    "ServiceSignals",
    "decide_llm_replicas",
    "engine_preset",
    "llm_scaling_spec",
]
