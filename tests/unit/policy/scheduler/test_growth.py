"""Elastic jobs: they start with what fits and grow into GPUs left idle."""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.policy.scheduler import GROWN, schedule
from tests.unit.policy.gangs import rack_nodes
from tests.unit.policy.scheduler.cycles import T0, pending, run_on


def test_elastic_starts_at_what_fits_then_grows() -> None:
    snapshot = ClusterSnapshot(rack_nodes("z", "r", 4))
    blocker = run_on(snapshot, pending("ns/blocker", 8), ["r-n0"])
    elastic = pending("ns/elastic", 8, replicas=4, min_replicas=2, max_replicas=6)
    result = schedule(snapshot, [blocker, elastic], [], T0)
    (admission,) = result.admitted
    assert admission.replicas == 3
    # the blocker ends; the job grows into its node, within the rack it runs in
    snapshot.release(blocker.placement.gpus_by_node() if blocker.placement else {})
    running = run_on(snapshot, elastic, admission.placement.nodes)
    grown = schedule(snapshot, [running], [], T0)
    (resize,) = grown.resized
    assert resize.reason == GROWN
    assert resize.replicas == 4
    assert resize.placement.nodes[:3] == admission.placement.nodes
