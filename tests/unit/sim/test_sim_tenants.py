"""Tenants as queues in the simulator: quotas from the trace's demand, borrowing, reclaim, and the
guarantee shortfall that says whether a team got what its quota promised."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisched.policy.queueing import QueueQuota
from aisched.sim.clusters import GridSpec, generated_cluster
from aisched.sim.engine import SimOptions, simulate
from aisched.sim.jobs import DurationKnowledge
from aisched.sim.tenants import COHORT, tenant_shares
from aisched.sim.traces import TraceJob

TWO_NODES = generated_cluster(GridSpec(nodes=2, gpus_per_node=8, nodes_per_rack=2, racks_per_zone=1))


def queues(shares: dict[str, int]) -> tuple[QueueQuota, ...]:
    return tuple(QueueQuota(name, nominal, cohort=COHORT) for name, nominal in shares.items())


@given(
    st.lists(st.tuples(st.sampled_from("abcde"), st.integers(1, 64), st.floats(1.0, 1e6)), min_size=1, max_size=40),
    st.integers(1, 512),
)
def test_shares_follow_demand_and_add_up_to_the_cluster(jobs: list[tuple[str, int, float]], gpus: int) -> None:
    trace = [TraceJob(f"j{i}", 0.0, duration, n, tenant=t) for i, (t, n, duration) in enumerate(jobs)]
    shares = tenant_shares(trace, gpus)
    assert sum(shares.values()) == gpus
    asked = {t: sum(n * d for tt, n, d in jobs if tt == t) for t in shares}
    total = sum(asked.values())
    for tenant, share in shares.items():
        assert abs(share - gpus * asked[tenant] / total) < 1  # largest remainders: off by less than one


def test_a_team_gets_its_quota_back_from_a_borrower_and_the_shortfall_says_what_one_queue_costs_it() -> None:
    # Team a fills both nodes with long jobs at t=0 (borrowing b's half); b asks for one node at t=10.
    trace = [
        TraceJob("a1", 0.0, 10_000.0, 8, tenant="a"),
        TraceJob("a2", 0.0, 10_000.0, 8, tenant="a"),
        TraceJob("b1", 10.0, 100.0, 8, tenant="b"),
    ]
    options = SimOptions(knowledge=DurationKnowledge.TRUTH, gpus_per_pod=8, queues=queues({"a": 8, "b": 8}))
    with_queues = simulate(trace, TWO_NODES, policies=["aisched", "fifo_first_fit"], options=options)
    aisched, fifo = with_queues.policies["aisched"].by_queue, with_queues.policies["fifo_first_fit"].by_queue
    # aisched reclaims b's node once a's borrowed gang has run its minimum time (to a checkpoint).
    assert aisched["b"]["avg_jct_s"] < 1_000
    assert aisched["a"]["borrowed_gpu_hours"] > 0
    assert with_queues.policies["aisched"].preemptions >= 1
    # FIFO has no quotas: b waits for a's jobs to end, 8 GPUs short of its quota all that time.
    assert fifo["b"]["avg_jct_s"] == pytest.approx(10_000.0 - 10 + 100)
    assert fifo["b"]["shortfall_gpu_hours"] == pytest.approx(8 * (10_000.0 - 10) / 3600, rel=1e-3)
    assert aisched["b"]["shortfall_gpu_hours"] < fifo["b"]["shortfall_gpu_hours"] / 5
    assert with_queues.to_json()["options"]["queues"] == {"a": 8, "b": 8}
    unenforced = simulate(trace, TWO_NODES, policies=["aisched"], options=replace(options, enforce_queues=False))
    assert unenforced.policies["aisched"].by_queue["b"]["avg_jct_s"] > 1_000  # one queue: no reclaim


def test_without_queues_reports_have_no_per_queue_figures() -> None:
    trace = [TraceJob("a1", 0.0, 100.0, 8, tenant="a")]
    report = simulate(trace, TWO_NODES, policies=["aisched"], options=SimOptions(gpus_per_pod=8))
    assert "by_queue" not in report.to_json()["policies"]["aisched"]
    assert "queues" not in report.to_json()["options"]
