"""The scheduling cycle as a whole: properties over random clusters and queues."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.api.queue import DEFAULT_MIN_RUN_SECONDS
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.placement import Placement
from aisched.policy.scheduler import GROWN, SHRUNK, JobRequest, ScheduleResult, schedule
from aisched.policy.scheduler.service import attained_gpu_seconds, service_band
from tests.levels import LEVELS
from tests.unit.policy.gangs import H100
from tests.unit.policy.scheduler.cycles import T0, Scenario, keys, scenarios

Placements = dict[str, Placement | None]


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_a_cycle_is_deterministic_and_leaves_the_snapshot_as_it_was(scenario: Scenario) -> None:
    snapshot = ClusterSnapshot(scenario.nodes)
    before = snapshot.nodes()
    first = schedule(snapshot, scenario.jobs, scenario.queues, T0)
    assert snapshot.nodes() == before
    assert schedule(ClusterSnapshot(reversed(scenario.nodes)), scenario.jobs, scenario.queues, T0) == first


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_decisions_fit_the_cluster_respect_priorities_and_quotas(scenario: Scenario) -> None:
    snapshot = ClusterSnapshot(scenario.nodes)
    result = schedule(snapshot, scenario.jobs, scenario.queues, T0)
    jobs = {j.key: j for j in scenario.jobs}
    pending_keys = [j.key for j in scenario.jobs if not j.running]
    admitted, waiting, preempted = keys(result)
    assert sorted(admitted + waiting) == sorted(pending_keys)  # every pending job told once

    # Where every gang runs once the decisions are carried out, each decision checked on the way.
    final = {j.key: j.placement for j in scenario.jobs if j.running}
    _check_preemptions(result, jobs, final)
    _check_resizes(result, jobs, preempted, final)
    _check_admissions(result, jobs, snapshot, final)
    _assert_nothing_overcommitted(scenario, final)
    _assert_quotas_hold(scenario, jobs, preempted, final)


def _check_preemptions(result: ScheduleResult, jobs: dict[str, JobRequest], final: Placements) -> None:
    for preemption in result.preempted:
        victim, by = jobs[preemption.key], jobs[preemption.by]
        assert victim.running
        # Lower priority, or equal priority with more attained service after its minimum run (time-slicing).
        assert victim.priority < by.priority or (
            victim.priority == by.priority
            and service_band(attained_gpu_seconds(victim, T0)) > service_band(attained_gpu_seconds(by, T0))
            and victim.started is not None
            and (T0 - victim.started).total_seconds() >= DEFAULT_MIN_RUN_SECONDS
        )
        assert preemption.key in next(a.preempting for a in result.admitted if a.key == preemption.by)
        del final[preemption.key]  # the whole gang goes


def _check_resizes(
    result: ScheduleResult, jobs: dict[str, JobRequest], preempted: list[str], final: Placements
) -> None:
    for resize in result.resized:
        job = jobs[resize.key]
        assert job.running and job.elastic
        assert job.min_replicas is not None and job.max_replicas is not None
        assert job.min_replicas <= resize.replicas <= job.max_replicas
        assert resize.key not in preempted
        if resize.reason == SHRUNK:
            shrinkers = [jobs[a.key] for a in result.admitted if resize.key in a.preempting]
            assert shrinkers and all(s.priority >= job.priority for s in shrinkers)
        else:
            assert resize.reason == GROWN
        final[resize.key] = resize.placement


def _check_admissions(
    result: ScheduleResult, jobs: dict[str, JobRequest], snapshot: ClusterSnapshot, final: Placements
) -> None:
    for admission in result.admitted:
        job = jobs[admission.key]
        low = job.min_replicas if job.elastic and job.min_replicas else job.replicas
        assert low <= admission.replicas <= job.replicas
        assert job.gpu_type in (None, admission.placement.gpu_type)
        assert admission.placement.domain == snapshot.tightest_domain(admission.placement.nodes) or (
            admission.placement.level is not None
        )
        tight = snapshot.tightest_domain(admission.placement.nodes).level
        if job.required_level is not None:
            assert tight is not None
            assert list(LEVELS).index(tight) <= list(LEVELS).index(job.required_level)
        final[admission.key] = admission.placement


def _assert_nothing_overcommitted(scenario: Scenario, final: Placements) -> None:
    """Nothing over-committed once every decision is carried out."""
    after = ClusterSnapshot(replace(n, used_gpus=0) for n in scenario.nodes)
    other_pods = {n.name: n.used_gpus for n in scenario.nodes}
    for job in scenario.jobs:
        if job.placement is not None:
            for name, gpus in job.placement.gpus_by_node().items():
                other_pods[name] -= gpus
    after.allocate(other_pods)
    for placement in final.values():
        assert placement is not None
        after.allocate(placement.gpus_by_node())
    for node in after.nodes():
        assert node.used_gpus <= node.allocatable_gpus, node


def _assert_quotas_hold(
    scenario: Scenario, jobs: dict[str, JobRequest], preempted: list[str], final: Placements
) -> None:
    """Quotas hold, except borrowing within its limit and from quota the cohort left idle."""
    quotas = {q.name: q for q in scenario.queues}
    used_before = _usage(scenario.jobs, {j.key: j.placement for j in scenario.jobs}, H100)[0]
    used, used_h100 = _usage(scenario.jobs, final, H100)
    victims = [jobs[k] for k in preempted if jobs[k].queue in ("a", "b")]
    released = sum(j.placement.total_gpus for j in victims if j.placement is not None)
    borrowed = lendable = 0
    for quota in quotas.values():
        if quota.nominal_gpus is None:
            continue
        for cap_type, cap in quota.gpu_type_quotas.items():
            assert cap_type != H100 or used_h100[quota.name] <= cap
        if quota.cohort == "c":
            lendable += max(0, quota.nominal_gpus - used_before[quota.name])
        if used[quota.name] > quota.nominal_gpus:
            assert quota.cohort == "c" and quota.borrowing_enabled
            assert used[quota.name] - quota.nominal_gpus <= (quota.borrowing_limit or 1 << 30)
            borrowed += used[quota.name] - quota.nominal_gpus
    # a lender may take its own quota back after lending it, so compare with what was idle to begin with
    assert borrowed <= lendable + released


def _usage(
    jobs: Sequence[JobRequest], placements: dict[str, Placement | None], product: str
) -> tuple[dict[str, int], dict[str, int]]:
    queues = {j.key: j.queue for j in jobs}
    used: dict[str, int] = defaultdict(int)
    used_of_product: dict[str, int] = defaultdict(int)
    for key, placement in placements.items():
        if placement is not None:
            used[queues[key]] += placement.total_gpus
            if placement.gpu_type == product:
                used_of_product[queues[key]] += placement.total_gpus
    return used, used_of_product


@settings(max_examples=150, deadline=None)
@given(scenarios(), st.integers(1, 3))
def test_a_cycle_that_admits_its_most_decides_as_an_unbounded_one_up_to_there(scenario: Scenario, most: int) -> None:
    unbounded = schedule(ClusterSnapshot(scenario.nodes), scenario.jobs, scenario.queues, T0)
    bounded = schedule(ClusterSnapshot(scenario.nodes), scenario.jobs, scenario.queues, T0, admissions_per_cycle=most)
    assert len(bounded.admitted) <= most
    if not bounded.deferred:
        assert bounded == unbounded
        return
    assert len(bounded.admitted) == most
    assert bounded.admitted == unbounded.admitted[:most]
    assert bounded.preempted == unbounded.preempted[: len(bounded.preempted)]
    assert bounded.waiting == unbounded.waiting[: len(bounded.waiting)]
    assert not [r for r in bounded.resized if r.reason == GROWN]  # what is left over may be the deferred jobs'
    admitted, waiting, _ = keys(bounded)
    pending_keys = [j.key for j in scenario.jobs if not j.running]
    assert sorted(admitted + waiting + list(bounded.deferred)) == sorted(pending_keys)  # each once
    told = {*waiting, *bounded.deferred}
    known = [j for j in scenario.jobs if j.key in told and j.queue in bounded.queues]
    assert sum(u.pending_jobs for u in bounded.queues.values()) == len(known)  # the deferred still wait
