"""Carbon-aware deferral of other kinds' workloads: a held Job that asks for it waits for the clean hours.

The carbon source is the operator's cache over a forecast of a dirty hour, then clean ones; the book,
cycle and planner are the real ones.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from aisched.controller.cycle import CycleView
from aisched.controller.workloads.deferral import WorkloadDeferral
from aisched.metrics import Metrics
from aisched.policy.workloads.model import (
    CARBON_DEFERRABLE_ANNOTATION,
    CARBON_MAX_DELAY_ANNOTATION,
    EXPECTED_DURATION_ANNOTATION,
    Refusal,
)
from aisched.settings import CarbonSettings
from aisched.sources.carbon import CachedCarbonSource
from tests.unit.controller.test_training_faults import ReadOnceTheGateOpens
from tests.unit.controller.test_training_loop import STEP, T0, DirtyNowCleanInAnHour
from tests.unit.controller.test_workload_cycle import JOB, Events, a_job, parts, snapshot


def deferrable_job(**annotations: str) -> dict[str, Any]:
    written = {
        CARBON_DEFERRABLE_ANNOTATION: "true",
        CARBON_MAX_DELAY_ANNOTATION: "86400",
        EXPECTED_DURATION_ANNOTATION: "1800",
        **annotations,
    }
    job = a_job(annotations=written)
    job["metadata"]["creationTimestamp"] = T0.isoformat()
    return job


def with_deferral(parts: Any, *, source: bool = True) -> tuple[Any, Metrics]:
    cycle = parts[0]
    metrics = Metrics(CollectorRegistry(), process_metrics=False)
    cached = CachedCarbonSource(
        DirtyNowCleanInAnHour(), ttl=timedelta(minutes=5), max_stale=timedelta(hours=1), clock=lambda: T0
    )
    cycle.deferral = WorkloadDeferral(cached if source else None, CarbonSettings(region="GB"), metrics=metrics.carbon)
    return cycle, metrics


@pytest.mark.asyncio
async def test_a_deferrable_job_sits_the_dirty_hour_out_and_asks_once_its_clean_start_comes(parts: Any) -> None:
    cycle, metrics = with_deferral(parts)
    events: Events = parts[2]
    cycle.book.object_seen(JOB, deferrable_job())
    asked = await cycle.asked(view(T0))
    assert asked.requests == ()
    reason, message = events.said[-1]
    assert reason == "Deferred" and "cleaner grid" in message
    assert metrics.registry.get_sample_value("aisched_deferrals_total", {"mode": "Forecast"}) == 1
    again = await cycle.asked(view(T0 + timedelta(minutes=5)))
    assert again.requests == () and len(events.said) == 1  # told once, counted once
    (request,) = (await cycle.asked(view(T0 + 2 * STEP))).requests  # the clean hours have come
    assert request.key == "ns/train@jobs.batch"


@pytest.mark.asyncio
async def test_with_no_carbon_source_a_deferrable_job_starts_at_once(parts: Any) -> None:
    cycle, _ = with_deferral(parts, source=False)
    cycle.book.object_seen(JOB, deferrable_job())
    assert len((await cycle.asked(view(T0))).requests) == 1


@pytest.mark.parametrize(
    ("annotations", "said"),
    [
        ({EXPECTED_DURATION_ANNOTATION: None}, "needs metadata.annotations['scheduling.aisched.io/expected-duration"),
        ({CARBON_MAX_DELAY_ANNOTATION: None}, "the latest it may start"),
        ({CARBON_DEFERRABLE_ANNOTATION: "yes"}, 'must be "true" or "false"'),
        ({CARBON_MAX_DELAY_ANNOTATION: "99999999"}, "carbon-max-delay-seconds"),
        ({CARBON_DEFERRABLE_ANNOTATION: None}, "needs metadata.annotations['scheduling.aisched.io/carbon-deferrable']"),
    ],
)
def test_a_deferral_a_job_cannot_be_planned_by_is_refused_with_the_annotation_named(
    parts: Any, annotations: dict[str, str | None], said: str
) -> None:
    cycle = parts[0]
    job = deferrable_job()
    written = job["metadata"]["annotations"]
    for key, value in annotations.items():
        if value is None:
            written.pop(key)
        else:
            written[key] = value
    entry = cycle.book.object_seen(JOB, job)
    assert entry is not None and isinstance(entry.read, Refusal)
    assert said in entry.read.message


@pytest.mark.asyncio
async def test_a_held_job_waits_for_its_zones_first_read_after_a_restart_not_starting_blind(parts: Any) -> None:
    cycle = parts[0]
    source, now = ReadOnceTheGateOpens(), [T0]
    cached = CachedCarbonSource(
        source,
        ttl=timedelta(minutes=5),
        max_stale=timedelta(hours=1),
        deadline=STEP,
        answer_wait=timedelta(0),
        clock=lambda: now[0],
    )
    cycle.deferral = WorkloadDeferral(cached, CarbonSettings(region="GB"))
    cycle.book.object_seen(JOB, deferrable_job())
    assert (await cycle.asked(view(T0))).requests == ()  # its zone is being read: it sits out, untold
    source.gate.set()
    await cached.fetcher.settle()
    assert (await cycle.asked(view(T0 + timedelta(seconds=10)))).requests == ()  # now deferred by the forecast
    reason, _ = parts[2].said[-1]
    assert reason == "Deferred"
    await cached.aclose()


def view(now: Any) -> CycleView:
    return CycleView(snapshot(), now, ())


__all__ = ["parts"]  # the fixture, as the workload cycle's tests build it
