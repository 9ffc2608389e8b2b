"""Elastic jobs: they start with what fits and grow into GPUs left idle, staying consolidated,
once they have run a while."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from aisched.api.queue import DEFAULT_MIN_RUN_SECONDS
from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.queueing import QueueQuota
from aisched.policy.scheduler import GROWN, schedule
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import HOUR, T0, pending, run_on


def test_elastic_starts_at_what_fits_then_grows() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 4))
    blocker = run_on(snapshot, pending("ns/blocker", 8), ["r-n0"])
    elastic = pending("ns/elastic", 8, replicas=4, min_replicas=2, max_replicas=6)
    result = schedule(snapshot, [blocker, elastic], [], T0)
    (admission,) = result.admitted
    assert admission.replicas == 3
    # the blocker ends; the job grows into its node, within the rack it runs in
    snapshot.release(blocker.placement.gpus_by_node() if blocker.placement else {})
    running = run_on(snapshot, elastic, admission.placement.nodes, started=T0 - HOUR)
    grown = schedule(snapshot, [running], [], T0)
    (resize,) = grown.resized
    assert resize.reason == GROWN
    assert resize.replicas == 4
    assert resize.placement.nodes[:3] == admission.placement.nodes


def test_growth_keeps_the_grown_gang_in_the_tightest_domain_it_could_get() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2))
    others = run_on(snapshot, pending("ns/others", 7), ["r-n0"])
    job = pending("ns/elastic", 1, replicas=1, min_replicas=1, max_replicas=2)
    elastic = run_on(snapshot, job, ["r-n0"], started=T0 - HOUR)
    # Two 1-GPU replicas fit on one node: a second node would slow the job down, so it does not grow
    # onto the idle one next door.
    assert schedule(snapshot, [others, elastic], [], T0).resized == ()
    snapshot.release(others.placement.gpus_by_node() if others.placement else {})
    (resize,) = schedule(snapshot, [elastic], [], T0).resized
    assert resize.placement.nodes == ("r-n0", "r-n0")


def test_a_gang_grows_only_once_it_has_run_its_queues_minimum_run_time() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 1))
    job = pending("ns/elastic", 4, replicas=1, min_replicas=1, max_replicas=2)
    just_resized = run_on(snapshot, job, ["r-n0"], started=T0 - timedelta(seconds=DEFAULT_MIN_RUN_SECONDS - 1))
    assert schedule(snapshot, [just_resized], [], T0).resized == ()
    settled = replace(just_resized, started=T0 - timedelta(seconds=DEFAULT_MIN_RUN_SECONDS))
    (resize,) = schedule(snapshot, [settled], [], T0).resized
    assert resize.replicas == 2
    # A queue that does not time-slice has no minimum run: its jobs grow at once.
    eager = [QueueQuota("default", None, min_run_seconds=None)]
    assert schedule(snapshot, [just_resized], eager, T0).resized != ()


def test_an_elastic_job_started_smaller_is_held_to_the_tightest_domain_of_its_smaller_gang() -> None:
    # Two half-used nodes: two 4-GPU replicas would fit only one on each, spread over nodes
    # where one node could hold them; it starts with the one replica a node holds.
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2, used=[4, 4]))
    elastic = pending("ns/elastic", 4, replicas=4, min_replicas=1, max_replicas=4)
    (admission,) = schedule(snapshot, [elastic], [], T0).admitted
    assert admission.replicas == 1


def test_an_equal_priority_job_waiting_does_not_stop_growth_but_a_higher_one_does() -> None:
    snapshot = ClusterSnapshot([*rack_nodes("z", "a", 1), *rack_nodes("z", "b", 2)])
    job = pending("ns/elastic", 4, replicas=1, min_replicas=1, max_replicas=2)
    elastic = run_on(snapshot, job, ["a-n0"], started=T0 - HOUR)
    hog = run_on(snapshot, pending("ns/hog", 8, priority=9), ["b-n0"])
    # The 16-GPU gang waits for rack b, where GPUs are reserved for it; growth takes the idle GPUs
    # next to the elastic job meanwhile, which the gang would take back were they of use to it.
    equal = pending("ns/equal", 8, replicas=2)
    (resize,) = schedule(snapshot, [elastic, hog, equal], [], T0).resized
    assert resize.key == "ns/elastic" and resize.replicas == 2
    higher = replace(equal, key="ns/higher", priority=5)
    assert schedule(snapshot, [elastic, hog, higher], [], T0).resized == ()


def test_growth_that_would_spread_a_gang_its_new_size_does_not_need_is_left_out() -> None:
    # Ten 1-GPU replicas need two nodes, but the two GPUs free on the next node would make seven,
    # which one node could hold: the job stays at five rather than run spread.
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 2, used=[3, 6]))
    job = pending("ns/elastic", 1, replicas=5, min_replicas=2, max_replicas=10)
    elastic = run_on(snapshot, job, ["r-n0"] * 5, started=T0 - HOUR)
    assert schedule(snapshot, [elastic], [], T0).resized == ()
