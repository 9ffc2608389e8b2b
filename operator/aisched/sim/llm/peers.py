"""The peers, configured as their authors document them, and aisched's policy, all behind `Autoscaler`.

- `HpaOnRate` (arm `hpa`): the Kubernetes HPA on requests per second per replica, an AverageValue
  target, with HPA's documented defaults: 15 s sync period, 10% tolerance, a 300 s scale-down
  stabilisation window, scale-up at most max(4 pods, 100%) per 15 s (kubernetes.io, "Horizontal Pod
  Autoscaling", default behavior).
- `KedaOnQueue` (arm `keda`): KEDA's Prometheus scaler on vllm:num_requests_waiting with threshold 5,
  15 s polling, as the vLLM production-stack's KEDA guide configures it
  (docs/source/use_cases/autoscaling-keda.rst); KEDA hands the threshold to an HPA as an AverageValue
  target, so HPA's defaults above apply. (llm-d's own KEDA guide was not found; this is the
  documented vLLM configuration llm-d's path builds on.)
- `Kpa` (arm `aibrix_kpa`): Knative's KPA as AIBrix implements it: a 60 s stable window, a 6 s panic
  window (10% of stable), panic when the panic-window need reaches 2x the ready replicas (threshold
  200%), no scale-down while panicking, scale-down at most 2x per tick (knative.dev, "Additional
  autoscaling configuration for Knative Pod Autoscaler"). The metric is concurrency per pod (running
  plus waiting requests), KPA's default metric.
- `Saturation` (arm `saturation`): llm-d's Workload Variant Autoscaler's saturation analyzer with
  its default thresholds (capacity-scaling-config: kvCacheThreshold 0.80, queueLengthThreshold 5,
  kvSpareTrigger 0.10, queueSpareTrigger 3): one more replica when the non-saturated replicas' average
  spare KV or queue room falls below the triggers and none is pending, one fewer when the load would
  still leave the triggers' room on one replica fewer; its output goes through an HPA (defaults).
- `AischedLlm` (arm `aisched`): aisched.policy.llm_scaling.decide_llm_replicas.
- static peak is a fixed fleet (no autoscaler).

The per-replica targets of `hpa` and `aibrix_kpa` (rate, concurrency) are what a user would set from
a load test: 70% of what one replica sustains within the objectives (aisched.sim.llm.capacity).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from aisched.api.inference_service import (
    AutoscalingSpec,
    LatencyObjectivesSpec,
    LlmMetricSpec,
    MetricSpec,
    MetricType,
)
from aisched.policy.llm_scaling import (
    LatencyObjectives,
    LlmScalingSpec,
    ScalingMemory,
    ServiceSignals,
    decide_llm_replicas,
    llm_scaling_spec,
)
from aisched.sim.llm.fleet import FleetView, ReplicaGauges

HPA_SYNC_S = 15.0


@dataclass
class HpaBehavior:
    """HPA's default behaviour around a raw recommendation: tolerance, rate limit, scale-down window."""

    min_replicas: int
    max_replicas: int
    tolerance: float = 0.1
    down_window_s: float = 300.0
    history: deque[tuple[float, int]] = field(default_factory=deque)

    def apply(self, now: float, current: int, raw: int, ratio: float | None) -> int:
        if ratio is not None and abs(ratio - 1.0) <= self.tolerance:
            raw = current
        raw = max(self.min_replicas, min(self.max_replicas, raw))
        self.history.append((now, raw))
        while self.history and now - self.history[0][0] > self.down_window_s:
            self.history.popleft()
        if raw < current:
            return min(current, max(r for _, r in self.history))
        return min(raw, max(current + 4, 2 * current))


@dataclass
class HpaOnRate:
    target_rps_per_replica: float
    behavior: HpaBehavior
    period_s: float = HPA_SYNC_S

    def decide(self, view: FleetView) -> int:
        current = max(1, view.replicas)
        ratio = view.arrival_rate / (self.target_rps_per_replica * current)
        return self.behavior.apply(view.now, view.replicas, math.ceil(ratio * current), ratio)


@dataclass
class KedaOnQueue:
    behavior: HpaBehavior
    threshold: float = 5.0
    period_s: float = HPA_SYNC_S

    def decide(self, view: FleetView) -> int:
        waiting = sum(g.waiting for g in view.ready) + view.held_at_service
        current = max(1, view.replicas)
        ratio = waiting / (self.threshold * current)
        return self.behavior.apply(view.now, view.replicas, math.ceil(waiting / self.threshold), ratio)


@dataclass
class Kpa:
    target_concurrency: float
    min_replicas: int
    max_replicas: int
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_threshold: float = 2.0
    max_scale_down_rate: float = 2.0
    period_s: float = 5.0
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    panicking_since: float | None = None

    def decide(self, view: FleetView) -> int:
        concurrency = sum(g.waiting + g.running for g in view.ready) + view.held_at_service
        self.samples.append((view.now, concurrency))
        while self.samples and view.now - self.samples[0][0] >= self.stable_window_s:
            self.samples.popleft()
        stable = sum(c for _, c in self.samples) / len(self.samples)
        recent = [c for t, c in self.samples if view.now - t < self.panic_window_s] or [concurrency]
        panic = sum(recent) / len(recent)
        want_stable = math.ceil(stable / self.target_concurrency)
        want_panic = math.ceil(panic / self.target_concurrency)
        ready = max(1, len(view.ready))
        if want_panic / ready >= self.panic_threshold:
            self.panicking_since = view.now
        elif self.panicking_since is not None and view.now - self.panicking_since >= self.stable_window_s:
            self.panicking_since = None
        want = want_stable
        if self.panicking_since is not None:
            want = max(want_panic, view.replicas)  # KPA never scales down in panic
        want = max(want, math.floor(view.replicas / self.max_scale_down_rate))
        return max(self.min_replicas, min(self.max_replicas, want))


@dataclass
class Saturation:
    behavior: HpaBehavior
    kv_threshold: float = 0.80
    queue_threshold: int = 5
    kv_spare_trigger: float = 0.10
    queue_spare_trigger: float = 3.0
    period_s: float = HPA_SYNC_S

    def decide(self, view: FleetView) -> int:
        current = view.replicas
        if not view.ready:
            return self.behavior.apply(view.now, current, max(1, current), None)
        fresh = [g for g in view.ready if g.kv_usage < self.kv_threshold and g.waiting < self.queue_threshold]
        raw = current
        if view.booting == 0 and (not fresh or self._short(fresh)):
            raw = current + 1
        elif len(view.ready) > 1 and view.booting == 0:
            n = len(view.ready)
            kv = sum(g.kv_usage for g in view.ready) / (n - 1)
            waiting = sum(g.waiting for g in view.ready) / (n - 1)
            if (
                self.kv_threshold - kv >= self.kv_spare_trigger
                and self.queue_threshold - waiting >= self.queue_spare_trigger
            ):
                raw = current - 1
        return self.behavior.apply(view.now, current, raw, None)

    def _short(self, fresh: list[ReplicaGauges]) -> bool:
        spare_kv = sum(self.kv_threshold - g.kv_usage for g in fresh) / len(fresh)
        spare_queue = sum(self.queue_threshold - g.waiting for g in fresh) / len(fresh)
        return spare_kv < self.kv_spare_trigger or spare_queue < self.queue_spare_trigger


@dataclass
class AischedLlm:
    spec: LlmScalingSpec
    quota_replicas: int
    period_s: float = 15.0
    memory: ScalingMemory = field(default_factory=ScalingMemory)
    seen_boots: int = 0

    def decide(self, view: FleetView) -> int:
        cold = self.memory.cold_start
        for duration in view.boot_durations_s[self.seen_boots :]:
            cold = cold.observe(duration)
        self.seen_boots = len(view.boot_durations_s)
        signals = ServiceSignals(
            ready_replicas=len(view.ready),
            booting_replicas=view.booting,
            waiting=sum(g.waiting for g in view.ready) + view.held_at_service,
            running=sum(g.running for g in view.ready),
            kv_usage_sum=sum(g.kv_usage for g in view.ready),
            arrival_rate=view.arrival_rate,
            ttft_percentile_s=view.ttft_percentile_s,
            tpot_percentile_s=view.tpot_percentile_s,
        )
        memory = ScalingMemory(
            self.memory.recommendations,
            self.memory.load,
            cold,
            self.memory.rate_per_replica,
            self.memory.last_arrival_at,
        )
        decision, self.memory = decide_llm_replicas(self.spec, signals, memory, self.quota_replicas, view.now)
        return decision.replicas


def aisched_spec(
    max_replicas: int, objectives: LatencyObjectives, replica_capacity_rps: float | None, min_replicas: int = 1
) -> LlmScalingSpec:
    """aisched's spec in the benchmark: a manifest's, the API's defaults but for the bounds, objectives and
    load-tested capacity, translated as the operator translates it."""
    llm = LlmMetricSpec(
        objectives=LatencyObjectivesSpec(
            ttft_seconds=objectives.ttft_s, tpot_seconds=objectives.tpot_s, percentile=objectives.percentile
        ),
        replica_capacity_rps=replica_capacity_rps,
    )
    autoscaling = AutoscalingSpec(
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        scale_to_zero=min_replicas == 0,
        metric=MetricSpec(type=MetricType.LLM, llm=llm),
    )
    return llm_scaling_spec(autoscaling, llm, sync_period_s=AischedLlm.period_s)
