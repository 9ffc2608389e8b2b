"""One poisoned TrainingJob next to a plain one: the plain one is scheduled in the same pass,
the poisoned one gets a condition that says why and is tried again after a backoff.

The API client is a double that refuses every call a test did not allow; the controller's
clock is fixed and the work queue's timers run on a fake loop clock (looptime).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from aisched.api import TrainingJob
from aisched.controller.training import TrainingJobController
from aisched.policy import decision
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.scheduler import JobRequest, ScheduleResult
from aisched.policy.scheduler import schedule as policy_schedule
from aisched.policy.spot import CapacityDecision
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_loop import (
    T0,
    a_controller,
    a_job,
    a_node,
    marked_within,
    patched,
    reconcile_errors,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.looptime]
POISONED = ("ns", "poisoned")


def a_placed_job(name: str, **spec: Any) -> dict[str, Any]:
    obj = a_job(name, gpusPerReplica=4, **spec)
    obj["metadata"].update(uid=f"uid-{name}", generation=1)
    return obj


def status_of(controller: TrainingJobController, name: str) -> dict[str, Any]:
    return dict(controller.jobs[("ns", name)].get("status") or {})


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == type_)


def events(kube: KubeDouble) -> list[tuple[str, str, str]]:
    """(job name, event type, reason) of each event posted."""
    return [(obj["metadata"]["name"], kind, reason) for obj, kind, reason, _ in kube.calls("post_event")]


async def one_pass(controller: TrainingJobController) -> None:
    await controller.reconcile_once(await controller.queue.next_batch(controller.jobs.keys, timeout=0))


async def test_a_job_the_model_cannot_read_is_set_aside_while_the_plain_one_is_admitted(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    # Stored before an upgrade tightened the schema: the CRD let it in, this operator's model does not.
    controller.job_seen(a_placed_job("poisoned", expectedDurationSeconds=10**12))
    controller.job_seen(a_placed_job("plain"))
    await one_pass(controller)

    assert status_of(controller, "plain")["phase"] == "Placing"
    poisoned = status_of(controller, "poisoned")
    assert (poisoned["phase"], poisoned["reason"]) == ("Queued", "InvalidSpec")
    admitted = condition(poisoned, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "InvalidSpec")
    assert "spec.expectedDurationSeconds" in admitted["message"]
    assert "1000000000000" in admitted["message"]
    assert ("poisoned", "Warning", "InvalidSpec") in events(kube)
    assert reconcile_errors(controller) == 1

    # It sits out the passes during its backoff...
    await one_pass(controller)
    assert reconcile_errors(controller) == 1
    # ...is tried again once it is over (a second failure: the next wait is twice as long)...
    assert POISONED in await marked_within(controller, 1.5)
    await one_pass(controller)
    assert reconcile_errors(controller) == 2
    assert POISONED not in await marked_within(controller, 1.5)
    assert POISONED in await marked_within(controller, 1)

    # ...and at once when its user fixes the spec (a new generation).
    fixed = a_placed_job("poisoned", expectedDurationSeconds=3600)
    fixed["metadata"]["generation"] = 2
    controller.job_seen(fixed)
    await one_pass(controller)
    assert status_of(controller, "poisoned")["phase"] == "Placing"
    assert reconcile_errors(controller) == 2


async def test_a_job_the_cycle_fails_on_gets_cannot_schedule_and_is_retried_after_its_backoff(
    kube: KubeDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.job_seen(a_placed_job("poisoned"))
    controller.job_seen(a_placed_job("plain"))
    choose = controller.cycle_kind.capacity.choose
    broken = True

    def choose_capacity(
        job: TrainingJob, snapshot: ClusterSnapshot, doomed: frozenset[str], now: datetime
    ) -> CapacityDecision:
        if broken and job.metadata["name"] == "poisoned":
            raise OverflowError("date value out of range")
        return choose(job, snapshot, doomed, now)

    monkeypatch.setattr(controller.cycle_kind.capacity, "choose", choose_capacity)
    await one_pass(controller)

    assert status_of(controller, "plain")["phase"] == "Placing"
    poisoned = status_of(controller, "poisoned")
    assert (poisoned["phase"], poisoned["reason"]) == ("Queued", "CannotSchedule")
    assert "OverflowError" in poisoned["message"] and "date value out of range" in poisoned["message"]
    broken = False
    await one_pass(controller)
    assert status_of(controller, "poisoned")["phase"] == "Queued"  # still waiting out its backoff
    assert POISONED in await marked_within(controller, 1.5)
    await one_pass(controller)
    assert status_of(controller, "poisoned")["phase"] == "Placing"


async def test_a_status_the_api_server_refuses_affects_only_that_job(kube: KubeDouble) -> None:
    refusing = True

    def patch_status(plural: str, namespace: str | None, name: str, status: dict[str, Any]) -> None:
        if refusing and name == "refused":
            raise RuntimeError("the API server said no")

    kube.answer("patch_status", patch_status).allow("post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.job_seen(a_placed_job("refused"))
    controller.job_seen(a_placed_job("plain"))
    await one_pass(controller)

    assert status_of(controller, "plain")["phase"] == "Placing"
    assert "status" not in controller.jobs[("ns", "refused")]
    assert reconcile_errors(controller) == 1
    refusing = False
    assert ("ns", "refused") in await marked_within(controller, 1.5)
    await one_pass(controller)
    assert status_of(controller, "refused")["phase"] == "Placing"


async def test_a_placed_gang_set_aside_runs_on_and_says_it_is_out_of_the_schedulers_reach(
    kube: KubeDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.allow("patch_status", "post_event")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    gang = a_placed_job("gang")
    gang["status"] = {"phase": "Running", "placement": {"nodes": ["n1"]}, "gangGeneration": 1}
    controller.job_seen(gang)
    await controller.queue.next_batch(controller.jobs.keys, timeout=0)
    enter = controller.cycle_kind._enter_cycle
    broken = True

    async def enter_cycle(obj: dict[str, Any], job: TrainingJob, *args: Any, **kwargs: Any) -> Any:
        if broken:
            raise ValueError("odd placement")
        return await enter(obj, job, *args, **kwargs)

    monkeypatch.setattr(controller.cycle_kind, "_enter_cycle", enter_cycle)
    await controller.schedule()
    status = status_of(controller, "gang")
    assert status["phase"] == "Running"
    schedulable = condition(status, "Schedulable")
    assert (schedulable["status"], schedulable["reason"]) == ("False", "CannotSchedule")
    assert "Admitted" not in {c["type"] for c in status["conditions"]}

    broken = False
    assert ("ns", "gang") in await marked_within(controller, 1.5)
    await controller.schedule()
    schedulable = condition(status_of(controller, "gang"), "Schedulable")
    assert (schedulable["status"], schedulable["reason"]) == ("True", "SpecAccepted")


async def test_a_deferrable_job_with_no_delay_allowed_starts_at_once(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube, carbon=True)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.job_seen(
        a_placed_job("now", carbon={"deferrable": True, "maxDelaySeconds": 0}, expectedDurationSeconds=1800)
    )
    await one_pass(controller)
    assert status_of(controller, "now")["phase"] == "Placing"
    assert reconcile_errors(controller) == 0


async def test_emissions_of_the_other_gangs_are_written_when_one_write_is_refused(kube: KubeDouble) -> None:
    def patch_status(plural: str, namespace: str | None, name: str, status: dict[str, Any]) -> None:
        if name == "refused":
            raise RuntimeError("the API server said no")

    kube.answer("patch_status", patch_status)
    controller = a_controller(kube, carbon=True)
    for name in ("refused", "plain"):
        job = a_placed_job(name)
        job["status"] = {"phase": "Running", "startTime": (T0 - timedelta(hours=1)).isoformat(), "gpus": 4}
        controller.job_seen(job)
    await controller.queue.next_batch(controller.jobs.keys, timeout=0)
    await controller.deferral.account_emissions(T0)
    assert status_of(controller, "plain")["estimatedEmissionsGrams"] > 0
    assert reconcile_errors(controller) == 1
    # The refused one sits the stage out until its backoff has passed.
    await controller.deferral.account_emissions(T0 + timedelta(minutes=1))
    assert patched(kube).count("refused") == 1
    assert ("ns", "refused") in await marked_within(controller, 1.5)
    await controller.deferral.account_emissions(T0 + timedelta(minutes=2))
    assert patched(kube).count("refused") == 2


async def test_a_queue_the_model_cannot_read_stops_no_job(kube: KubeDouble) -> None:
    """No job of another queue; its own wait, and an unreadable default queue grants nothing
    (tests/unit/controller/test_default_queue.py)."""
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.queue_seen({"metadata": {"name": "team", "generation": 1}, "spec": {"nominalGPUs": -1}})
    controller.job_seen(a_placed_job("plain"))
    await one_pass(controller)
    assert status_of(controller, "plain")["phase"] == "Placing"


async def test_one_job_whose_gauges_fail_leaves_the_others_reported(
    kube: KubeDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller = a_controller(kube)
    for name in ("broken", "plain"):
        controller.job_seen(a_placed_job(name))
    record_pods = controller.metrics.pods.record

    def record_job_pods(namespace: str, job_name: str, kind: str, pods: Any) -> None:
        if job_name == "broken":
            raise ValueError("odd label value")
        record_pods(namespace, job_name, kind, pods)

    monkeypatch.setattr(controller.metrics.pods, "record", record_job_pods)
    await controller.queue.next_batch(controller.jobs.keys, timeout=0)
    controller.reporting.report()
    jobs = controller.metrics.registry.get_sample_value("aisched_jobs", {"queue": "default", "phase": "Queued"})
    assert jobs == 2
    assert reconcile_errors(controller) == 1


async def test_a_job_the_scheduler_itself_raises_on_is_found_and_set_aside(
    kube: KubeDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.job_seen(a_placed_job("poisoned"))
    controller.job_seen(a_placed_job("plain"))

    def schedule(snapshot: ClusterSnapshot, jobs: Sequence[JobRequest], *args: Any, **kwargs: Any) -> ScheduleResult:
        if any(job.key == "ns/poisoned" for job in jobs):
            raise OverflowError("date value out of range")
        return policy_schedule(snapshot, jobs, *args, **kwargs)

    monkeypatch.setattr(decision, "schedule", schedule)
    await one_pass(controller)
    assert status_of(controller, "plain")["phase"] == "Placing"
    poisoned = status_of(controller, "poisoned")
    assert (poisoned["reason"], reconcile_errors(controller)) == ("CannotSchedule", 1)
    assert "OverflowError" in poisoned["message"]


async def test_a_failure_that_needs_two_jobs_together_sets_one_aside_and_the_others_are_scheduled(
    kube: KubeDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube.allow("patch_status", "post_event", "create")
    controller = a_controller(kube)
    controller.inventory.upsert_node(a_node("n1", 8))
    controller.inventory.upsert_node(a_node("n2", 8))
    for name in ("first", "second", "third"):
        controller.job_seen(a_placed_job(name))

    def schedule(snapshot: ClusterSnapshot, jobs: Sequence[JobRequest], *args: Any, **kwargs: Any) -> ScheduleResult:
        if {"ns/first", "ns/third"} <= {job.key for job in jobs}:
            raise IndexError("bucket index out of range")
        return policy_schedule(snapshot, jobs, *args, **kwargs)

    monkeypatch.setattr(decision, "schedule", schedule)
    await one_pass(controller)
    phases = {name: status_of(controller, name).get("phase") for name in ("first", "second", "third")}
    set_aside = [name for name, phase in phases.items() if phase != "Placing"]
    assert len(set_aside) == 1 and set_aside[0] in ("first", "third")
    assert status_of(controller, set_aside[0])["reason"] == "CannotSchedule"
