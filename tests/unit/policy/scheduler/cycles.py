"""Jobs, running gangs and random clusters with queues for the scheduler's tests."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from aisched.api.common import CapacityType
from aisched.policy.cluster import ClusterSnapshot, Node
from aisched.policy.placement import GangRequest, Placement, place_gang
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import JobRequest, ScheduleResult
from tests.levels import NODE, RACK, ZONE
from tests.unit.policy.gangs import A100, H100, rack_nodes

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
        required_level=draw(st.sampled_from([None, NODE, RACK, ZONE])),
        expected_duration=draw(st.sampled_from([None, HOUR / 2, 3 * HOUR])),
    )
