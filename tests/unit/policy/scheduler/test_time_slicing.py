"""Attained service: bands, least-service-first order, and time-slicing by preemption to a checkpoint."""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import schedule
from aisched.policy.scheduler.preemption import MAX_SLICES_PER_CYCLE
from aisched.policy.scheduler.service import FIRST_BAND_GPU_SECONDS, attained_gpu_seconds, service_band
from tests.levels import ZONE
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import HOUR, T0, keys, pending, run_on


def test_bands_grow_tenfold_and_count_the_current_run() -> None:
    assert [service_band(s) for s in (0, 3599, 3600, 36_000, 360_000, 1e12)] == [0, 0, 1, 2, 3, 3]
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    running = run_on(snapshot, pending("ns/a", 8, attained_gpu_seconds=100.0), ["r-n0"], started=T0 - HOUR)
    assert attained_gpu_seconds(running, T0) == 100.0 + 8 * 3600


def test_the_first_band_edge_is_a_parameter_of_the_cycle() -> None:
    assert [service_band(s, first_edge=10.0) for s in (9, 10, 100, 1000)] == [0, 1, 2, 3]
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    # 8 GPUs for 10 s: band 0 with the default edge (a GPU-hour), band 1 with an edge of 60 GPU-seconds.
    long = run_on(snapshot, pending("ns/long", 8), ["r-n0"], started=T0 - 10 * (HOUR / 3600))
    short = pending("ns/short", 8)
    quick = [QueueQuota("default", None, min_run_seconds=5)]
    assert keys(schedule(snapshot, [long, short], quick, T0))[2] == []
    assert keys(schedule(snapshot, [long, short], quick, T0, first_band_gpu_seconds=60.0))[2] == ["ns/long"]


def test_the_job_with_least_service_goes_first_among_equals() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    veteran = pending("ns/veteran", 8, created=T0 - HOUR, attained_gpu_seconds=FIRST_BAND_GPU_SECONDS)
    newcomer = pending("ns/newcomer", 8, created=T0)
    admitted, _, _ = keys(schedule(snapshot, [veteran, newcomer], [], T0))
    assert admitted == ["ns/newcomer"]


def test_a_gang_with_more_service_is_preempted_for_one_with_less_after_its_minimum_run() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    long = run_on(snapshot, pending("ns/long", 8), ["r-n0"], started=T0 - HOUR)  # 8 GPU-hours: band 1
    short = pending("ns/short", 8)
    result = schedule(snapshot, [long, short], [], T0)
    assert keys(result) == (["ns/short"], [], ["ns/long"])
    # Not before its queue's minimum run time; not at all where the queue does not time-slice.
    strict = [QueueQuota("default", None, min_run_seconds=2 * 3600)]
    assert keys(schedule(snapshot, [long, short], strict, T0))[2] == []
    off = [QueueQuota("default", None, min_run_seconds=None)]
    assert keys(schedule(snapshot, [long, short], off, T0))[2] == []


def test_equal_bands_never_preempt_each_other() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    first = run_on(snapshot, pending("ns/first", 1), ["r-n0"] * 8, started=T0 - HOUR)  # 8 x 1 GPU: band 1
    second = pending("ns/second", 8, attained_gpu_seconds=2 * FIRST_BAND_GPU_SECONDS)  # band 1 as well
    assert keys(schedule(snapshot, [first, second], [], T0))[2] == []


def test_a_gang_naming_no_level_waits_for_the_tightest_domain_that_could_hold_it() -> None:
    snapshot = ClusterSnapshot([*rack_nodes("z", "r0", 2), *rack_nodes("z", "r1", 2)])
    # One free GPU block of 4 on each rack's first node: 8 free in all, but no node with 8.
    busy = [
        run_on(snapshot, pending(f"ns/b{r}{n}", 4 if n == 0 else 8), [f"r{r}-n{n}"], started=T0)
        for r in range(2)
        for n in range(2)
    ]
    gang = pending("ns/gang", 4, replicas=2)
    _, waiting, _ = keys(schedule(snapshot, [*busy, gang], [], T0))
    assert waiting == ["ns/gang"]
    spread_allowed = pending("ns/gang", 4, replicas=2, required_level=ZONE)
    admitted, _, _ = keys(schedule(snapshot, [*busy, spread_allowed], [], T0))
    assert admitted == ["ns/gang"]


def test_a_gang_whose_replicas_no_node_holds_is_told_so_rather_than_held_to_a_domain() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    _, waiting, _ = keys(schedule(snapshot, [pending("ns/huge", 64, replicas=2)], [], T0))
    assert waiting == ["ns/huge"]


def test_one_cycle_slices_at_most_its_bound_and_the_rest_follow_in_the_next() -> None:
    count = MAX_SLICES_PER_CYCLE + 8
    snapshot = ClusterSnapshot(rack_nodes("z", "r", count))
    long = [
        run_on(snapshot, pending(f"ns/long{i}", 8), [f"r-n{i}"], started=T0 - HOUR)  # band 1 each
        for i in range(count)
    ]
    short = [pending(f"ns/short{i}", 8) for i in range(count)]
    admitted, _, preempted = keys(schedule(snapshot, [*long, *short], [], T0))
    assert len(preempted) == len(admitted) == MAX_SLICES_PER_CYCLE
