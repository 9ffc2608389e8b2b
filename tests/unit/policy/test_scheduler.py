"""The scheduling cycle: properties over random clusters and queues, and the rules people rely on, by example."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.api.common import CapacityType, TopologyLevel
from aisched.api.training_job import TrainingJob
from aisched.policy.cluster import ClusterSnapshot, Node, TaintEffect, Toleration, TolerationOperator
from aisched.policy.placement import GangRequest, Placement, place_gang
from aisched.policy.queueing import QUEUE_NOT_FOUND, QUOTA_EXCEEDED, QueueQuota
from aisched.policy.scheduler import (
    GROWN,
    RESERVED_FOR_HIGHER_PRIORITY,
    SHRUNK,
    JobRequest,
    ScheduleResult,
    schedule,
)
from tests.builders import a_training_job
from tests.unit.policy.gangs import A100, H100, grid, rack_nodes

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
ANY = (CapacityType.SPOT, CapacityType.ON_DEMAND)


def pending(key: str, gpus: int, replicas: int = 1, **fields: object) -> JobRequest:
    job = JobRequest(key=key, queue="default", priority=0, created=T0, gpus_per_replica=gpus, replicas=replicas)
    return replace(job, **fields)  # type: ignore[arg-type]


def run_on(snapshot: ClusterSnapshot, job: JobRequest, nodes: Sequence[str], **fields: object) -> JobRequest:
    """`job` running on `nodes` (one replica per entry); the snapshot counts its GPUs."""
    placement = Placement.of_nodes(tuple(nodes), job.gpus_per_replica, snapshot)
    snapshot.allocate(placement.gpus_by_node())
    return replace(job, placement=placement, started=fields.pop("started", T0), **fields)  # type: ignore[arg-type]


def keys(result: ScheduleResult) -> tuple[list[str], list[str], list[str]]:
    return (
        [a.key for a in result.admitted],
        [w.key for w in result.waiting],
        [p.key for p in result.preempted],
    )


# -- properties ----------------------------------------------------------------------------------


@dataclass
class Scenario:
    nodes: list[Node]
    jobs: list[JobRequest]
    queues: list[QueueQuota]


QUEUES = [
    QueueQuota("a", 8, gpu_type_quotas={H100: 8}, cohort="c", borrowing_limit=8),
    QueueQuota("b", 16, weight=2, cohort="c"),
    QueueQuota("solo", 8),
]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    nodes = [
        node
        for r in range(draw(st.integers(1, 3)))
        for node in rack_nodes(
            f"z{r % 2}",
            f"r{r}",
            draw(st.integers(1, 4)),
            gpus=draw(st.sampled_from([4, 8])),
            product=draw(st.sampled_from([H100, A100])),
            used=draw(st.lists(st.integers(0, 2), max_size=4)),
        )
    ]
    snapshot = ClusterSnapshot(nodes)
    quotas = {q.name: q for q in QUEUES}
    used: dict[str, int] = defaultdict(int)
    used_h100: dict[str, int] = defaultdict(int)
    jobs: list[JobRequest] = []
    for i in range(draw(st.integers(0, 12))):
        job = draw(jobs_strategy(f"ns/run{i}", priorities=(0, 2)))
        outcome = place_gang(GangRequest(job.replicas, job.gpus_per_replica, gpu_types=None), snapshot)
        if not isinstance(outcome, Placement):
            continue
        quota = quotas.get(job.queue)
        gpus = outcome.total_gpus
        h100 = gpus if outcome.gpu_type == H100 else 0
        if quota is not None and (
            used[job.queue] + gpus > (quota.nominal_gpus or 0)
            or used_h100[job.queue] + h100 > quota.gpu_type_quotas.get(H100, 1 << 30)
        ):
            job = replace(job, queue="default")  # keep the starting point within every quota
        used[job.queue] += gpus
        used_h100[job.queue] += h100
        started = T0 - draw(st.integers(0, 5)) * HOUR
        jobs.append(run_on(snapshot, job, outcome.nodes, started=started))
    for i in range(draw(st.integers(1, 8))):
        jobs.append(draw(jobs_strategy(f"ns/new{i}")))
    queues = draw(st.lists(st.sampled_from(QUEUES), unique_by=lambda q: q.name))
    # every queue a running job uses exists, so the starting point is one the operator could be in
    names = {q.name for q in queues}
    queues += [q for q in QUEUES if q.name not in names and any(j.queue == q.name and j.running for j in jobs)]
    return Scenario(nodes=[*snapshot.nodes()], jobs=jobs, queues=queues)


@st.composite
def jobs_strategy(draw: st.DrawFn, key: str, priorities: tuple[int, int] = (0, 3)) -> JobRequest:
    replicas = draw(st.integers(1, 4))
    elastic = draw(st.booleans())
    return JobRequest(
        key=key,
        queue=draw(st.sampled_from(["default", "a", "b", "solo", "ghost"])),
        priority=draw(st.integers(*priorities)),
        created=T0 - draw(st.integers(0, 100)) * timedelta(minutes=1),
        gpus_per_replica=draw(st.sampled_from([1, 2, 4, 8])),
        replicas=replicas,
        min_replicas=draw(st.integers(1, replicas)) if elastic else None,
        max_replicas=replicas + draw(st.integers(0, 3)) if elastic else None,
        gpu_type=draw(st.sampled_from([None, H100, A100])),
        required_level=draw(st.sampled_from([None, TopologyLevel.NODE, TopologyLevel.RACK, TopologyLevel.ZONE])),
        expected_duration=draw(st.sampled_from([None, HOUR / 2, 3 * HOUR])),
    )


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

    final = {j.key: j.placement for j in scenario.jobs if j.running}
    for preemption in result.preempted:
        victim, by = jobs[preemption.key], jobs[preemption.by]
        assert victim.running
        assert victim.priority < by.priority  # only lower priority
        assert preemption.key in next(a.preempting for a in result.admitted if a.key == preemption.by)
        del final[preemption.key]  # the whole gang goes
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
            assert [*TopologyLevel].index(tight) <= [*TopologyLevel].index(job.required_level)
        final[admission.key] = admission.placement

    # nothing over-committed once every decision is carried out
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

    # quotas hold, except borrowing within its limit and from quota the cohort left idle
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


# -- examples ------------------------------------------------------------------------------------


def test_higher_priority_first_then_fifo() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    jobs = [
        pending("ns/old", 8, created=T0 - HOUR),
        pending("ns/new", 8, created=T0),
        pending("ns/vip", 8, priority=5, created=T0 + HOUR),
    ]
    result = schedule(snapshot, jobs, [], T0)
    assert keys(result)[0] == ["ns/vip"]
    result = schedule(snapshot, jobs[:2], [], T0)
    assert keys(result)[0] == ["ns/old"]


def test_fair_share_gives_the_idle_queue_the_next_gpus() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    busy = run_on(snapshot, pending("ns/busy", 8, queue="a"), ["r-n0"])
    jobs = [busy, pending("ns/a2", 8, queue="a", created=T0 - HOUR), pending("ns/b1", 8, queue="b")]
    queues = [QueueQuota("a", 16), QueueQuota("b", 16)]
    result = schedule(snapshot, jobs, queues, T0)
    assert keys(result)[0] == ["ns/b1"]
    assert result.queues["b"].used_gpus == 8
    assert result.queues["a"].pending_jobs == 1


def test_unknown_queue_and_quota_waits_say_why() -> None:
    snapshot = ClusterSnapshot(grid(1, 1, 4))
    jobs = [pending("ns/lost", 1, queue="nope"), pending("ns/big", 8, replicas=3, queue="team-a")]
    result = schedule(snapshot, jobs, [QueueQuota("team-a", 16)], T0)
    reasons = {w.key: (w.reason, w.message) for w in result.waiting}
    assert reasons["ns/lost"] == (
        QUEUE_NOT_FOUND,
        "queue nope does not exist; create the Queue or pick an existing one",
    )
    assert reasons["ns/big"] == (
        QUOTA_EXCEEDED,
        "queue team-a has 16 of its 16 GPUs free and the job needs 24; it is in no cohort, so it cannot borrow",
    )


def test_a_quota_bound_job_does_not_hold_up_the_queue() -> None:
    snapshot = ClusterSnapshot(grid(1, 1, 4))
    jobs = [pending("ns/big", 8, replicas=3, queue="a", created=T0 - HOUR), pending("ns/small", 8, queue="a")]
    assert keys(schedule(snapshot, jobs, [QueueQuota("a", 16)], T0))[0] == ["ns/small"]


def _backfill_cluster() -> tuple[ClusterSnapshot, list[JobRequest]]:
    """Rack r0 busy with jobs ending in 1..4 hours, rack r1 busy for 5 hours."""
    snapshot = ClusterSnapshot([*rack_nodes("z", "r0", 4), *rack_nodes("z", "r1", 4)])
    running = [
        run_on(snapshot, pending(f"ns/r0-{i}", 8, expected_duration=(i + 1) * HOUR), [f"r0-n{i}"]) for i in range(4)
    ] + [run_on(snapshot, pending(f"ns/r1-{i}", 8, expected_duration=5 * HOUR), [f"r1-n{i}"]) for i in range(4)]
    return snapshot, running


def test_backfill_only_where_it_does_not_delay_the_reserved_gang() -> None:
    snapshot, running = _backfill_cluster()
    big = pending("ns/big", 8, replicas=4, required_level=TopologyLevel.RACK, created=T0 - HOUR)
    result = schedule(snapshot, [*running, big], [], T0)
    (wait,) = result.waiting
    assert wait.expected_start == T0 + 4 * HOUR
    assert wait.message.endswith("in Rack r0, where GPUs are held for it")

    # r0's GPUs are held from T0+4h: a 1-hour job may use one that frees now, a 5-hour one may not
    with snapshot.trial():
        snapshot.release({"r0-n0": 8})
        freed = [j for j in running if j.key != "ns/r0-0"]
        long = pending("ns/long", 8, expected_duration=5 * HOUR)
        vague = pending("ns/vague", 8)
        short = pending("ns/x-short", 8, expected_duration=HOUR)  # considered last (FIFO ties by name)
        result = schedule(snapshot, [*freed, big, short, long, vague], [], T0)
    assert [(a.key, a.placement.nodes) for a in result.admitted] == [("ns/x-short", ("r0-n0",))]
    waits = {w.key: w for w in result.waiting}
    assert waits["ns/long"].reason == RESERVED_FOR_HIGHER_PRIORITY
    assert waits["ns/long"].message == (
        "the free GPUs that fit it are held for ns/big (priority 0) in Rack r0 from 2025-03-01 16:00 UTC, "
        "and this job would run past that"
    )
    assert waits["ns/vague"].reason == RESERVED_FOR_HIGHER_PRIORITY
    assert "set an expected duration to backfill" in waits["ns/vague"].message


def test_without_end_times_the_reserved_domain_takes_no_newcomers() -> None:
    snapshot = ClusterSnapshot([*rack_nodes("z", "r0", 2), *rack_nodes("z", "r1", 2)])
    running = [run_on(snapshot, pending("ns/r0", 4), ["r0-n0"]), run_on(snapshot, pending("ns/r1", 8), ["r1-n0"])]
    big = pending("ns/big", 8, replicas=2, required_level=TopologyLevel.RACK, created=T0 - HOUR)
    small = pending("ns/small", 4, expected_duration=HOUR / 4)
    result = schedule(snapshot, [*running, big, small], [], T0)
    waits = {w.key: w for w in result.waiting}
    assert waits["ns/big"].expected_start is None
    assert "GPUs in Rack r0 are held for it as they free up" in waits["ns/big"].message
    # ns/small fits on r0-n0 (4 free) but that rack is held; r1 has a whole free node
    (admission,) = result.admitted
    assert admission.key == "ns/small"
    assert admission.placement.nodes == ("r1-n1",)


def test_preemption_frees_the_rack_of_the_lowest_priorities() -> None:
    snapshot = ClusterSnapshot([*rack_nodes("z", "r0", 4), *rack_nodes("z", "r1", 4)])
    low = [run_on(snapshot, pending(f"ns/low{i}", 8, priority=0), [f"r0-n{i}"]) for i in range(4)]
    mid = [run_on(snapshot, pending(f"ns/mid{i}", 8, priority=5), [f"r1-n{i}"]) for i in range(3)]
    big = pending("ns/big", 8, replicas=4, priority=10, required_level=TopologyLevel.RACK)
    result = schedule(snapshot, [*low, *mid, big], [], T0)
    (admission,) = result.admitted
    assert admission.placement.domain.label == "r0"
    assert sorted(admission.preempting) == [f"ns/low{i}" for i in range(4)]
    assert result.preempted[0].message == (
        "preempted by ns/big (priority 10), which needs 32 GPUs in one Rack; it will be queued again"
    )


def test_only_as_many_gangs_as_needed_and_never_equal_priority() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r0", 2))
    victims = [
        run_on(snapshot, pending("ns/two-node", 4, replicas=2, priority=1), ["r0-n0", "r0-n1"]),
        run_on(snapshot, pending("ns/half", 4, priority=0), ["r0-n0"]),
        run_on(snapshot, pending("ns/peer", 4, priority=3), ["r0-n1"]),
    ]
    result = schedule(snapshot, [*victims, pending("ns/hi", 8, priority=3)], [], T0)
    (admission,) = result.admitted
    assert admission.placement.nodes == ("r0-n0",)
    assert sorted(admission.preempting) == ["ns/half", "ns/two-node"]  # whole gang, though half is elsewhere
    equal = schedule(snapshot, [*victims, pending("ns/same", 8, priority=1)], [], T0)
    assert equal.preempted == ()


def test_other_queues_guaranteed_quota_is_not_preempted_but_borrowed_gpus_are() -> None:
    queues = [QueueQuota("a", 8, cohort="c"), QueueQuota("b", 8, cohort="c")]
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    b_own = run_on(snapshot, pending("ns/b-own", 8, queue="b"), ["r-n0"], started=T0 - HOUR)
    b_borrowed = run_on(snapshot, pending("ns/b-borrowed", 8, queue="b"), ["r-n1"], started=T0)
    urgent = pending("ns/a-urgent", 8, queue="a", priority=9)
    result = schedule(snapshot, [b_own, b_borrowed, urgent], queues, T0)
    assert [p.key for p in result.preempted] == ["ns/b-borrowed"]  # the one that loses the least work
    only_own = schedule(snapshot, [b_own, urgent], [QueueQuota("a", 8), QueueQuota("b", 8)], T0)
    assert only_own.preempted == ()


def test_elastic_starts_at_what_fits_then_grows() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 4))
    blocker = run_on(snapshot, pending("ns/blocker", 8), ["r-n0"])
    elastic = pending("ns/elastic", 8, replicas=4, min_replicas=2, max_replicas=6)
    result = schedule(snapshot, [blocker, elastic], [], T0)
    (admission,) = result.admitted
    assert admission.replicas == 3
    # the blocker ends; the job grows into its node, within the rack it runs in
    snapshot.release(blocker.placement.gpus_by_node() if blocker.placement else {})
    running = run_on(snapshot, elastic, admission.placement.nodes)
    grown = schedule(snapshot, [running], [], T0)
    (resize,) = grown.resized
    assert resize.reason == GROWN
    assert resize.replicas == 4
    assert resize.placement.nodes[:3] == admission.placement.nodes


def test_shrink_before_preempting_anyone() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 4))
    elastic = run_on(
        snapshot,
        pending("ns/elastic", 8, replicas=3, min_replicas=1, max_replicas=3, priority=1),
        ["r-n0", "r-n1", "r-n2"],
    )
    fixed = run_on(snapshot, pending("ns/fixed", 8, priority=0), ["r-n3"])
    result = schedule(snapshot, [elastic, fixed, pending("ns/hi", 8, replicas=2, priority=5)], [], T0)
    assert result.preempted == ()
    (resize,) = result.resized
    assert resize.reason == SHRUNK
    assert resize.replicas == 1
    assert resize.message == "shrunk from 3 to 1 replicas to make room for ns/hi (priority 5)"
    assert result.admitted[0].preempting == ("ns/elastic",)


def test_a_job_request_from_a_training_job() -> None:
    manifest = (
        a_training_job("llm")
        .namespace("ml")
        .replicas(4)
        .gpus(8)
        .elastic(2, 6)
        .gpu_type(H100)
        .queue("team-a")
        .priority(7)
        .required_level("Rack")
        .set("expectedDurationSeconds", 3600)
        .set("template.spec.tolerations", [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
        .obj()
    )
    manifest["metadata"]["creationTimestamp"] = "2025-03-01T11:00:00Z"
    request = JobRequest.from_training_job(TrainingJob.model_validate(manifest), capacity_types=ANY)
    assert request == JobRequest(
        key="ml/llm",
        queue="team-a",
        priority=7,
        created=T0 - HOUR,
        gpus_per_replica=8,
        replicas=4,
        min_replicas=2,
        max_replicas=6,
        gpu_type=H100,
        required_level=TopologyLevel.RACK,
        tolerations=(Toleration("dedicated", TolerationOperator.EXISTS, "", TaintEffect.NO_SCHEDULE),),
        capacity_types=ANY,
        expected_duration=HOUR,
    )


def test_a_higher_priority_job_takes_its_queue_quota_back_from_a_lower_one() -> None:
    from aisched.policy.cluster import ClusterSnapshot as _Snapshot
    from aisched.policy.cluster import Node as _Node
    from aisched.policy.placement import Placement as _Placement
    from aisched.policy.queueing import QueueQuota as _Quota
    from aisched.policy.scheduler import JobRequest as _Job
    from aisched.policy.scheduler import schedule as _schedule

    now = datetime(2026, 1, 1, tzinfo=UTC)
    snapshot = _Snapshot([_Node("n1", 8, used_gpus=8), _Node("n2", 8)])
    low = _Job("ns/low", "team", 0, now, 4, 2, placement=_Placement.of_nodes(("n1", "n1"), 4, snapshot), started=now)
    high = _Job("ns/high", "team", 100, now, 4, 2)
    result = _schedule(snapshot, [low, high], [_Quota("team", 8)], now)
    assert [p.key for p in result.preempted] == ["ns/low"]
    assert [a.key for a in result.admitted] == ["ns/high"]
    assert "preempted by ns/high" in result.preempted[0].message
