"""Series of deleted objects are dropped: a tenant's made-up queue names and deleted jobs leave no series behind.

The controller as it runs (its census, its deletes) on a fresh registry; what is compared is every
series the exposition holds, by name and labels.
"""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aisched.controller.training import TrainingJobController
from tests.builders import a_queue
from tests.unit.controller.kube_double import KubeDouble
from tests.unit.controller.test_training_loop import a_controller, a_job

pytestmark = pytest.mark.asyncio
JOBS = 50


def series(controller: TrainingJobController) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    text = generate_latest(controller.metrics.registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items()))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def a_pass(controller: TrainingJobController) -> None:
    await controller.reconcile_once(controller.jobs.keys())
    controller.reporting.report()


async def test_jobs_under_made_up_queues_leave_no_series_once_deleted(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event")
    controller = a_controller(kube)
    controller.job_seen(a_job("kept"))
    for _ in range(2):  # every series the operator's own work makes, made once
        await a_pass(controller)
    before = series(controller)
    for index in range(JOBS):
        controller.job_seen(
            a_job(
                f"made-up-{index}",
                queue=f"made-up-{index}",
                deadline="2026-01-02T00:00:00Z",
                expectedDurationSeconds=3600,
            )
        )
    await a_pass(controller)
    grown = series(controller)
    assert len(grown) >= len(before) + 2 * JOBS  # per job and per queue name, while they exist
    for index in range(JOBS):
        controller.job_gone("ns", f"made-up-{index}")
    await a_pass(controller)
    assert series(controller) == before
    assert not any("made-up" in value for _, labels in series(controller) for _, value in labels)


async def test_a_deleted_queue_leaves_no_series_unless_a_job_still_names_it(kube: KubeDouble) -> None:
    kube.allow("patch_status", "post_event")
    controller = a_controller(kube)
    controller.job_seen(a_job("kept"))
    for _ in range(2):
        await a_pass(controller)
    before = series(controller)
    controller.queue_seen(a_queue("team", nominal_gpus=8).obj())
    controller.job_seen(a_job("waits", queue="team"))
    await a_pass(controller)
    assert any(("queue", "team") in labels for _, labels in series(controller))
    controller.queue_gone("team")
    await a_pass(controller)
    # The job still names it: its census goes on under that name, the Queue's gauges do not.
    named = {name for name, labels in series(controller) if ("queue", "team") in labels}
    assert "aisched_jobs" in named and "aisched_queue_gpus_nominal" not in named
    controller.job_gone("ns", "waits")
    await a_pass(controller)
    assert series(controller) == before
