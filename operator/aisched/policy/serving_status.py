"""What an InferenceService's status says about its replicas. Pure.

After each pass the controller reports the replicas as they are once its own
actions (starts, retirements) are counted: how many run, how many are ready and
on which capacity, and two conditions that follow the Deployment's:

- Available: at least ``desired - maxUnavailable`` replicas are ready (and at
  least one, unless none is wanted);
- Progressing: False only when a wanted replica fits on no node; its reason
  says why the service is not where it should be (capacity, a rollout under
  way) or that it got there.

The phase sums the same up for a person reading ``kubectl get``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from aisched.api import ConditionStatus
from aisched.api.common import CapacityType, Condition, set_condition
from aisched.api.inference_service import InferenceService, InferenceServiceStatus
from aisched.policy.serving import WAITING, PlanReason, ServingPlan


class ObservedReplica(Protocol):
    """What status needs of one replica's pod."""

    @property
    def template_hash(self) -> str: ...

    @property
    def capacity_type(self) -> CapacityType: ...

    @property
    def ready(self) -> bool: ...

    @property
    def serving_candidate(self) -> bool:
        """Counts as a replica: neither on its way out nor finished."""
        ...


def observed_status(
    service: InferenceService,
    status: InferenceServiceStatus,
    desired: int,
    replicas: Sequence[ObservedReplica],
    plan: ServingPlan,
    *,
    now: datetime,
    current_hash: str,
    selector: str,
) -> InferenceServiceStatus:
    """STATUS updated from the replicas as they are after this pass's actions.

    CURRENT_HASH is the hash of the service's template now (replicas with
    another run an old one); SELECTOR goes to status.selector, which the scale
    subresource hands to `kubectl scale` and the HPA.
    """
    live = [p for p in replicas if p.serving_candidate]
    ready = sum(p.ready for p in live)
    updated = sum(p.template_hash == current_hash for p in live)
    min_available = max(desired - service.spec.rollout.max_unavailable, 0)
    status.observed_generation = service.metadata.get("generation")
    status.replicas = len(live)
    status.ready_replicas = ready
    status.on_demand_replicas = sum(p.capacity_type == CapacityType.ON_DEMAND for p in live)
    status.spot_replicas = sum(p.capacity_type == CapacityType.SPOT for p in live)
    status.selector = selector
    if status.desired_replicas is None:
        status.desired_replicas = desired
    available = ready >= min_available and (ready > 0 or desired == 0)
    status.conditions = set_service_condition(
        status,
        "Available",
        available,
        "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
        f"{ready} of {desired} replica(s) ready; at least {min_available} must be",
        service=service,
        now=now,
    )
    done = updated == len(live) == ready == desired
    if plan.reason in (*WAITING, PlanReason.ON_DEMAND_FLOOR_UNMET):
        reason, message = plan.reason.value, plan.message
    elif updated < len(live):
        reason, message = "RollingOut", f"{updated} of {len(live)} replica(s) run the current template"
    elif done:
        reason, message = "Complete", f"{desired} replica(s) of the current template ready"
    else:
        reason, message = plan.reason.value, plan.message
    status.conditions = set_service_condition(
        status,
        "Progressing",
        plan.reason not in WAITING,
        reason,
        message,
        service=service,
        now=now,
    )
    status.phase = serving_phase(desired, len(live), ready, min_available, done)
    return status


def serving_phase(desired: int, live: int, ready: int, min_available: int, done: bool) -> str:
    """Idle, Running, Pending, Degraded or Progressing, from the replica counts."""
    if desired == 0 and live == 0:
        return "Idle"
    if done:
        return "Running"
    if ready == 0:
        return "Pending"
    if ready < min_available:
        return "Degraded"
    return "Progressing"


def find_condition(status: InferenceServiceStatus, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)


def set_service_condition(
    status: InferenceServiceStatus,
    type_: str,
    true: bool,
    reason: str,
    message: str,
    *,
    service: InferenceService,
    now: datetime,
) -> list[Condition]:
    """STATUS's conditions with TYPE_ set, stamped with the service's generation."""
    return set_condition(
        status.conditions,
        type_,
        ConditionStatus.TRUE if true else ConditionStatus.FALSE,
        reason,
        message,
        now=now,
        generation=service.metadata.get("generation"),
    )


REPLICA_FAILURE = "ReplicaFailure"


def replica_failure(
    status: InferenceServiceStatus, refusal: str | None, *, service: InferenceService, now: datetime
) -> list[Condition]:
    """STATUS's conditions with the API server's REFUSAL of a new replica (a Deployment's
    ReplicaFailure); one the service carried goes False once a replica is created or none is asked for."""
    if refusal is not None:
        return set_service_condition(status, REPLICA_FAILURE, True, "FailedCreate", refusal, service=service, now=now)
    current = next((c for c in status.conditions if c.type == REPLICA_FAILURE), None)
    if current is None or current.status == ConditionStatus.FALSE:
        return status.conditions
    return set_service_condition(
        status,
        REPLICA_FAILURE,
        False,
        "Created",
        "the API server took every replica asked of it",
        service=service,
        now=now,
    )
