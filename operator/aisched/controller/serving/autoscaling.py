"""Step 3 of a pass: the autoscaler, when due.

metric -> `policy.autoscale.decide_replicas` -> spec.replicas through the scale
subresource (the path `kubectl scale` and HPA take, so it changes nothing else
in the spec and RBAC can grant just it), with the law's memory kept in an
annotation so that a restarted operator carries on where it stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aisched.api.inference_service import InferenceService, InferenceServiceStatus, MetricType, ScalingDecision
from aisched.controller.serving.llm_autoscaling import LlmReading, LlmScalers
from aisched.controller.serving.replica_pods import ServiceKey
from aisched.kube.client import KubeClient
from aisched.kube.serving_builders import AUTOSCALER_STATE, LLM_LOAD_HISTORY, LLM_SCALING_MEMORY, ServingPod
from aisched.metrics import Metrics
from aisched.policy.autoscale import AutoscalerState, MetricSample, ReasonCode, ScalingBehavior
from aisched.policy.autoscale import decide_replicas as decide_autoscale
from aisched.policy.llm_scaling.persisted import memory_to_json
from aisched.policy.serving_status import find_condition, set_service_condition
from aisched.settings import Settings
from aisched.sources.llm_signals import read_llm_signals
from aisched.sources.prometheus import MetricQueryRefusedError, PrometheusError, PrometheusSource

log = logging.getLogger(__name__)
PLURAL = "inferenceservices"
NO_PROMETHEUS = "no Prometheus is configured (AISCHED_AUTOSCALER__PROMETHEUS_URL)"
METRIC_QUERY_REFUSED = "MetricQueryRefused"
MAX_ERROR_CHARS = 256
"""Of why a metric could not be read, as the tenant sees it in conditions and events."""


@dataclass(frozen=True)
class MetricReading:
    """What the metric source said for one service: a sample, nothing, or why it could not say."""

    sample: MetricSample | None
    error: str | None = None
    reason: str | None = None
    """The condition's reason when it is the tenant's to fix (MetricQueryRefused), not an outage."""
    llm: LlmReading | None = None
    """Metric type LLM: the servers' signals and the pods they were read from, instead of a sample."""


@dataclass
class ServiceAutoscaler:
    """Per service: when its autoscaler is next due, the control law's memory, and its decisions carried out."""

    settings: Settings
    kube: KubeClient
    prometheus: PrometheusSource | None
    metrics: Metrics | None
    scaled: Callable[[ServiceKey, int], None]
    """Told of each scale write, so the controller's copy of the service shows the new count at once."""
    _states: dict[ServiceKey, AutoscalerState] = field(default_factory=dict)
    llm_scalers: LlmScalers = field(default_factory=LlmScalers)
    _next_due: dict[ServiceKey, datetime] = field(default_factory=dict)
    _reading: dict[ServiceKey, asyncio.Task[MetricReading]] = field(default_factory=dict)
    """Metric reads in flight, one at most per service."""
    _read: dict[ServiceKey, MetricReading] = field(default_factory=dict)
    """Readings that came in and no pass has decided on yet."""

    def forget(self, key: ServiceKey) -> None:
        self._states.pop(key, None)
        self.llm_scalers.forget(key)
        self._next_due.pop(key, None)
        self._read.pop(key, None)
        task = self._reading.pop(key, None)
        if task is not None:
            task.cancel()

    def start_read(
        self,
        key: ServiceKey,
        service: InferenceService | None,
        pods: Sequence[ServingPod],
        arrived: Callable[[ServiceKey], None],
    ) -> None:
        """Read the service's metric in the background; ARRIVED is told when the reading is in.

        No pass waits on a query: a tenant whose Prometheus queries hang delays its own
        decisions only. A read still in flight when the next turn comes takes that turn.
        """
        if key in self._reading:
            return
        task = asyncio.create_task(self.read_metric(key, service, pods), name=f"metric of {key[0]}/{key[1]}")
        self._reading[key] = task

        def done(finished: asyncio.Task[MetricReading]) -> None:
            if self._reading.get(key) is not finished:
                return  # forgotten meanwhile
            del self._reading[key]
            if finished.cancelled():
                return
            failure = finished.exception()
            reading = finished.result() if failure is None else MetricReading(None, "reading the metric failed")
            if failure is not None:
                log.error("reading the metric of InferenceService %s/%s failed", *key, exc_info=failure)
            self._read[key] = reading
            arrived(key)

        task.add_done_callback(done)

    def take_reading(self, key: ServiceKey) -> MetricReading | None:
        """The reading that came in for the service since its last decision, if any."""
        return self._read.pop(key, None)

    def readings_in(self) -> set[ServiceKey]:
        return set(self._read)

    def due(self, key: ServiceKey, service: InferenceService | None, now: datetime) -> bool:
        """Whether the service's autoscaler decides in this pass; if so, its next turn is one interval on."""
        autoscaling = service.spec.autoscaling if service is not None else None
        if autoscaling is None or not autoscaling.enabled:
            self._next_due.pop(key, None)
            return False
        due = self._next_due.get(key)
        if due is not None and now < due:
            return False
        self._next_due[key] = now + timedelta(seconds=self.settings.autoscaler.interval_seconds)
        return True

    def next_due(self, key: ServiceKey) -> datetime | None:
        """When the service's autoscaler next decides; None when it has none."""
        return self._next_due.get(key)

    async def read_metric(
        self, key: ServiceKey, service: InferenceService | None, pods: Sequence[ServingPod]
    ) -> MetricReading:
        if service is None or service.spec.autoscaling is None:
            return MetricReading(None)
        if self.prometheus is None:
            return MetricReading(None, NO_PROMETHEUS)
        names = sorted(p.name for p in pods if p.serving_candidate)
        metric = service.spec.autoscaling.metric
        try:
            if metric.type == MetricType.LLM and metric.llm is not None:
                signals = await read_llm_signals(self.prometheus, metric.llm, key[0], names)
                sample, llm = None, LlmReading(signals, tuple(pods))
            else:
                sample, llm = await self.prometheus.service_metric(metric, key[0], names), None
        except MetricQueryRefusedError as refused:
            return MetricReading(None, _bounded(f"metric.query is not sent: {refused}"), METRIC_QUERY_REFUSED)
        except PrometheusError as error:
            return MetricReading(None, _bounded(str(error)))
        except Exception:  # one service's metric must not stop the others' reconciles
            log.exception("reading the metric of InferenceService %s/%s failed", *key)
            return MetricReading(None, "reading the metric failed; the reason is in the operator log")
        return MetricReading(sample, llm=llm)

    async def decide(
        self,
        obj: dict[str, Any],
        service: InferenceService,
        status: InferenceServiceStatus,
        reading: MetricReading,
        now: datetime,
    ) -> int:
        """One autoscaler decision, carried out; returns the replica count it settled on."""
        autoscaling = service.spec.autoscaling
        assert autoscaling is not None
        namespace, name = service.metadata["namespace"], service.metadata["name"]
        key = (namespace, name)
        current = service.spec.replicas
        if autoscaling.metric.type == MetricType.LLM:
            outcome = await self._llm_outcome(key, service, reading, now)
        else:
            outcome = await self._law_outcome(key, service, reading, now)
        replicas, decided, metric_value = outcome
        message = f"{decided.message} ({reading.error})" if reading.error else decided.message
        refused = decided.reason == ReasonCode.METRIC_UNAVAILABLE and reading.reason is not None
        reason = reading.reason if refused and reading.reason else decided.reason
        previous = find_condition(status, "ScalingActive")
        if replicas != current:
            await self.kube.scale_custom(PLURAL, namespace, name, replicas)
            self.scaled(key, replicas)
            status.last_scaling = ScalingDecision(
                time=now, from_replicas=current, to_replicas=replicas, reason=f"{decided.reason}: {message}"
            )
            self.kube.post_event(obj, "Normal", decided.reason, message)
        elif decided.reason == ReasonCode.METRIC_UNAVAILABLE and (previous is None or previous.reason != reason):
            self.kube.post_event(obj, "Warning", reason, message)
        status.desired_replicas = replicas
        status.current_metric_value = metric_value
        active = decided.reason != ReasonCode.METRIC_UNAVAILABLE
        status.conditions = set_service_condition(
            status, "ScalingActive", active, reason, message, service=service, now=now
        )
        if self.metrics is not None:
            self.metrics.serving.record_autoscaler_decision(current, replicas, decided.reason)
        return replicas

    async def _law_outcome(
        self, key: ServiceKey, service: InferenceService, reading: MetricReading, now: datetime
    ) -> tuple[int, _Decided, float | None]:
        """The per-replica control law's decision, its memory kept in an annotation too."""
        autoscaling = service.spec.autoscaling
        assert autoscaling is not None
        behavior = ScalingBehavior.from_spec(autoscaling, self.settings.autoscaler.metric_max_age_seconds)
        state = self._states.get(key) or AutoscalerState.from_json(
            (service.metadata.get("annotations") or {}).get(AUTOSCALER_STATE)
        )
        decision = decide_autoscale(behavior, state, service.spec.replicas, reading.sample, now)
        self._states[key] = decision.state
        await self.kube.annotate_custom(PLURAL, key[0], key[1], {AUTOSCALER_STATE: decision.state.to_json()})
        return decision.replicas, _Decided(decision.reason, decision.message), decision.metric_per_replica

    async def _llm_outcome(
        self, key: ServiceKey, service: InferenceService, reading: MetricReading, now: datetime
    ) -> tuple[int, _Decided, float | None]:
        """`decide_llm_replicas` on the servers' signals, its memory kept in an annotation too; without a fresh
        reading the count holds."""
        autoscaling = service.spec.autoscaling
        assert autoscaling is not None and autoscaling.metric.llm is not None
        current = service.spec.replicas
        decision = None
        if reading.llm is not None:
            decision = self.llm_scalers.decide(
                key,
                autoscaling,
                autoscaling.metric.llm,
                reading.llm,
                sync_period_s=self.settings.autoscaler.interval_seconds,
                max_age_s=self.settings.autoscaler.metric_max_age_seconds,
                now=now,
                annotations=service.metadata.get("annotations"),
            )
        if decision is None:
            why = "no fresh reading of the servers' queue and batch; holding the replica count"
            return current, _Decided(ReasonCode.METRIC_UNAVAILABLE, why), None
        if (memory := self.llm_scalers.memory(key)) is not None:
            written = {LLM_SCALING_MEMORY: memory_to_json(memory)}
            if (load := self.llm_scalers.load_to_write(key)) is not None:
                written[LLM_LOAD_HISTORY] = load
            await self.kube.annotate_custom(PLURAL, key[0], key[1], written)
        if decision.replicas > current:
            code = ReasonCode.SCALE_FROM_ZERO if current == 0 else ReasonCode.SCALE_UP
        elif decision.replicas < current:
            code = ReasonCode.SCALE_TO_ZERO if decision.replicas == 0 else ReasonCode.SCALE_DOWN
        else:
            code = ReasonCode.WITHIN_TOLERANCE
        message = (
            f"{decision.replicas} replicas, by {decision.reason}: {decision.need_now:.2f} needed now, "
            f"{decision.need_ahead:.2f} ahead of the cold start"
        )
        return decision.replicas, _Decided(code, message), decision.need_now


@dataclass(frozen=True)
class _Decided:
    """What either law decided, as status and events tell it."""

    reason: str
    message: str


def _bounded(message: str) -> str:
    return message if len(message) <= MAX_ERROR_CHARS else message[: MAX_ERROR_CHARS - 1] + "…"
