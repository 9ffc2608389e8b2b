"""InferenceServices: replicas by capacity type and the autoscaler's metric, target and decisions."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from aisched.api.common import CapacityType
from aisched.metrics.labels import AUTOSCALER_DIRECTIONS, AUTOSCALER_REASONS, CAPACITY_TYPES, PREFIX, check, one_of
from aisched.metrics.pods import PodInfo


class ServingMetrics:
    def __init__(self, registry: CollectorRegistry, pods: PodInfo) -> None:
        r = registry
        self.pods = pods
        self.autoscaler_decisions = Counter(
            f"{PREFIX}_autoscaler_decisions",
            f"InferenceService autoscaler decisions, by direction ({one_of(AUTOSCALER_DIRECTIONS)}) "
            f"and reason ({one_of(AUTOSCALER_REASONS)}).",
            ["direction", "reason"],
            registry=r,
        )
        service = ["namespace", "service"]
        self.inference_replicas = Gauge(
            f"{PREFIX}_inference_replicas",
            "Running InferenceService replicas, by namespace, service (its name) and capacity_type "
            f"({one_of(CAPACITY_TYPES)}); one series per service and capacity type.",
            [*service, "capacity_type"],
            registry=r,
        )
        self.inference_desired_replicas = Gauge(
            f"{PREFIX}_inference_desired_replicas",
            "Replicas the autoscaler wants, by namespace and service (its name).",
            service,
            registry=r,
        )
        self.inference_metric_value = Gauge(
            f"{PREFIX}_inference_metric_per_replica",
            "Current value of the autoscaling metric per ready replica, by namespace and service.",
            service,
            registry=r,
        )
        self.inference_metric_target = Gauge(
            f"{PREFIX}_inference_metric_target_per_replica",
            "Autoscaling target per replica (spec.autoscaling.metric.targetPerReplica), by namespace and service.",
            service,
            registry=r,
        )
        for direction in AUTOSCALER_DIRECTIONS:
            for reason in AUTOSCALER_REASONS:
                self.autoscaler_decisions.labels(direction, reason)

    def cluster_gauges(self) -> tuple[Gauge, ...]:
        return (
            self.inference_replicas,
            self.inference_desired_replicas,
            self.inference_metric_value,
            self.inference_metric_target,
        )

    def record_autoscaler_decision(self, from_replicas: int, to_replicas: int, reason: str) -> None:
        direction = "Up" if to_replicas > from_replicas else "Down" if to_replicas < from_replicas else "None"
        self.autoscaler_decisions.labels(direction, check("reason", reason, AUTOSCALER_REASONS)).inc()

    def record_inference_service(
        self,
        namespace: str,
        service: str,
        *,
        desired: int,
        on_demand: int,
        spot: int,
        metric_per_replica: float | None,
        target_per_replica: float | None,
    ) -> None:
        """The state of one InferenceService; an unknown metric value drops its series."""
        self.inference_desired_replicas.labels(namespace, service).set(desired)
        self.inference_replicas.labels(namespace, service, CapacityType.ON_DEMAND.value).set(on_demand)
        self.inference_replicas.labels(namespace, service, CapacityType.SPOT.value).set(spot)
        for gauge, value in (
            (self.inference_metric_value, metric_per_replica),
            (self.inference_metric_target, target_per_replica),
        ):
            if value is None:
                gauge.remove_by_labels({"namespace": namespace, "service": service})
            else:
                gauge.labels(namespace, service).set(value)

    def forget_inference_service(self, namespace: str, service: str) -> None:
        self.pods.forget(namespace, service, "InferenceService")
        for gauge in self.cluster_gauges():
            gauge.remove_by_labels({"namespace": namespace, "service": service})
