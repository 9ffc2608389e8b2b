"""aisched.sim.fleet.gang_karpenter: all-or-nothing gangs, MostAllocated, quota admission, Karpenter behind."""

from __future__ import annotations

import pytest

from aisched.api.common import CapacityType
from aisched.sim.fleet.fleet import Fleet, SpotMarket
from aisched.sim.fleet.gang_karpenter import GangKarpenterLoop
from aisched.sim.fleet.karpenter import BATCH_IDLE_DURATION_S
from aisched.sim.jobs import SimJob
from tests.unit.sim.test_fleet import CATALOG, OD_A, market


def job(key: str, arrival: float, duration: float, replicas: int = 1, per_replica: int = 8) -> SimJob:
    return SimJob(key, arrival, duration, replicas, per_replica)


def fleet_of(ready: int = 0, spot: SpotMarket | None = None) -> Fleet:
    fleet = Fleet(300.0, 60.0, spot or market())
    for _ in range(ready):
        fleet.launch(OD_A, 0.0, ready_now=True)
    return fleet


def test_a_gang_binds_only_once_every_pod_fits_and_holds_nothing_meanwhile() -> None:
    # A 4 x 4-GPU gang arrives while one Ready node has half its GPUs free: one pod's room there,
    # two new nodes for the other three; nothing is bound until they are Ready.
    jobs = [job("small", 0.0, 10_000.0, per_replica=4), job("gang", 100.0, 1000.0, 4, 4)]
    fleet = fleet_of(ready=1)
    loop = GangKarpenterLoop(jobs, fleet, CATALOG, limit_gpus=64)
    report = loop.run()
    assert report.partial_gangs == 0 and report.partial_gang_node_hours == 0.0
    assert fleet.launches == 1 + 2
    assert loop.finish["gang"] == pytest.approx(100.0 + BATCH_IDLE_DURATION_S + 300.0 + 1000.0)
    assert report.finished == 2


def test_an_empty_ready_node_a_pending_gang_is_headed_for_is_not_consolidated() -> None:
    fleet = fleet_of(ready=1)
    (first,) = fleet.alive
    loop = GangKarpenterLoop([job("gang", 0.0, 1000.0, 2)], fleet, CATALOG, limit_gpus=64)
    report = loop.run()
    end = BATCH_IDLE_DURATION_S + 300.0 + 1000.0
    assert loop.finish["gang"] == pytest.approx(end)
    assert report.fleet_events["consolidated"] == 0 and fleet.nodes[first].gone_at == pytest.approx(end)


def test_pods_go_to_the_fullest_node_that_fits_them() -> None:
    fleet = fleet_of(ready=2)
    names = sorted(fleet.alive)
    loop = GangKarpenterLoop(
        [job("a", 0.0, 5000.0, per_replica=4), job("b", 10.0, 100.0, per_replica=4)], fleet, CATALOG, limit_gpus=64
    )
    loop.run()
    assert loop.bound == {}  # both finished
    assert fleet.nodes[names[0]].gone_at is not None
    # b went onto a's node (MostAllocated), so the second node stayed empty and was consolidated at 60 s.
    assert fleet.nodes[names[1]].gone_at == pytest.approx(60.0)


def test_admission_keeps_to_the_quota_and_lets_a_smaller_later_job_through() -> None:
    jobs = [job("running", 0.0, 1000.0, 2), job("big", 10.0, 100.0, 2), job("small", 20.0, 100.0, 1)]
    fleet = fleet_of(ready=3)
    loop = GangKarpenterLoop(jobs, fleet, CATALOG, limit_gpus=24)
    loop.run()
    assert loop.finish["small"] == pytest.approx(120.0)  # BestEffortFIFO: past the big one that waits
    assert loop.finish["big"] == pytest.approx(1100.0)  # admitted once "running" gave its quota back
    assert fleet.launches == 3  # nothing asked for beyond the quota


def test_a_gang_that_loses_a_spot_node_restarts_whole_and_stays_admitted() -> None:
    fleet = fleet_of(spot=market(a=[1] * 10 + [0] * 990, b=[1] * 1000))
    loop = GangKarpenterLoop([job("g", 0.0, 5000.0, 2)], fleet, CATALOG, limit_gpus=64, seed=0)
    report = loop.run()
    assert report.finished == 1
    lost = [n for n in fleet.nodes.values() if n.zone == "a" and n.offering.capacity_type == CapacityType.SPOT]
    assert report.job_stops == (1 if lost else 0)
    assert report.partial_gangs == 0
