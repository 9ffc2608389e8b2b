"""GPUs stranded by shares: partly used, and no class of the demand waiting now can use what is free on them,
by the same test the packer's fragmentation measure makes (so the dashboard and the packer agree)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aisched.policy.sharing.assign import (
    Gpu,
    HeldShare,
    ShareRequest,
    _fragmentation,
    demand_classes,
    free_capacity,
    stranded_gpus,
)

H100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"


def _gpus(count: int, product: str = H100, memory: int = 80_000) -> list[Gpu]:
    return [Gpu("n1", f"gpu-{i}", product, memory) for i in range(count)]


def test_a_partly_used_gpu_is_stranded_when_its_free_part_fits_no_waiting_request() -> None:
    gpus = _gpus(3)
    held = [HeldShare(("n1", "gpu-0"), 700, 10_000), HeldShare(("n1", "gpu-1"), 500, 10_000)]
    waiting = [ShareRequest("w", 400, 10_000)]
    # gpu-0 has 300 free (< 400): stranded; gpu-1 has 500: usable; gpu-2 is unused: never stranded.
    assert stranded_gpus(gpus, held, waiting) == {("n1", "gpu-0"): 300}
    assert stranded_gpus(gpus, held, [ShareRequest("small", 300, 1_000)]) == {}


def test_memory_and_product_strand_a_gpu_too() -> None:
    gpus = [*_gpus(1), Gpu("n1", "gpu-9", L4, 23_000)]
    held = [HeldShare(("n1", "gpu-0"), 100, 79_000), HeldShare(("n1", "gpu-9"), 100, 1_000)]
    waiting = [ShareRequest("w", 200, 5_000, products=frozenset({H100}))]
    # gpu-0: compute left, memory not; gpu-9: an L4, a product the request does not take.
    assert stranded_gpus(gpus, held, waiting) == {("n1", "gpu-0"): 900, ("n1", "gpu-9"): 900}


def test_with_nothing_waiting_nothing_is_stranded_and_whole_gpus_waiting_strand_every_part() -> None:
    gpus = _gpus(2)
    held = [HeldShare(("n1", "gpu-0"), 300, 10_000)]
    assert stranded_gpus(gpus, held, []) == {}
    assert stranded_gpus(gpus, held, [], whole_gpus_waiting=2) == {("n1", "gpu-0"): 700}


@given(
    used=st.lists(st.integers(0, 1000), min_size=1, max_size=6),
    asks=st.lists(st.integers(1, 1000), min_size=1, max_size=4),
    whole=st.integers(0, 2),
)
def test_a_stranded_gpu_is_wholly_fragment_for_every_class_of_the_packer(
    used: list[int], asks: list[int], whole: int
) -> None:
    gpus = _gpus(len(used))
    held = [HeldShare(gpu.id, milli, 0) for gpu, milli in zip(gpus, used, strict=True) if milli]
    waiting = [ShareRequest(f"w{i}", milli, 0) for i, milli in enumerate(asks)]
    stranded = stranded_gpus(gpus, held, waiting, whole)
    classes = demand_classes([*waiting, *(ShareRequest(f"whole-{i}", 1000, 0) for i in range(whole))])
    free = free_capacity(gpus, held)
    for gpu in gpus:
        alone = {gpu.id: free[gpu.id]}
        # The packer's measure of this GPU alone: all of its free part for every class when stranded.
        measure = _fragmentation([gpu], alone, classes)
        if gpu.id in stranded:
            assert stranded[gpu.id] == free[gpu.id].milli
            assert abs(measure - free[gpu.id].milli * sum(c.weight for c in classes)) < 1e-6
        elif 0 < free[gpu.id].milli < 1000:
            assert measure < free[gpu.id].milli * sum(c.weight for c in classes) - 1e-9
