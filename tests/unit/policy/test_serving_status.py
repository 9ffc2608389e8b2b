"""What an InferenceService's status says about its replicas (aisched.policy.serving_status)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from aisched.api import ConditionStatus
from aisched.api.common import CapacityType
from aisched.api.inference_service import InferenceService, InferenceServiceStatus
from aisched.policy.serving import PlanReason, ServingPlan
from aisched.policy.serving_status import (
    find_condition,
    observed_status,
    serving_phase,
    set_service_condition,
)
from tests.builders import an_inference_service

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CURRENT = "cur"


@dataclass(frozen=True)
class Replica:
    template_hash: str = CURRENT
    capacity_type: CapacityType = CapacityType.ON_DEMAND
    ready: bool = True
    serving_candidate: bool = True


def a_service(replicas: int = 2, max_unavailable: int = 1, generation: int = 3) -> InferenceService:
    obj = an_inference_service("chat").namespace("ml").replicas(replicas).set("rollout.maxUnavailable", max_unavailable)
    built = obj.obj()
    built["metadata"]["generation"] = generation
    return InferenceService.model_validate(built)


def observe(
    replicas: list[Replica], desired: int = 2, plan: ServingPlan | None = None, service: InferenceService | None = None
) -> InferenceServiceStatus:
    service = service or a_service(desired)
    return observed_status(
        service,
        InferenceServiceStatus(),
        desired,
        replicas,
        plan or ServingPlan(),
        now=T0,
        current_hash=CURRENT,
        selector="sel=chat",
    )


def condition(status: InferenceServiceStatus, type_: str) -> tuple[str, str]:
    found = find_condition(status, type_)
    assert found is not None
    return found.status, found.reason


def test_counts_only_live_replicas_by_readiness_and_capacity() -> None:
    status = observe(
        [
            Replica(),
            Replica(capacity_type=CapacityType.SPOT, ready=False),
            Replica(serving_candidate=False),  # on its way out
        ]
    )
    assert (status.replicas, status.ready_replicas, status.on_demand_replicas, status.spot_replicas) == (2, 1, 1, 1)
    assert status.selector == "sel=chat"
    assert status.observed_generation == 3
    assert status.desired_replicas == 2


def test_all_replicas_of_the_current_template_ready_is_running_and_complete() -> None:
    status = observe([Replica(), Replica()])
    assert status.phase == "Running"
    assert condition(status, "Available") == (ConditionStatus.TRUE, "MinimumReplicasAvailable")
    assert condition(status, "Progressing") == (ConditionStatus.TRUE, "Complete")


def test_replicas_of_an_old_template_are_rolling_out() -> None:
    status = observe([Replica(), Replica(template_hash="old")])
    assert status.phase == "Progressing"
    assert condition(status, "Progressing") == (ConditionStatus.TRUE, "RollingOut")
    found = find_condition(status, "Progressing")
    assert found is not None and found.message == "1 of 2 replica(s) run the current template"


def test_no_room_makes_progressing_false_and_says_why() -> None:
    plan = ServingPlan(unplaced=1, reason=PlanReason.INSUFFICIENT_CAPACITY, message="1 replica(s) fit on no node")
    status = observe([Replica()], plan=plan)
    assert condition(status, "Progressing") == (ConditionStatus.FALSE, "InsufficientCapacity")
    assert condition(status, "Available") == (ConditionStatus.TRUE, "MinimumReplicasAvailable")


def test_an_unmet_on_demand_floor_is_told_but_still_progresses() -> None:
    plan = ServingPlan(reason=PlanReason.ON_DEMAND_FLOOR_UNMET, message="on spot")
    status = observe([Replica(), Replica()], plan=plan)
    assert condition(status, "Progressing") == (ConditionStatus.TRUE, "OnDemandFloorUnmet")


def test_nothing_ready_is_unavailable_even_when_max_unavailable_allows_it() -> None:
    status = observe([Replica(ready=False)], desired=1)
    assert condition(status, "Available") == (ConditionStatus.FALSE, "MinimumReplicasUnavailable")
    assert status.phase == "Pending"


def test_a_desired_replica_count_set_by_the_autoscaler_is_kept() -> None:
    service = a_service(2)
    status = observed_status(
        service,
        InferenceServiceStatus(desired_replicas=5),
        2,
        [],
        ServingPlan(),
        now=T0,
        current_hash=CURRENT,
        selector="s",
    )
    assert status.desired_replicas == 5


@pytest.mark.parametrize(
    ("counts", "done", "phase"),
    [
        # counts: (desired, live, ready, min_available)
        ((0, 0, 0, 0), True, "Idle"),
        ((0, 1, 1, 0), False, "Progressing"),
        ((2, 2, 2, 1), True, "Running"),
        ((2, 2, 0, 1), False, "Pending"),
        ((3, 3, 1, 2), False, "Degraded"),
        ((3, 3, 2, 2), False, "Progressing"),
    ],
)
def test_phase(counts: tuple[int, int, int, int], done: bool, phase: str) -> None:
    assert serving_phase(*counts, done) == phase


def test_a_condition_moves_its_transition_time_only_when_its_status_changes() -> None:
    service = a_service(generation=7)
    status = InferenceServiceStatus()
    status.conditions = set_service_condition(status, "Available", True, "A", "first", service=service, now=T0)
    later = T0 + timedelta(minutes=1)
    status.conditions = set_service_condition(status, "Available", True, "B", "second", service=service, now=later)
    same = find_condition(status, "Available")
    assert same is not None
    assert (same.reason, same.message, same.last_transition_time, same.observed_generation) == ("B", "second", T0, 7)
    status.conditions = set_service_condition(status, "Available", False, "C", "third", service=service, now=later)
    flipped = find_condition(status, "Available")
    assert flipped is not None and flipped.last_transition_time == later
    assert find_condition(status, "Progressing") is None
