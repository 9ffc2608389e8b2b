"""aisched.sim.fleet: the bill, boot delays, consolidation of empty nodes only, spot losses, and gangs
provisioned whole by aisched but piecemeal by Karpenter alone."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from aisched.api.common import CapacityType
from aisched.sim.fleet.arms import FleetOptions, peak_demand, simulate_fleet, static_sizes
from aisched.sim.fleet.catalog import H100, InstanceType, Offering, for_product, offerings
from aisched.sim.fleet.fleet import Fleet, SpotMarket
from aisched.sim.fleet.gangs import GangLoop, GangProvisioner
from aisched.sim.fleet.karpenter import BATCH_IDLE_DURATION_S, KarpenterLoop
from aisched.sim.jobs import SimJob
from aisched.sim.spot.traces import SpotTrace
from aisched.sim.traces import TraceJob

GAP = 100.0
P5 = InstanceType("p5.48xlarge", 8, H100, 100.0)
SPOT_A = Offering(P5, "a", CapacityType.SPOT, 40.0)
SPOT_B = Offering(P5, "b", CapacityType.SPOT, 40.0)
OD_A = Offering(P5, "a", CapacityType.ON_DEMAND, 100.0)
CATALOG = (SPOT_A, SPOT_B, OD_A, Offering(P5, "b", CapacityType.ON_DEMAND, 100.0))


def market(a: list[int] | None = None, b: list[int] | None = None) -> SpotMarket:
    return SpotMarket(
        {"a": SpotTrace.build("a", GAP, a or [1] * 1000), "b": SpotTrace.build("b", GAP, b or [1] * 1000)}
    )


def job(key: str, arrival: float, duration: float, replicas: int = 1, per_replica: int = 8) -> SimJob:
    return SimJob(key, arrival, duration, replicas, per_replica)


def test_the_bill_is_node_seconds_from_launch_to_termination_at_the_offering_price() -> None:
    fleet = Fleet(300.0, 60.0, market())
    spot = fleet.launch(SPOT_A, 0.0)
    on_demand = fleet.launch(OD_A, 0.0, ready_now=True)
    fleet.withdraw(spot.name, 150.0)  # boot time is paid for all the same
    fleet.close(3600.0)
    bill = fleet.bill(3600.0)
    assert bill["node_hours"] == pytest.approx(150 / 3600 + 1.0)
    assert bill["gpu_hours"] == pytest.approx(8 * (150 / 3600 + 1.0))
    assert bill["cost"] == pytest.approx(40.0 * 150 / 3600 + 100.0)
    assert bill["spot_node_hours"] == pytest.approx(150 / 3600)
    assert on_demand.gone_at == 3600.0


def test_only_nodes_empty_for_the_consolidation_delay_are_taken_away() -> None:
    fleet = Fleet(0.0, 60.0, market())
    busy, idle = fleet.launch(OD_A, 0.0, ready_now=True), fleet.launch(OD_A, 0.0, ready_now=True)
    fleet.allocate(busy.name, 8)
    assert fleet.consolidate(59.0) == []
    assert fleet.consolidate(60.0) == [idle.name]
    fleet.release(busy.name, 4, 100.0)
    assert fleet.consolidate(1000.0) == []  # half full is not empty
    fleet.release(busy.name, 4, 1000.0)
    assert fleet.consolidate(1059.0) == []
    assert fleet.consolidate(1060.0) == [busy.name]


def test_a_booting_node_is_not_ready_and_cannot_be_consolidated() -> None:
    fleet = Fleet(300.0, 0.0, market())
    node = fleet.launch(SPOT_A, 10.0)
    assert fleet.ready(309.0) == [] and fleet.booting(309.0) == [node]
    assert fleet.consolidate(309.0) == []
    assert fleet.next_event(10.0) == 310.0
    with pytest.raises(ValueError, match="Ready"):
        fleet.withdraw(node.name, 310.0)


def test_spot_nodes_go_when_their_zone_loses_spot_and_on_demand_stays() -> None:
    fleet = Fleet(0.0, 60.0, market(a=[1, 1, 0, 1]))
    spot, on_demand = fleet.launch(SPOT_A, 0.0, ready_now=True), fleet.launch(OD_A, 0.0, ready_now=True)
    assert fleet.next_event(0.0) == pytest.approx(60.0)  # the empty nodes' consolidation comes first
    fleet.allocate(spot.name, 8)
    fleet.allocate(on_demand.name, 8)
    assert fleet.next_event(0.0) == 2 * GAP
    assert fleet.interrupt(199.0) == []
    assert fleet.interrupt(200.0) == [spot.name]
    assert set(fleet.alive) == {on_demand.name}


def test_the_catalog_lists_every_type_in_every_zone_and_sorts_by_price_per_gpu() -> None:
    catalog = offerings(["z1", "z2"], spot_price_ratio=0.5)
    assert len(catalog) == 6 * 2 * 2
    h100 = for_product(catalog, H100)
    assert {o.instance_type.name for o in h100} == {"p5.48xlarge"}
    assert [o.capacity_type for o in h100[:2]] == [CapacityType.SPOT] * 2
    assert h100[0].per_hour == pytest.approx(h100[-1].per_hour / 2)
    with pytest.raises(ValueError, match="spot price ratio"):
        offerings(["z1"], spot_price_ratio=0.0)


def test_aisched_starts_a_gang_on_an_empty_fleet_exactly_when_its_nodes_are_ready() -> None:
    fleet = Fleet(300.0, 60.0, market())
    loop = GangLoop(
        "aisched_karpenter", [job("j", 5.0, 1000.0, replicas=4)], fleet, provisioner=GangProvisioner(CATALOG, 64)
    )
    report = loop.run()
    assert report.finished == 1
    assert report.avg_jct_s == pytest.approx(300.0 + 1000.0)
    assert report.fleet_events["launches"] == 4
    assert {n.zone for n in fleet.nodes.values()} == {"a"}  # one zone, spot first
    assert all(n.offering.capacity_type == CapacityType.SPOT for n in fleet.nodes.values())
    assert report.partial_gangs == 0 and report.cross_zone_gangs == 0


def test_karpenter_binds_what_fits_and_holds_it_while_the_rest_boots_aisched_asks_for_the_whole_gang() -> None:
    # A 4 x 4-GPU gang arrives while one Ready node has half its GPUs free.
    jobs = [job("small", 0.0, 10_000.0, replicas=1, per_replica=4), job("gang", 100.0, 1000.0, 4, 4)]
    reports = {}
    for arm in ("karpenter_alone", "aisched_karpenter"):
        fleet = Fleet(300.0, 60.0, market())
        fleet.launch(OD_A, 0.0, ready_now=True)
        loop: GangLoop | KarpenterLoop
        if arm == "karpenter_alone":
            loop = KarpenterLoop(jobs, fleet, CATALOG, limit_gpus=64)
        else:
            loop = GangLoop(arm, jobs, fleet, provisioner=GangProvisioner(CATALOG, 64))
        reports[arm] = loop.run()
    alone, ours = reports["karpenter_alone"], reports["aisched_karpenter"]
    assert alone.partial_gangs == 1
    # One pod held 4 GPUs for the batching window and the boot: half a node for about 301 s.
    assert alone.partial_gang_node_hours == pytest.approx(4 / 8 * (300 + BATCH_IDLE_DURATION_S) / 3600, rel=0.01)
    assert ours.partial_gangs == 0 and ours.partial_gang_node_hours == 0.0
    assert ours.finished == alone.finished == 2


def test_karpenter_alone_can_spread_one_gang_over_zones() -> None:
    spread = 0
    for seed in range(8):
        fleet = Fleet(300.0, 60.0, market())
        report = KarpenterLoop([job("g", 0.0, 100.0, replicas=4)], fleet, CATALOG, limit_gpus=64, seed=seed).run()
        spread += report.cross_zone_gangs
    assert spread > 0


def test_aisched_asks_for_nothing_beyond_the_quota() -> None:
    fleet = Fleet(300.0, 60.0, market())
    loop = GangLoop(
        "aisched_karpenter", [job("big", 0.0, 100.0, replicas=3)], fleet, provisioner=GangProvisioner(CATALOG, 16)
    )
    report = loop.run()
    assert report.finished == 0 and fleet.launches == 0


def test_booting_nodes_no_gang_needs_any_more_are_withdrawn() -> None:
    # "later" waits for nodes; "first" ends before they boot and "later" takes its node instead.
    jobs = [job("first", 0.0, 100.0), job("later", 10.0, 500.0)]
    fleet = Fleet(300.0, 600.0, market())
    fleet.launch(SPOT_A, 0.0, ready_now=True)
    report = GangLoop("aisched_karpenter", jobs, fleet, provisioner=GangProvisioner(CATALOG, 64)).run()
    assert report.fleet_events["withdrawn_before_ready"] == 1
    assert report.bill["node_hours"] == pytest.approx(
        (600 + 90) / 3600
    )  # the on-demand node to the end, and 90 s of boot
    assert report.avg_jct_s == pytest.approx((100 + 590) / 2)


def test_a_gang_whose_spot_zone_goes_is_placed_again_whole_and_keeps_its_progress() -> None:
    # Zone a loses spot at 1000 s; the gang restarts from its checkpoint on new nodes.
    fleet = Fleet(300.0, 60.0, market(a=[1] * 10 + [0] * 990, b=[0] * 5 + [1] * 995))
    loop = GangLoop(
        "aisched_karpenter",
        [job("g", 0.0, 2000.0, replicas=2)],
        fleet,
        provisioner=GangProvisioner(CATALOG, 64),
        restart_overhead_s=60.0,
    )
    report = loop.run()
    assert report.job_stops == 1 and report.partial_gangs == 0
    # 700 s of work before the loss, then 300 s boot in zone b, 60 s restart and the 1300 s left.
    assert report.avg_jct_s == pytest.approx(1000 + 300 + 60 + 1300)
    assert {n.zone for n in fleet.nodes.values()} == {"a", "b"}


def test_peak_and_mean_sizes() -> None:
    trace = [TraceJob("a", 0.0, 100.0, 8), TraceJob("b", 50.0, 100.0, 16), TraceJob("c", 200.0, 100.0, 4)]
    assert peak_demand(trace) == 24
    peak, mean = static_sizes(trace, 8)
    assert peak == 3
    assert mean == 2  # the largest job (16 GPUs) needs two nodes, whatever the mean


def test_every_arm_finishes_every_job_and_only_karpenter_alone_splits_gangs() -> None:
    trace = [TraceJob(f"j{i}", i * 400.0, 3000.0 + 500 * (i % 3), [1, 8, 16, 4][i % 4]) for i in range(24)]
    setup, reports = simulate_fleet(trace, market(a=[1] * 30 + [0] * 3 + [1] * 967), FleetOptions(seed=1))
    assert setup["static_peak_nodes"] >= setup["static_mean_nodes"]
    for arm, report in reports.items():
        assert report.finished == 24, arm
        assert not math.isnan(report.bill["cost"])
    assert reports["aisched_karpenter"].partial_gangs == 0
    assert reports["aisched_karpenter"].bill["cost"] < reports["static_peak"].bill["cost"]
    assert reports["static_peak"].bill["spot_node_hours"] == 0


def test_no_nodes_are_asked_for_when_a_running_job_of_known_duration_ends_before_they_could_boot() -> None:
    for runs_for, launches in ((100.0, 0), (1000.0, 1)):
        fleet = Fleet(300.0, 60.0, market())
        fleet.launch(SPOT_A, 0.0, ready_now=True)
        jobs = [replace(job("running", 0.0, runs_for), estimate=runs_for), job("waiting", 10.0, 50.0)]
        report = GangLoop("aisched_karpenter", jobs, fleet, provisioner=GangProvisioner(CATALOG, 64)).run()
        assert report.fleet_events["launches"] == 1 + launches, runs_for
        assert report.finished == 2


def test_karpenter_batches_pods_until_a_second_passes_without_one_or_ten_seconds_in_all() -> None:
    steady = [job(f"j{i}", 0.5 * i, 100.0, replicas=1, per_replica=1) for i in range(40)]  # one every 0.5 s
    fleet = Fleet(300.0, 60.0, market())
    KarpenterLoop(steady, fleet, CATALOG, limit_gpus=64).run()
    launched = sorted({n.launched for n in fleet.nodes.values()})
    assert launched[0] == 10.0  # the first batch closed at its most, 10 s after its first pod
    lone = Fleet(300.0, 60.0, market())
    KarpenterLoop([job("one", 3.0, 100.0)], lone, CATALOG, limit_gpus=64).run()
    assert [n.launched for n in lone.nodes.values()] == [3.0 + BATCH_IDLE_DURATION_S]


def test_an_elastic_gangs_growth_is_taken_back_before_nodes_are_added() -> None:
    # "e" asked for one 4-GPU pod and grows into the node's idle half; "p" then takes that half back.
    fleet = Fleet(300.0, 60.0, market())
    fleet.launch(SPOT_A, 0.0, ready_now=True)
    elastic = SimJob("e", 0.0, 20_000.0, 1, 4, min_replicas=1, max_replicas=2)
    loop = GangLoop(
        "aisched_karpenter", [elastic, job("p", 2000.0, 100.0, 1, 4)], fleet, provisioner=GangProvisioner(CATALOG, 64)
    )
    report = loop.run()
    assert loop.runs["e"] >= 3  # started, grown, shrunk back
    assert loop.finish["p"] == 2100.0  # placed at once, on the GPUs the shrink gave back
    assert report.fleet_events["launches"] == 1  # the node that was there: none asked for


def test_a_gang_given_spot_waits_for_spot_nodes_and_leaves_an_idle_on_demand_node_alone() -> None:
    # As the operator enters it (`policy.spot.capacity_types_of`): on spot alone, never on an on-demand node.
    fleet = Fleet(300.0, 60.0, market())
    idle = fleet.launch(OD_A, 0.0, ready_now=True)
    report = GangLoop(
        "aisched_karpenter", [job("g", 0.0, 100.0)], fleet, provisioner=GangProvisioner(CATALOG, 64)
    ).run()
    assert report.avg_jct_s == pytest.approx(300 + 100)
    assert [n.offering.capacity_type for n in fleet.nodes.values() if n.name != idle.name] == [CapacityType.SPOT]
    assert idle.used == 0


def test_a_deadline_with_no_room_for_a_spot_loss_gets_on_demand_nodes() -> None:
    # 1,000 s of work, 300 s of boot and 60 s of restart leave no slack before 1,350 s: on-demand.
    fleet = Fleet(300.0, 60.0, market())
    tight = replace(job("tight", 0.0, 1000.0), estimate=1000.0)
    loop = GangLoop(
        "aisched_karpenter", [tight], fleet, provisioner=GangProvisioner(CATALOG, 64), deadlines={"tight": 1350.0}
    )
    report = loop.run()
    assert [n.offering.capacity_type for n in fleet.nodes.values()] == [CapacityType.ON_DEMAND]
    assert report.deadline_misses == 0 and report.avg_jct_s == pytest.approx(1300.0)


def test_the_spot_choice_reads_the_users_estimate_not_the_traces_duration() -> None:
    # The same job told 100 s: the deadline looks far, spot is taken; the truth is not read.
    for estimate, capacity in ((100.0, CapacityType.SPOT), (1000.0, CapacityType.ON_DEMAND), (None, CapacityType.SPOT)):
        fleet = Fleet(300.0, 60.0, market())
        told = replace(job("tight", 0.0, 1000.0), estimate=estimate)
        GangLoop(
            "aisched_karpenter", [told], fleet, provisioner=GangProvisioner(CATALOG, 64), deadlines={"tight": 1350.0}
        ).run()
        assert [n.offering.capacity_type for n in fleet.nodes.values()] == [capacity], estimate


def test_with_no_spot_anywhere_and_no_deadline_the_gang_gets_on_demand_at_once() -> None:
    fleet = Fleet(300.0, 60.0, market(a=[0] * 5 + [1] * 995, b=[0] * 8 + [1] * 992))
    report = GangLoop(
        "aisched_karpenter", [job("g", 0.0, 100.0)], fleet, provisioner=GangProvisioner(CATALOG, 64)
    ).run()
    assert [(n.offering.capacity_type, n.launched) for n in fleet.nodes.values()] == [(CapacityType.ON_DEMAND, 0.0)]
    assert report.avg_jct_s == pytest.approx(300 + 100)


def test_with_no_spot_anywhere_a_deadline_with_ample_slack_waits_for_spot() -> None:
    fleet = Fleet(300.0, 60.0, market(a=[0] * 5 + [1] * 995, b=[0] * 8 + [1] * 992))
    report = GangLoop(
        "aisched_karpenter",
        [job("g", 0.0, 100.0)],
        fleet,
        provisioner=GangProvisioner(CATALOG, 64),
        deadlines={"g": 100 * GAP},
    ).run()
    assert [(n.zone, n.launched) for n in fleet.nodes.values()] == [("a", 5 * GAP)]
    assert report.avg_jct_s == pytest.approx(5 * GAP + 300 + 100)


def test_the_fleets_queue_never_time_slices_a_waiting_gang_gets_nodes_or_waits_for_an_end() -> None:
    # The default Queue the arm runs on has time-slicing off: no gang is stopped for attained service.
    jobs = [job("long", 0.0, 50_000.0), job("new", 20_000.0, 100.0)]
    for quota, new_ends in ((16, 20_000.0 + 300 + 100), (8, 50_000.0 + 100)):  # room for a second node, or none
        fleet = Fleet(300.0, 60.0, market())
        fleet.launch(SPOT_A, 0.0, ready_now=True)
        loop = GangLoop("aisched_karpenter", jobs, fleet, provisioner=GangProvisioner(CATALOG, quota))
        report = loop.run()
        assert report.job_stops == 0, quota
        assert loop.finish["new"] == new_ends, quota
        assert report.finished == 2
