"""Serving replica placement: capacity mix, spread across failure domains, spot replacement."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from aisched.api.common import CapacityType, SpotPolicy
from aisched.api.inference_service import InferenceServiceSpec
from aisched.policy.cluster import ClusterSnapshot, Node, Taint, Toleration, TolerationOperator
from aisched.policy.serving import (
    PlanReason,
    ServingPlan,
    ServingReplica,
    ServingRequest,
    plan_serving,
)
from tests.builders import an_inference_service

SPOT, ON_DEMAND = CapacityType.SPOT, CapacityType.ON_DEMAND


def node(
    name: str,
    zone: str,
    capacity: CapacityType = ON_DEMAND,
    *,
    gpus: int = 8,
    used: int = 0,
    product: str = "NVIDIA-H100",
    **extra: object,
) -> Node:
    return Node(
        name=name,
        allocatable_gpus=gpus,
        used_gpus=used,
        gpu_product=product,
        capacity_type=capacity,
        zone=zone,
        **extra,  # type: ignore[arg-type]
    )


def mixed_cluster() -> ClusterSnapshot:
    """Two zones, each with two on-demand and two spot nodes of 8 GPUs."""
    return ClusterSnapshot(
        node(f"{zone}-{kind}{i}", zone, capacity)
        for zone in ("a", "b")
        for kind, capacity in (("od", ON_DEMAND), ("spot", SPOT))
        for i in (1, 2)
    )


def request(policy: SpotPolicy = SpotPolicy.PREFER, floor: int = 1, gpus: int = 1) -> ServingRequest:
    return ServingRequest(gpus_per_replica=gpus, spot_policy=policy, min_on_demand_replicas=floor)


def running(name: str, on: str, capacity: CapacityType = ON_DEMAND, ready: bool = True) -> ServingReplica:
    return ServingReplica(name=name, node=on, capacity_type=capacity, ready=ready)


def zones_of(plan: ServingPlan) -> Counter[str | None]:
    return Counter(s.zone for s in plan.start)


def test_spreads_across_zones_then_nodes() -> None:
    plan = plan_serving([], 4, request(SpotPolicy.NEVER), mixed_cluster())
    assert zones_of(plan) == {"a": 2, "b": 2}
    assert len({s.node for s in plan.start}) == 4
    assert plan.reason is PlanReason.SCALING


def test_replica_gpus_stay_on_one_node() -> None:
    cluster = ClusterSnapshot([node("a1", "a", used=6), node("a2", "a", used=4), node("b1", "b", used=5)])
    plan = plan_serving([], 2, request(SpotPolicy.NEVER, gpus=4), cluster)
    assert [s.node for s in plan.start] == ["a2"]
    assert plan.unplaced == 1
    assert plan.reason is PlanReason.INSUFFICIENT_CAPACITY
    assert "1 replica(s) of 4 GPU(s) fit on no on-demand node" in plan.message


def test_keeps_a_floor_of_on_demand_and_puts_the_rest_on_spot() -> None:
    plan = plan_serving([], 5, request(SpotPolicy.PREFER, floor=2), mixed_cluster())
    kinds = Counter(s.capacity_type for s in plan.start)
    assert kinds == {ON_DEMAND: 2, SPOT: 3}


def test_existing_on_demand_replicas_count_towards_the_floor() -> None:
    existing = [running("r0", "a-od1"), running("r1", "b-od1")]
    plan = plan_serving(existing, 4, request(SpotPolicy.PREFER, floor=2), mixed_cluster())
    assert {s.capacity_type for s in plan.start} == {SPOT}


def test_never_uses_only_on_demand() -> None:
    plan = plan_serving([], 6, request(SpotPolicy.NEVER, floor=0), mixed_cluster())
    assert {s.capacity_type for s in plan.start} == {ON_DEMAND}


def test_prefer_falls_back_to_on_demand_when_spot_is_full() -> None:
    cluster = ClusterSnapshot([node("od", "a"), node("spot", "a", SPOT, used=8)])
    plan = plan_serving([], 3, request(SpotPolicy.PREFER, floor=1), cluster)
    assert [s.capacity_type for s in plan.start] == [ON_DEMAND] * 3
    assert plan.reason is PlanReason.SCALING


def test_only_never_puts_more_than_the_floor_on_demand() -> None:
    cluster = ClusterSnapshot([node("od", "a"), node("spot", "a", SPOT, gpus=2)])
    plan = plan_serving([], 4, request(SpotPolicy.ONLY, floor=1), cluster)
    assert Counter(s.capacity_type for s in plan.start) == {ON_DEMAND: 1, SPOT: 2}
    assert plan.unplaced == 1
    assert "fit on no spot node" in plan.message


def test_floor_goes_to_spot_when_on_demand_is_full_and_says_so() -> None:
    cluster = ClusterSnapshot([node("od", "a", used=8), node("spot", "a", SPOT)])
    plan = plan_serving([], 2, request(SpotPolicy.PREFER, floor=1), cluster)
    assert [s.capacity_type for s in plan.start] == [SPOT, SPOT]
    assert plan.reason is PlanReason.ON_DEMAND_FLOOR_UNMET
    assert "1 of the 1 on-demand replica(s) run on spot" in plan.message


def test_gpu_type_and_taints_limit_the_nodes() -> None:
    spot_taint = Taint("cloud.google.com/gke-spot", "true")
    cluster = ClusterSnapshot(
        [
            node("a100", "a", product="NVIDIA-A100"),
            node("tainted", "a", SPOT, taints=(spot_taint,)),
            node("h100", "b"),
        ]
    )
    untolerated = ServingRequest(1, "NVIDIA-H100", SpotPolicy.PREFER, min_on_demand_replicas=0)
    assert [s.node for s in plan_serving([], 1, untolerated, cluster).start] == ["h100"]
    tolerates_spot = Toleration(key="cloud.google.com/gke-spot", operator=TolerationOperator.EXISTS)
    tolerant = ServingRequest(1, "NVIDIA-H100", SpotPolicy.PREFER, 0, (tolerates_spot,))
    assert [s.node for s in plan_serving([], 1, tolerant, cluster).start] == ["tainted"]


def test_new_replicas_go_where_the_service_is_thin() -> None:
    existing = [running("r0", "a-od1"), running("r1", "a-od2")]
    plan = plan_serving(existing, 4, request(SpotPolicy.NEVER), mixed_cluster())
    assert zones_of(plan) == {"b": 2}


def test_scale_down_retires_unready_then_dearer_then_crowded() -> None:
    existing = [
        running("od-a", "a-od1"),
        running("od-b", "b-od1"),
        running("spot-a1", "a-spot1", SPOT),
        running("spot-a2", "a-spot2", SPOT),
        running("spot-b", "b-spot1", SPOT),
        running("starting", "b-spot2", SPOT, ready=False),
    ]
    cluster = mixed_cluster()
    assert plan_serving(existing, 5, request(floor=1), cluster).retire == ("starting",)
    assert plan_serving(existing, 4, request(floor=1), cluster).retire == ("od-a", "starting")
    three = plan_serving(existing, 3, request(floor=1), cluster)
    assert three.retire == ("od-a", "spot-a1", "starting")
    assert three.start == ()


def test_scale_down_never_breaks_the_floor() -> None:
    existing = [running("od", "a-od1"), running("s1", "a-spot1", SPOT), running("s2", "b-spot1", SPOT)]
    plan = plan_serving(existing, 1, request(floor=1), mixed_cluster())
    assert plan.retire == ("s1", "s2")


def test_interrupted_replica_is_replaced_before_it_is_retired() -> None:
    doomed_cluster = ClusterSnapshot(replace(n, interrupted=n.name == "a-spot1") for n in mixed_cluster().nodes())
    existing = [running("od", "a-od1"), running("s1", "a-spot1", SPOT), running("s2", "b-spot1", SPOT)]

    notice = plan_serving(existing, 3, request(floor=1), doomed_cluster)
    assert notice.reason is PlanReason.REPLACING_INTERRUPTED
    assert notice.retire == ()
    (replacement,) = notice.start
    assert replacement.replaces == "s1"
    assert replacement.node != "a-spot1"
    assert replacement.capacity_type is SPOT

    starting = [*existing, running("s3", replacement.node, SPOT, ready=False)]
    assert plan_serving(starting, 3, request(floor=1), doomed_cluster).retire == ()
    ready = [*existing, running("s3", replacement.node, SPOT, ready=True)]
    done = plan_serving(ready, 3, request(floor=1), doomed_cluster)
    assert (done.retire, done.start) == (("s1",), ())


def test_replica_on_a_vanished_node_is_retired_and_replaced() -> None:
    existing = [running("od", "a-od1"), running("lost", "gone", SPOT, ready=False)]
    plan = plan_serving(existing, 2, request(floor=1), mixed_cluster())
    assert plan.retire == ("lost",)
    assert [s.replaces for s in plan.start] == ["lost"]


def test_up_to_date_plan_does_nothing() -> None:
    existing = [running("od", "a-od1"), running("s", "b-spot1", SPOT)]
    plan = plan_serving(existing, 2, request(floor=1), mixed_cluster())
    assert (plan.start, plan.retire, plan.reason) == ((), (), PlanReason.UP_TO_DATE)


def test_request_from_spec() -> None:
    service = (
        an_inference_service()
        .set("gpusPerReplica", 2)
        .set("gpuType", "NVIDIA-L4")
        .set("spot", {"policy": "Prefer", "minOnDemandReplicas": 3})
        .obj()
    )
    spec = InferenceServiceSpec.model_validate(service["spec"])
    assert ServingRequest.from_spec(spec) == ServingRequest(2, "NVIDIA-L4", SpotPolicy.PREFER, 3)


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSnapshot:
    """Up to four zones of up to four 8-GPU nodes, each spot or on-demand and partly used."""
    zones, nodes_per_zone = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    used = draw(st.lists(st.integers(0, 8), min_size=16, max_size=16))
    spot_mask = draw(st.lists(st.booleans(), min_size=16, max_size=16))
    names = [(f"z{z}", f"z{z}-n{i}") for z in range(zones) for i in range(nodes_per_zone)]
    return ClusterSnapshot(
        node(name, zone, SPOT if spot_mask[k] else ON_DEMAND, used=used[k]) for k, (zone, name) in enumerate(names)
    )


@given(
    cluster=clusters(),
    desired=st.integers(0, 40),
    serving=st.builds(
        request,
        policy=st.sampled_from(list(SpotPolicy)),
        floor=st.integers(0, 5),
        gpus=st.sampled_from([1, 2, 4, 8]),
    ),
)
def test_plans_fit_and_account_for_every_replica(
    cluster: ClusterSnapshot, desired: int, serving: ServingRequest
) -> None:
    gpus, policy, floor = serving.gpus_per_replica, serving.spot_policy, serving.min_on_demand_replicas
    plan = plan_serving([], desired, serving, cluster)
    assert len(plan.start) + plan.unplaced == desired
    taken = Counter[str]()
    for s in plan.start:
        taken[s.node] += gpus
    assert all(taken[n] <= cluster.free_gpus(n) for n in taken)
    on_demand = sum(s.capacity_type is ON_DEMAND for s in plan.start)
    if policy is SpotPolicy.NEVER:
        assert on_demand == len(plan.start)
    if policy is SpotPolicy.ONLY:
        assert on_demand <= min(floor, desired)
    if plan.unplaced == 0 and plan.reason is not PlanReason.ON_DEMAND_FLOOR_UNMET and policy is not SpotPolicy.NEVER:
        assert on_demand >= min(floor, desired)


@given(zones=st.integers(1, 5), desired=st.integers(0, 30))
def test_zone_spread_is_even_when_room_is_ample(zones: int, desired: int) -> None:
    cluster = ClusterSnapshot(node(f"z{z}-n{i}", f"z{z}") for z in range(zones) for i in range(8))
    plan = plan_serving([], desired, request(SpotPolicy.NEVER), cluster)
    counts = [zones_of(plan)[f"z{z}"] for z in range(zones)]
    assert max(counts) - min(counts) <= 1
