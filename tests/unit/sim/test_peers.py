"""Kueue, Volcano and Tiresias as the simulator runs them, on cases worked out by hand."""

from __future__ import annotations

from aisched.policy.cluster import ClusterSnapshot
from aisched.sim.clusters import GridSpec, generated_cluster
from aisched.sim.jobs import SimJob
from aisched.sim.peers.kueue import KueuePolicy
from aisched.sim.peers.tiresias import TiresiasPolicy
from aisched.sim.peers.volcano import VolcanoPolicy
from aisched.sim.speed import SpeedModel

# Two racks of two 8-GPU nodes.
NODES = generated_cluster(GridSpec(nodes=4, nodes_per_rack=2, racks_per_zone=2))


def job(key: str, replicas: int, per_pod: int, arrival: float = 0.0, model: str = "") -> SimJob:
    return SimJob(key, arrival, 100.0, replicas, per_pod, model)


def test_kueue_puts_a_gang_in_the_fullest_rack_that_holds_it_and_does_not_block_behind_a_big_one() -> None:
    kueue = KueuePolicy(ClusterSnapshot(NODES))
    kueue.submit(job("small", 1, 4), 0)
    first = kueue.cycle(0)
    assert [s.job.key for s in first.started] == ["small"]
    kueue.submit(job("huge", 8, 8), 1)  # the whole cluster: cannot start while small runs
    kueue.submit(job("pair", 2, 4), 1)
    second = kueue.cycle(1)
    (pair,) = second.started
    assert pair.job.key == "pair"
    # BestFit: the rack with the least room that holds both pods, the pods on the node with most room.
    assert set(pair.nodes) <= {n for n in kueue.snapshot.node_names() if "r01" in n}
    assert len(set(pair.nodes)) == 1


def test_volcano_keeps_a_gang_whole_or_not_at_all_and_packs_pods() -> None:
    volcano = VolcanoPolicy(ClusterSnapshot(NODES))
    volcano.submit(job("a", 1, 4), 0)
    volcano.submit(job("b", 1, 4), 0)
    started = volcano.cycle(0).started
    assert started[0].nodes == started[1].nodes  # binpack: the second pod onto the part-used node
    volcano.submit(job("too-big", 4, 8), 1)
    assert volcano.cycle(1).started == []
    assert volcano.snapshot.used_total == 8  # nothing of the failed gang held


def test_tiresias_preempts_the_job_with_most_service_for_a_new_one() -> None:
    tiresias = TiresiasPolicy(ClusterSnapshot(NODES), SpeedModel({"bert": 2.0}))
    tiresias.submit(job("long", 4, 8), 0)
    assert [s.job.key for s in tiresias.cycle(0).started] == ["long"]
    tiresias.submit(job("new", 1, 8, arrival=4000.0), 4000.0)  # long has 32 x 4000 GPU-s: a lower queue
    outcome = tiresias.cycle(4000.0)
    assert [j.key for j in outcome.stopped] == ["long"]
    assert [s.job.key for s in outcome.started] == ["new"]
    tiresias.finish(job("new", 1, 8), 4100.0)
    assert [s.job.key for s in tiresias.cycle(4100.0).started] == ["long"]


def test_tiresias_consolidates_only_sensitive_models() -> None:
    tiresias = TiresiasPolicy(ClusterSnapshot(NODES), SpeedModel({"bert": 2.0, "cifar10": 1.05}))
    tiresias.snapshot.allocate({"zone-0-r01-n01": 6})
    tiresias.submit(job("bert", 4, 1, model="bert"), 0)
    tiresias.submit(job("cifar", 4, 1, model="cifar10"), 0)
    bert, cifar = tiresias.cycle(0).started
    assert len(set(bert.nodes)) == 1
    assert len(set(cifar.nodes)) > 1  # first fit takes the two GPUs left on the first node


def test_tiresias_wakes_at_a_demotion_and_lets_the_newer_job_in_then() -> None:
    # One 32-GPU gang fills the cluster; a 1-GPU job waits behind it in the same, first queue.
    tiresias = TiresiasPolicy(ClusterSnapshot(NODES), SpeedModel({}))
    tiresias.submit(job("gang", 4, 8), 0)
    first = tiresias.cycle(0)
    # 3,600 GPU-seconds at 32 GPUs: the gang leaves the first queue at 112.5 s.
    assert first.wake_at is not None and abs(first.wake_at - 112.5) < 1e-3
    tiresias.submit(job("one", 1, 1, arrival=50.0), 50.0)
    waiting = tiresias.cycle(50.0)
    assert waiting.started == [] and waiting.stopped == []  # same queue, FIFO: the gang keeps its GPUs
    assert waiting.wake_at is not None and abs(waiting.wake_at - 112.5) < 1e-3
    demoted = tiresias.cycle(waiting.wake_at)
    assert [j.key for j in demoted.stopped] == ["gang"]
    assert [s.job.key for s in demoted.started] == ["one"]
    # The next edge, 36,000 GPU-seconds, is far off and the gang no longer runs: only "one"'s own.
    assert demoted.wake_at is not None and abs(demoted.wake_at - (waiting.wake_at + 3600.0)) < 1e-3
