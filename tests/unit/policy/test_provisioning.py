"""policy.provisioning: nodes for whole gangs, in one zone, within the quota, withdrawn when not needed."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aisched.api.common import CapacityType
from aisched.policy.placement import INSUFFICIENT_GPUS, NO_MATCHING_NODES
from aisched.policy.provisioning import (
    Claim,
    FleetOutlook,
    Offering,
    PoolHeadroom,
    ProvisioningPlan,
    offerings_from_instance_types,
    offers,
    plan_provisioning,
)
from aisched.policy.queueing import QUOTA_EXCEEDED
from aisched.policy.scheduler import JobRequest, ScheduleResult
from aisched.policy.scheduler.results import QueueUsage, Waiting
from aisched.policy.spot import interruption_cost_factor
from aisched.policy.topology import LOCAL_TOPOLOGY, Level

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BOOT = timedelta(seconds=300)


def planned(
    result: ScheduleResult,
    jobs: list[JobRequest],
    offerings: Sequence[Offering],
    claims: Collection[Claim],
    outlook: FleetOutlook | None = None,
) -> ProvisioningPlan:
    return plan_provisioning(
        result, jobs, offerings, claims, now=NOW, boot=BOOT, topology=LOCAL_TOPOLOGY, outlook=outlook or FleetOutlook()
    )


H100 = "NVIDIA-H100-80GB-HBM3"
INSTANCE_TYPES = Path(__file__).resolve().parents[3] / "hack" / "karpenter" / "instance-types.json"


def catalog() -> list[Offering]:
    return offerings_from_instance_types(
        json.loads(INSTANCE_TYPES.read_text()), "nvidia.com/gpu", "nvidia.com/gpu.product"
    )


def job(
    key: str = "team/a",
    *,
    replicas: int = 4,
    gpus: int = 8,
    priority: int = 0,
    gpu_type: str | None = H100,
    capacity_types: tuple[CapacityType, ...] = (CapacityType.SPOT,),
    required_level: Level | None = None,
    min_replicas: int | None = None,
) -> JobRequest:
    return JobRequest(
        key,
        "default",
        priority,
        NOW,
        gpus,
        replicas,
        min_replicas=min_replicas,
        max_replicas=replicas if min_replicas is not None else None,
        gpu_type=gpu_type,
        capacity_types=capacity_types,
        required_level=required_level,
    )


def result(*waiting: Waiting, room: int | None = 1000, queue: str = "default") -> ScheduleResult:
    return ScheduleResult(waiting=waiting, queues={queue: QueueUsage(0, 0, 0, len(waiting), room_gpus=room)})


def waits(key: str = "team/a", reason: str = INSUFFICIENT_GPUS, start: datetime | None = None) -> Waiting:
    return Waiting(key, reason, "no room", start)


def claim(
    name: str,
    *,
    gang: str = "team/a",
    zone: str = "us-east-1a",
    held: bool = False,
    capacity: CapacityType = CapacityType.SPOT,
    registered: bool = False,
) -> Claim:
    return Claim(name, gang, "p5.48xlarge", zone, capacity, 8, held, registered)


def test_the_instance_types_file_reads_as_gpu_offerings_in_every_zone_on_both_capacity_types() -> None:
    offerings = catalog()
    types = {o.instance_type for o in offerings}
    assert types == {"p5.48xlarge", "p5e.48xlarge", "p4d.24xlarge", "g6.xlarge", "g6.12xlarge", "g6.48xlarge"}
    for instance_type in types:
        mine = [o for o in offerings if o.instance_type == instance_type]
        assert {(o.zone, o.capacity_type) for o in mine} == {
            (z, c) for z in ("us-east-1a", "us-east-1b", "us-east-1c") for c in CapacityType
        }
        for zone in ("us-east-1a", "us-east-1b", "us-east-1c"):
            spot, on_demand = (
                next(o.price for o in mine if (o.zone, o.capacity_type) == (zone, c)) for c in CapacityType
            )
            assert spot < on_demand
    h100 = next(o for o in offerings if o.instance_type == "p5.48xlarge")
    assert (h100.gpus, h100.gpu_product) == (8, H100)
    assert offers(offerings, CapacityType.SPOT, H100) and not offers(offerings, CapacityType.SPOT, "NVIDIA-B200")


def test_a_gang_gets_all_its_nodes_at_once_in_one_zone_on_spot_at_the_cheapest_price() -> None:
    plan = planned(result(waits()), [job()], catalog(), [])
    (request,) = plan.create
    assert request.count == 4 and request.gang == "team/a"
    offering = request.offering
    assert (offering.instance_type, offering.capacity_type, offering.zone) == (
        "p5.48xlarge",
        CapacityType.SPOT,
        "us-east-1a",
    )
    assert plan.withdraw == () and plan.zones == {"team/a": "us-east-1a"}


def test_on_demand_when_the_spot_decision_said_so() -> None:
    plan = planned(
        result(waits()),
        [job(capacity_types=(CapacityType.ON_DEMAND,))],
        catalog(),
        [],
    )
    assert plan.create[0].offering.capacity_type == CapacityType.ON_DEMAND


def test_small_replicas_share_a_node_and_the_cheapest_total_wins() -> None:
    plan = planned(
        result(waits()),
        [job(replicas=3, gpus=1, gpu_type="NVIDIA-L4")],
        catalog(),
        [],
    )
    (request,) = plan.create
    # 3 x g6.xlarge at 0.32/h beats one g6.12xlarge at 1.84/h.
    assert (request.offering.instance_type, request.count) == ("g6.xlarge", 3)


def test_nothing_beyond_the_quota_and_the_room_is_taken_in_priority_order() -> None:
    low, high = job("team/low", priority=1), job("team/high", priority=5)
    plan = planned(
        result(waits("team/low"), waits("team/high"), room=40),
        [low, high],
        catalog(),
        [],
    )
    assert [r.gang for r in plan.create] == ["team/high"]  # 32 of 40 GPUs: the second gang does not fit
    none = planned(result(waits(), room=24), [job()], catalog(), [])
    assert none.create == ()


def test_an_elastic_gang_gets_nodes_for_what_its_room_holds_down_to_its_minimum() -> None:
    elastic = job(replicas=4, min_replicas=2)
    (request,) = planned(result(waits(), room=24), [elastic], catalog(), []).create
    assert request.count == 3  # 3 x 8 of its 4 x 8 fit the room
    assert planned(result(waits(), room=8), [elastic], catalog(), []).create == ()


def test_no_nodes_for_a_gang_waiting_on_its_quota_a_rack_or_sooner_room() -> None:
    offerings = catalog()
    for waiting, request in (
        (waits(reason=QUOTA_EXCEEDED), job()),
        (waits(), job(required_level=LOCAL_TOPOLOGY.level("Rack"))),
        (waits(start=NOW + timedelta(seconds=100)), job()),  # running jobs end before nodes would boot
    ):
        assert planned(result(waiting), [request], offerings, []).create == ()
    later = waits(start=NOW + timedelta(seconds=900))
    assert planned(result(later), [job()], offerings, []).create != ()


def test_scale_from_zero_asks_for_a_product_no_node_has() -> None:
    plan = planned(
        result(waits(reason=NO_MATCHING_NODES)),
        [job(gpu_type="NVIDIA-H200")],
        catalog(),
        [],
    )
    assert plan.create[0].offering.instance_type == "p5e.48xlarge"


def test_asked_once_claims_coming_are_kept_and_only_the_missing_asked_for() -> None:
    coming = [claim("c1", zone="us-east-1b"), claim("c2", zone="us-east-1b")]
    plan = planned(result(waits()), [job()], catalog(), coming)
    (request,) = plan.create
    assert (request.offering.zone, request.count) == ("us-east-1b", 2)  # the same zone as its first two
    assert plan.withdraw == () and plan.kept["team/a"] == ("c1", "c2")
    full = [*coming, claim("c3", zone="us-east-1b"), claim("c4", zone="us-east-1b")]
    again = planned(result(waits()), [job()], catalog(), full)
    assert again.create == () and again.withdraw == ()


def test_claims_no_waiting_gang_needs_are_withdrawn_while_they_boot() -> None:
    claims = [
        claim("booting", gang="team/gone"),
        claim("busy", gang="team/gone", held=True),
        claim("up", gang="team/gone", registered=True),  # Karpenter's to consolidate, tainting it first
    ]
    plan = planned(ScheduleResult(), [], catalog(), claims)
    assert plan.withdraw == ("booting",)
    # A gang now waiting on its quota does not keep what was asked for it.
    quota = planned(
        result(waits(reason=QUOTA_EXCEEDED)),
        [job()],
        catalog(),
        [claim("c1")],
    )
    assert quota.withdraw == ("c1",)
    # Claims on the wrong capacity type (the deadline moved it to on-demand) give way to new ones.
    moved = planned(
        result(waits()),
        [job(capacity_types=(CapacityType.ON_DEMAND,))],
        catalog(),
        [claim("c1")],
    )
    assert moved.withdraw == ("c1",) and moved.create[0].offering.capacity_type == CapacityType.ON_DEMAND


@given(
    gangs=st.lists(
        st.tuples(
            st.integers(1, 6),
            st.sampled_from([1, 2, 4, 8]),
            st.integers(0, 3),
            st.sampled_from([None, H100, "NVIDIA-L4"]),
        ),
        max_size=6,
    ),
    room=st.one_of(st.none(), st.integers(0, 200)),
)
def test_every_gang_asked_for_fits_whole_in_one_zone_and_the_quota_holds(
    gangs: list[tuple[int, int, int, str | None]], room: int | None
) -> None:
    jobs = [job(f"ns/j{i}", replicas=r, gpus=g, priority=p, gpu_type=t) for i, (r, g, p, t) in enumerate(gangs)]
    plan = planned(
        result(*(waits(j.key) for j in jobs), room=room),
        jobs,
        catalog(),
        [],
    )
    by_key = {j.key: j for j in jobs}
    assert len({r.gang for r in plan.create}) == len(plan.create)  # one request (one zone, one type) per gang
    for request in plan.create:
        gang, offering = by_key[request.gang], request.offering
        assert request.count * (offering.gpus // gang.gpus_per_replica) >= gang.replicas
        assert (request.count - 1) * (offering.gpus // gang.gpus_per_replica) < gang.replicas  # no node too many
        assert gang.gpu_type in (None, offering.gpu_product)
    if room is not None:
        assert sum(by_key[r.gang].replicas * by_key[r.gang].gpus_per_replica for r in plan.create) <= room


def test_a_malformed_capacity_type_is_refused() -> None:
    bad = [
        {
            "name": "x",
            "resources": {"nvidia.com/gpu": "8"},
            "offerings": [
                {
                    "Price": 1,
                    "Requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved-ish"]},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z"]},
                    ],
                }
            ],
        }
    ]
    with pytest.raises(ValueError, match="capacity type"):
        offerings_from_instance_types(bad, "nvidia.com/gpu", "nvidia.com/gpu.product")


def test_an_interruption_costs_the_share_of_time_it_throws_away() -> None:
    assert interruption_cost_factor(0.0, 600.0) == 1.0
    assert interruption_cost_factor(1 / 1200, 600.0) == pytest.approx(2.0)  # half of every hour lost
    assert interruption_cost_factor(1 / 600, 600.0) == float("inf")
    with pytest.raises(ValueError, match="rate"):
        interruption_cost_factor(-1.0, 600.0)


def test_spot_zones_are_chosen_by_expected_cost_interruptions_included() -> None:
    offerings = catalog()  # H100 spot: $39.33 in us-east-1a, $41.29 in 1b (5% more), $44.24 in 1c

    def zone(outlook: FleetOutlook, request: JobRequest | None = None) -> str:
        return planned(result(waits()), [request or job()], offerings, [], outlook).create[0].offering.zone

    # One interruption per node-hour in 1a: 4 nodes x 300 s lost each time, a third of the time wasted.
    assert zone(FleetOutlook(spot_interruptions={(H100, "us-east-1a"): 1 / 3600})) == "us-east-1b"
    # One per node-day costs 1.4%: less than 1b's 5% higher price.
    assert zone(FleetOutlook(spot_interruptions={(H100, "us-east-1a"): 1 / 86400})) == "us-east-1a"
    # The loss per interruption counts: an hour's work lost each time makes the day's one matter.
    day_long = FleetOutlook(spot_interruptions={(H100, "us-east-1a"): 1 / 86400}, interruption_loss=timedelta(hours=1))
    assert zone(day_long) == "us-east-1b"
    # On-demand is never weighed by spot's risk.
    risky = FleetOutlook(spot_interruptions={(H100, "us-east-1a"): 1 / 3600})
    assert zone(risky, job(capacity_types=(CapacityType.ON_DEMAND,))) == "us-east-1a"


def test_small_gangs_share_the_room_of_nodes_already_coming() -> None:
    small = [job(f"ns/s{i}", replicas=1, gpus=4) for i in range(3)]
    plan = planned(result(*(waits(j.key) for j in small)), small, catalog(), [])
    # Two 4-GPU gangs fill one 8-GPU node; the third asks for a second node.
    assert [(r.gang, r.count) for r in plan.create] == [("ns/s0", 1), ("ns/s2", 1)]
    # Next cycle: s0's node is coming; s1 keeps it as well, and nothing is asked again for either.
    coming = [claim("c0", gang="ns/s0"), claim("c2", gang="ns/s2")]
    again = planned(result(*(waits(j.key) for j in small)), small, catalog(), coming)
    assert again.create == () and again.withdraw == ()
    assert again.kept["ns/s1"] in (("c0",), ("c2",))
    assert again.zones == {"ns/s0": "us-east-1a", "ns/s1": "us-east-1a", "ns/s2": "us-east-1a"}
    # A gang does not split between coming nodes of one zone and new ones of another.
    big = job("ns/big", replicas=2, gpus=8)
    split = planned(result(waits("ns/big")), [big], catalog(), [claim("c0", gang="ns/s0", zone="us-east-1b")])
    ((request,),) = (split.create,)
    assert request.count == 2 and split.withdraw == ("c0",)


def test_no_nodes_beyond_the_node_pools_headroom_and_never_part_of_a_gang() -> None:
    limited = FleetOutlook(headroom=PoolHeadroom.shared(24))
    assert planned(result(waits()), [job()], catalog(), [], limited).create == ()  # 32 GPUs of nodes
    two = [job("ns/a", replicas=2), job("ns/b", replicas=2)]
    plan = planned(result(waits("ns/a"), waits("ns/b")), two, catalog(), [], limited)
    assert [(r.gang, r.count) for r in plan.create] == [("ns/a", 2)]


def test_each_pool_has_its_own_headroom_and_a_pool_without_a_figure_has_no_limit() -> None:
    on_spot = job("ns/spot", replicas=2)
    on_demand = job("ns/od", replicas=2, capacity_types=(CapacityType.ON_DEMAND,))
    both = [on_spot, on_demand]
    waiting = result(waits("ns/spot"), waits("ns/od"))
    pools = {CapacityType.SPOT: "gpu-spot", CapacityType.ON_DEMAND: "gpu-on-demand"}
    spot_full = FleetOutlook(headroom=PoolHeadroom({"gpu-spot": 8, "gpu-on-demand": 16}, pools))
    plan = planned(waiting, both, catalog(), [], spot_full)
    assert [(r.gang, r.offering.capacity_type, r.count) for r in plan.create] == [("ns/od", CapacityType.ON_DEMAND, 2)]
    unlimited_spot = FleetOutlook(headroom=PoolHeadroom({"gpu-on-demand": 0}, pools))
    assert [r.gang for r in planned(waiting, both, catalog(), [], unlimited_spot).create] == ["ns/spot"]
    # One pool for both capacity types: its room is shared.
    one_pool = FleetOutlook(headroom=PoolHeadroom({"gpus": 16}, dict.fromkeys(CapacityType, "gpus")))
    assert len(planned(waiting, both, catalog(), [], one_pool).create) == 1
