"""Metric type LLM: a reading of the servers' signals -> `decide_llm_replicas`, with the service's memory.

The memory (recent recommendations, the last minute's changes, the load history, the learned capacity)
lives in the operator, and is also written on the service (`policy/llm_scaling/persisted.py`): all of
it but the load history after each decision, the load history as five-minute means whenever a bucket
completes; a restarted operator goes on from both. The cold
start is learned from the service's own replicas, each boot (binding to first readiness, as the pod's
conditions say) counted once; the spec's `coldStartSeconds` is the prior until one has booted, and a
restarted operator learns again from the ready pods it finds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from aisched.api.inference_service import AutoscalingSpec, LlmMetricSpec
from aisched.controller.serving.replica_pods import ServiceKey
from aisched.kube.serving_builders import LLM_LOAD_HISTORY, LLM_SCALING_MEMORY, ServingPod
from aisched.policy.llm_scaling import (
    ColdStartEstimate,
    ScalingDecision,
    ScalingMemory,
    ServiceSignals,
    decide_llm_replicas,
)
from aisched.policy.llm_scaling.from_api import llm_scaling_spec
from aisched.policy.llm_scaling.persisted import LOAD_BUCKET_S, load_from_json, load_to_json, memory_from_json
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
    _load_written_through: dict[ServiceKey, float] = field(default_factory=dict)
    """Where the load history each service's annotation holds ends (what was read or last written)."""

    def forget(self, key: ServiceKey) -> None:
        self._memory.pop(key, None)
        self._booted.pop(key, None)
        self._load_written_through.pop(key, None)

    def memory(self, key: ServiceKey) -> ScalingMemory | None:
        return self._memory.get(key)

    def load_to_write(self, key: ServiceKey) -> str | None:
        """The load history's annotation when a bucket completed since it was last written or read, else None.

        Counted as written once returned: a write that fails is retried when the next bucket completes.
        """
        memory = self._memory.get(key)
        if memory is None or not memory.load.samples:
            return None
        # Only a sample in a newer bucket than the last written one completes a bucket: the means (a walk
        # over a week of samples) are built only then, not at every decision.
        newest_bucket_start = math.floor(memory.load.samples[-1][0] / LOAD_BUCKET_S) * LOAD_BUCKET_S
        if newest_bucket_start <= self._load_written_through.get(key, -math.inf):
            return None
        persisted = load_to_json(memory.load)
        if persisted is None or persisted.through <= self._load_written_through.get(key, -math.inf):
            return None
        self._load_written_through[key] = persisted.through
        return persisted.text

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
        annotations: Mapping[str, str] | None = None,
    ) -> ScalingDecision | None:
        """The decision on a fresh reading; None when there is none to decide on (the count holds). ANNOTATIONS:
        the service's, where its memory and load history are kept (`persisted.py`), read when this process
        has none of its own."""
        sample = reading.sample
        if sample is None or now - sample.observed_at > timedelta(seconds=max_age_s):
            return None
        signals = service_signals(sample, reading.pods)
        if signals is None:
            return None
        memory = self._memory.get(key) or self._restored(key, llm, annotations or {}, now.timestamp())
        # The spec's prior (edited, perhaps) and the boots of the replicas that came up since the last reading.
        prior = replace(memory.cold_start, prior_s=llm.cold_start_seconds)
        memory = replace(memory, cold_start=self._boots_seen(key, prior, reading.pods))
        spec = llm_scaling_spec(autoscaling, llm, sync_period_s)
        decision, self._memory[key] = decide_llm_replicas(
            spec, signals, memory, autoscaling.max_replicas, now.timestamp()
        )
        return decision

    def _restored(
        self, key: ServiceKey, llm: LlmMetricSpec, annotations: Mapping[str, str], now: float
    ) -> ScalingMemory:
        fresh = ScalingMemory(cold_start=ColdStartEstimate(prior_s=llm.cold_start_seconds))
        memory = memory_from_json(annotations.get(LLM_SCALING_MEMORY), now=now, fresh=fresh)
        read = load_from_json(annotations.get(LLM_LOAD_HISTORY), now=now, fresh=memory.load)
        if read.load.samples:  # what the annotation holds is written already: the next bucket is the next write
            self._load_written_through[key] = read.through
        return replace(memory, load=read.load)

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
