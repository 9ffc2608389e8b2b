"""MIG repartitioning bounded per tenant, and the way back to whole GPUs: pure, time passed in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.queueing import QueueQuota
from aisched.policy.sharing.mig_configs import DISABLED, MigNode, Repartition
from aisched.policy.sharing.mig_plan import (
    MigAsk,
    QueueRepartition,
    gpus_needed,
    plan_back_to_whole,
    plan_bounded_repartition,
    quota_ceilings,
)

H100 = "H100-80GB"


def whole(name: str, gpus: int = 8) -> MigNode:
    return MigNode(name, H100, gpus, DISABLED, True)


def sliced(name: str, gpus: int = 8, used: int = 0, *, schedulable: bool = True) -> MigNode:
    """A node of GPUS all-1g.10gb, USED instances held (and so as many pods holding a GPU)."""
    allocatable = {"1g.10gb": 7 * gpus}
    return MigNode(name, H100, gpus, "all-1g.10gb", True, allocatable, {"1g.10gb": used}, used, schedulable)


def test_instances_are_packed_by_what_one_gpu_of_their_profile_holds() -> None:
    assert gpus_needed(H100, {"1g.10gb": 6}) == 1  # 6/7 of a GPU
    assert gpus_needed(H100, {"1g.10gb": 8}) == 2
    assert gpus_needed(H100, {"3g.40gb": 3}) == 2  # two 3g to a GPU
    assert gpus_needed(H100, {"4g.40gb": 3}) == 3  # one 4g to a GPU
    assert gpus_needed(H100, {"1g.10gb": 7, "3g.40gb": 1}) == 2
    assert gpus_needed(H100, {"1g.5gb": 3}) == 0  # another model's profile fills none of these


def test_a_tenant_charged_six_sevenths_of_a_gpu_slices_no_8_gpu_node_but_a_node_it_fills() -> None:
    nodes = [whole("big", 8), whole("small", 1)]
    asks = [MigAsk("team", "1g.10gb", 6)]
    assert plan_bounded_repartition(nodes, asks, {}, {}) == QueueRepartition("small", "all-1g.10gb", "team")
    assert plan_bounded_repartition([whole("big", 8)], asks, {}, {}) is None
    # 56 instances fill 8 GPUs: the big node is its to slice.
    many = [MigAsk("team", "1g.10gb", 56)]
    assert plan_bounded_repartition([whole("big", 8)], many, {}, {}) == QueueRepartition("big", "all-1g.10gb", "team")


def test_what_is_sliced_for_a_queue_counts_against_its_bound_and_its_quota() -> None:
    asks = [MigAsk("team", "1g.10gb", 56)]
    # Its 8 free instances on a node sliced for it serve part of the ask: 56 fill 8 GPUs, 8 are sliced.
    done = [sliced("mine", 8), whole("next", 8)]
    assert plan_bounded_repartition(done, asks, {"mine": "team"}, {}) is None
    busy = [sliced("mine", 8, used=56), whole("next", 8)]  # held by its running instances
    assert plan_bounded_repartition(busy, asks, {"mine": "team"}, {}) == QueueRepartition("next", "all-1g.10gb", "team")
    # Its quota: 12 GPUs at most, 8 sliced for it already.
    assert plan_bounded_repartition(busy, asks, {"mine": "team"}, {"team": 12}) is None
    assert plan_bounded_repartition([whole("next", 8)], asks, {}, {"team": 4}) is None


def test_the_quota_ceiling_counts_what_the_queue_may_borrow() -> None:
    queues = [
        QueueQuota("solo", 4, borrowing_enabled=False, cohort="c"),
        QueueQuota("capped", 4, cohort="c", borrowing_limit=2),
        QueueQuota("open", 4, cohort="c"),
        QueueQuota("alone", 6),
        QueueQuota.unlimited("free"),
    ]
    assert quota_ceilings(queues) == {"solo": 4, "capped": 6, "open": 12, "alone": 6, "free": None}


def test_a_free_sliced_node_goes_back_to_whole_after_the_hold_down() -> None:
    nodes = [sliced("a"), sliced("busy", used=1)]
    assert plan_back_to_whole(nodes, [], {"a": 100.0}, 129.0, 30.0) is None
    assert plan_back_to_whole(nodes, [], {"a": 100.0}, 130.0, 30.0) == Repartition("a", DISABLED)
    assert plan_back_to_whole(nodes, [], {}, 1e9, 30.0) is None  # not seen free yet: its hold-down starts now
    assert plan_back_to_whole([sliced("busy", used=1)], [], {"busy": 0.0}, 1e9, 0.0) is None  # one instance held


def test_a_node_a_waiting_instance_could_use_stays_sliced() -> None:
    nodes = [sliced("a")]
    waiting = [MigAsk("team", "1g.10gb", 3)]
    assert plan_back_to_whole(nodes, waiting, {"a": 0.0}, 1e9, 30.0, whole_gpus_waiting=32) is None
    other = [MigAsk("team", "3g.40gb", 3)]  # its 1g instances are of no use to a 3g ask
    assert plan_back_to_whole(nodes, other, {"a": 0.0}, 1e9, 30.0) == Repartition("a", DISABLED)


def test_a_whole_gpu_gang_waiting_sets_free_sliced_gpus_back_at_once() -> None:
    nodes = [sliced("a"), whole("w")]
    assert plan_back_to_whole(nodes, [], {"a": 100.0}, 100.0, 300.0) is None
    assert plan_back_to_whole(nodes, [], {"a": 100.0}, 100.0, 300.0, whole_gpus_waiting=32) == Repartition(
        "a", DISABLED
    )
    cordoned = [sliced("a", schedulable=False)]  # another's maintenance, or a repartition of ours
    assert plan_back_to_whole(cordoned, [], {"a": 0.0}, 1e9, 0.0, whole_gpus_waiting=8) is None


@settings(max_examples=200, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4),
    asked=st.integers(1, 120),
    ceiling=st.one_of(st.none(), st.integers(0, 40)),
    slicing_rounds=st.integers(1, 5),
)
def test_no_sequence_of_repartitions_slices_more_than_the_ask_fills_or_the_quota_allows(
    gpus: list[int], asked: int, ceiling: int | None, slicing_rounds: int
) -> None:
    nodes = [whole(f"n{i}", g) for i, g in enumerate(gpus)]
    mine: dict[str, str] = {}
    asks = [MigAsk("team", "1g.10gb", asked)]
    for _ in range(slicing_rounds):  # each repartition applied, none of its instances used yet
        plan = plan_bounded_repartition(nodes, asks, mine, {"team": ceiling})
        if plan is None:
            break
        mine[plan.node] = plan.queue
        nodes = [sliced(n.name, n.gpus) if n.name == plan.node else n for n in nodes]
    total = sum(n.gpus for n in nodes if n.name in mine)
    assert total <= gpus_needed(H100, {"1g.10gb": asked})
    assert ceiling is None or total <= ceiling
