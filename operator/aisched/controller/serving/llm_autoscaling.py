"""Metric type LLM: a reading of the servers' signals -> `decide_llm_replicas`, with the service's memory.

The memory (recent recommendations, the last minute's changes, the load history, the learned capacity)
lives in the operator, and all of it but the load history is also written on the service after each
decision (`policy/llm_scaling/persisted.py`), so a restarted operator goes on from it. The cold
start is learned from the service's own replicas, each boot (binding to first readiness, as the pod's
conditions say) counted once; the spec's `coldStartSeconds` is the prior until one has booted, and a
restarted operator learns again from the ready pods it finds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from aisched.api.inference_service import AutoscalingSpec, LlmMetricSpec
from aisched.controller.serving.replica_pods import ServiceKey
from aisched.kube.serving_builders import ServingPod
from aisched.policy.llm_scaling import (
    ColdStartEstimate,
    ScalingDecision,
    ScalingMemory,
    ServiceSignals,
    decide_llm_replicas,
)
from aisched.policy.llm_scaling.from_api import llm_scaling_spec
from aisched.policy.llm_scaling.persisted import memory_from_json
from aisched.sources.llm_signals import LlmSample


def service_signals(sample: LlmSample, pods: Sequence[ServingPod]) -> ServiceSignals | None:
    """The policy's view of one reading; None when the queue or the batch went unread (no evidence)."""
    if sample.waiting is None or sample.running is None:
        return None
    candidates = [pod for pod in pods if pod.serving_candidate]
    ready = sum(1 for pod in candidates if pod.ready)
    return ServiceSignals(
        ready_replicas=ready,
        booting_replicas=len(candidates) - ready,
        waiting=round(sample.waiting),
        running=round(sample.running),
        kv_usage_sum=sample.kv_usage_sum or 0.0,
        arrival_rate=sample.arrival_rate or 0.0,
        ttft_percentile_s=_finite(sample.ttft_s),
        tpot_percentile_s=_finite(sample.tpot_s),
    )


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class LlmReading:
    sample: LlmSample | None
    pods: tuple[ServingPod, ...]


@dataclass
class LlmScalers:
    """Each LLM-mode service's scaling memory, forgotten with the service."""

    _memory: dict[ServiceKey, ScalingMemory] = field(default_factory=dict)
    _booted: dict[ServiceKey, frozenset[str]] = field(default_factory=dict)
    """The replicas whose boot each service's cold start has counted, of those it still has."""

    def forget(self, key: ServiceKey) -> None:
        self._memory.pop(key, None)
        self._booted.pop(key, None)

    def memory(self, key: ServiceKey) -> ScalingMemory | None:
        return self._memory.get(key)

    def decide(
        self,
        key: ServiceKey,
        autoscaling: AutoscalingSpec,
        llm: LlmMetricSpec,
        reading: LlmReading,
        *,
        sync_period_s: float,
        max_age_s: float,
        now: datetime,
        persisted: str | None = None,
    ) -> ScalingDecision | None:
        """The decision on a fresh reading; None when there is none to decide on (the count holds). PERSISTED:
        the memory the service's annotation keeps (`persisted.py`), read when this process has none of its own."""
        sample = reading.sample
        if sample is None or now - sample.observed_at > timedelta(seconds=max_age_s):
            return None
        signals = service_signals(sample, reading.pods)
        if signals is None:
            return None
        memory = self._memory.get(key) or memory_from_json(
            persisted,
            now=now.timestamp(),
            fresh=ScalingMemory(cold_start=ColdStartEstimate(prior_s=llm.cold_start_seconds)),
        )
        # The spec's prior (edited, perhaps) and the boots of the replicas that came up since the last reading.
        prior = replace(memory.cold_start, prior_s=llm.cold_start_seconds)
        memory = replace(memory, cold_start=self._boots_seen(key, prior, reading.pods))
        spec = llm_scaling_spec(autoscaling, llm, sync_period_s)
        decision, self._memory[key] = decide_llm_replicas(
            spec, signals, memory, autoscaling.max_replicas, now.timestamp()
        )
        return decision

    def _boots_seen(
        self, key: ServiceKey, estimate: ColdStartEstimate, pods: Sequence[ServingPod]
    ) -> ColdStartEstimate:
        """ESTIMATE with the boot of each of PODS ready since the last reading (each pod counted once)."""
        counted = self._booted.get(key, frozenset())
        for pod in pods:
            if pod.boot_seconds is not None and pod.name not in counted:
                estimate = estimate.observe(pod.boot_seconds)
        self._booted[key] = frozenset(p.name for p in pods if p.boot_seconds is not None)
        return estimate
