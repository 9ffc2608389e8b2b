"""The operator's choice of GPU for fractional workers: never over a GPU's capacity, and against fragmentation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aisched.policy.sharing.assign import (
    Gpu,
    HeldShare,
    ShareRequest,
    assign_shares,
    demand_classes,
    free_capacity,
)

H100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"


def _gpus(node: str, count: int, product: str = H100, memory: int = 80_000) -> list[Gpu]:
    return [Gpu(node, f"gpu-{i}", product, memory) for i in range(count)]


def test_a_share_goes_where_it_leaves_a_whole_gpu_for_the_larger_waiting_share() -> None:
    gpus = _gpus("n1", 2)
    held = [HeldShare(("n1", "gpu-0"), 500, 10_000)]
    result = assign_shares(gpus, held, [ShareRequest("a", 400, 10_000)], waiting=[ShareRequest("w", 700, 10_000)])
    assert result.placed == {"a": ("n1", "gpu-0")}


def test_memory_counts_as_much_as_compute() -> None:
    gpus = _gpus("n1", 2)
    # gpu-0 has compute left but almost no memory: a share that needs memory cannot use it.
    held = [HeldShare(("n1", "gpu-0"), 200, 79_000)]
    result = assign_shares(gpus, held, [ShareRequest("a", 100, 5_000)])
    assert result.placed == {"a": ("n1", "gpu-1")}


def test_products_and_nodes_restrict_the_choice_and_an_unplaceable_share_says_why() -> None:
    gpus = [*_gpus("n1", 1, L4, 23_000), *_gpus("n2", 1)]
    result = assign_shares(
        gpus,
        [],
        [
            ShareRequest("h", 500, 1_000, products=frozenset({H100})),
            ShareRequest("l", 500, 1_000, nodes=frozenset({"n1"})),
            ShareRequest("big", 600, 30_000, products=frozenset({L4})),
        ],
    )
    assert result.placed == {"h": ("n2", "gpu-0"), "l": ("n1", "gpu-0")}
    assert "60% of its compute and 30000 MiB" in result.unplaced["big"]


def test_three_shares_that_fit_one_gpu_share_it() -> None:
    gpus = _gpus("n1", 4)
    requests = [ShareRequest("svc-0", 400, 30_000), ShareRequest("w-0", 300, 20_000), ShareRequest("w-1", 300, 20_000)]
    result = assign_shares(gpus, [], requests)
    assert len(set(result.placed.values())) == 1 and not result.unplaced


def test_demand_classes_weigh_by_share_asked() -> None:
    classes = demand_classes([ShareRequest("a", 100, 0), ShareRequest("b", 100, 0), ShareRequest("c", 600, 0)])
    assert [(c.gpu_milli, round(c.weight, 3)) for c in classes] == [(100, 0.25), (600, 0.75)]


_requests = st.lists(
    st.builds(
        ShareRequest,
        key=st.uuids().map(str),
        milli=st.integers(1, 1000),
        memory_mib=st.integers(0, 40_000),
        products=st.sampled_from([frozenset(), frozenset({H100}), frozenset({L4})]),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    requests=_requests,
    held_milli=st.lists(st.integers(0, 1000), min_size=5, max_size=5),
)
def test_no_gpu_is_ever_given_more_than_it_has(requests: list[ShareRequest], held_milli: list[int]) -> None:
    gpus = [*_gpus("n1", 3), *_gpus("n2", 2, L4, 23_000)]
    held = [HeldShare(g.id, m, m * 20) for g, m in zip(gpus, held_milli, strict=True)]
    result = assign_shares(gpus, held, requests)
    assert set(result.placed) | set(result.unplaced) == {r.key for r in requests}
    assert not set(result.placed) & set(result.unplaced)
    by_key = {r.key: r for r in requests}
    placed = [HeldShare(device, by_key[k].milli, by_key[k].memory_mib) for k, device in result.placed.items()]
    product = {g.id: g.product for g in gpus}
    for key, device in result.placed.items():
        assert not by_key[key].products or product[device] in by_key[key].products
    free = free_capacity(gpus, [*held, *placed])
    assert all(left.milli >= 0 and left.memory_mib >= 0 for left in free.values())
    for key in result.unplaced:  # refused only when no GPU could take it, even after the others
        request = by_key[key]
        assert not any(
            left.milli >= request.milli
            and left.memory_mib >= request.memory_mib
            and (not request.products or product[device] in request.products)
            for device, left in free.items()
        )
