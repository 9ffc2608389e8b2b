"""Step 5 of a pass: a service's status, its metrics and the events its conditions' changes deserve.

The status is patched only when it changed; the metrics are set every pass, so a scrape always
sees the replicas as of the last pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aisched.api.inference_service import InferenceService, InferenceServiceStatus
from aisched.controller.serving.autoscaling import PLURAL
from aisched.controller.serving.replica_pods import ReplicaPods
from aisched.kube.client import KubeClient
from aisched.metrics import Metrics
from aisched.policy.serving import PlanReason
from aisched.policy.serving_status import find_condition


@dataclass
class ServiceStatusWriter:
    kube: KubeClient
    replicas: ReplicaPods
    metrics: Metrics | None = None

    async def write(self, obj: dict[str, Any], service: InferenceService, status: InferenceServiceStatus) -> str | None:
        """Report STATUS and patch it over the service's; the resourceVersion the write left, None
        when there was nothing to patch (or the service is gone)."""
        namespace, name = service.metadata["namespace"], service.metadata["name"]
        self._record(service, status)
        self._post_condition_events(obj, service.status, status)
        if status == service.status:
            return None
        wire = status.to_wire()
        if status.current_metric_value is None and service.status.current_metric_value is not None:
            wire["currentMetricValue"] = None  # merge patch: null removes the field
        return await self.kube.patch_status(PLURAL, namespace, name, wire)

    def _record(self, service: InferenceService, status: InferenceServiceStatus) -> None:
        if self.metrics is None:
            return
        namespace, name = service.metadata["namespace"], service.metadata["name"]
        autoscaling = service.spec.autoscaling
        self.metrics.serving.record_inference_service(
            namespace,
            name,
            desired=status.desired_replicas or 0,
            on_demand=status.on_demand_replicas or 0,
            spot=status.spot_replicas or 0,
            metric_per_replica=status.current_metric_value,
            target_per_replica=autoscaling.metric.target_per_replica if autoscaling else None,
        )
        self.metrics.pods.record(
            namespace, name, "InferenceService", [p.name for p in self.replicas.of((namespace, name))]
        )

    def _post_condition_events(
        self, obj: dict[str, Any], before: InferenceServiceStatus, after: InferenceServiceStatus
    ) -> None:
        """An event when placement gets stuck or starts replacing interrupted replicas, once per change."""
        was, now = find_condition(before, "Progressing"), find_condition(after, "Progressing")
        if now is None or (was is not None and was.reason == now.reason):
            return
        if now.reason in (PlanReason.INSUFFICIENT_CAPACITY, PlanReason.ON_DEMAND_FLOOR_UNMET):
            self.kube.post_event(obj, "Warning", now.reason, now.message)
        elif now.reason == PlanReason.REPLACING_INTERRUPTED:
            self.kube.post_event(obj, "Normal", now.reason, now.message)
