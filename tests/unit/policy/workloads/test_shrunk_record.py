"""shrunk_record: what a gang scaled down in place (a RayCluster's autoscaler) keeps of its admission."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.workloads.pod_nodes import shrunk_record

RECORD = ("n1", "n1", "n2", "n3")


def test_a_gang_that_still_wants_every_place_keeps_its_record() -> None:
    assert shrunk_record(RECORD, [], wanted=4) is None
    assert shrunk_record(RECORD, [("w0", "n1")], wanted=6) is None


def test_places_no_pod_takes_go_down_to_what_the_spec_wants() -> None:
    assert shrunk_record(RECORD, [("w0", "n2")], wanted=2) == ("n1", "n2")


def test_a_place_a_pod_still_takes_stays_whatever_the_spec_says() -> None:
    placed = [("w0", "n1"), ("w1", "n3"), ("w2", "n2")]
    assert shrunk_record(RECORD, placed, wanted=1) == ("n1", "n2", "n3")


def test_a_pod_beyond_the_record_on_a_node_takes_no_place_of_it() -> None:
    assert shrunk_record(RECORD, [("w0", "n3"), ("w1", "n3")], wanted=1) == ("n3",)


def test_a_group_scaled_to_none_keeps_one_place() -> None:
    assert shrunk_record(RECORD, [], wanted=0) == ("n1",)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(st.sampled_from(("a", "b", "c")), min_size=1, max_size=8),
    pods=st.lists(st.sampled_from(("a", "b", "c", "d")), max_size=8),
    wanted=st.integers(0, 10),
)
def test_what_is_kept_is_of_the_record_and_holds_every_placed_pod(
    nodes: list[str], pods: list[str], wanted: int
) -> None:
    placed = [(f"w{i}", node) for i, node in enumerate(pods)]
    kept = shrunk_record(nodes, placed, wanted)
    record = Counter(nodes)
    taking = Counter({node: min(count, record[node]) for node, count in Counter(pods).items()})
    if kept is None:
        assert max(wanted, taking.total(), 1) >= len(nodes)
        return
    assert Counter(kept) <= record  # nothing beyond what was admitted
    assert taking <= Counter(kept)  # every place a pod takes stays
    assert len(kept) == max(wanted, taking.total(), 1) < len(nodes)
